"""Annotate's attribute picker (off by default): a reader sets the side of a ticked finding and saves."""

from __future__ import annotations

import shutil

from streamlit.testing.v1 import AppTest
from test_app_pages import draft, press

from workbench.ui import state


def app_script(study_path: str, start: str) -> None:
    """The app opened on one page (AppTest runs this function's body as the script)."""
    from workbench.ui import app

    app.main(study=study_path, start=start)


def open_annotate(study) -> AppTest:
    at = AppTest.from_function(app_script, args=(str(study), "annotate"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_picker_is_off_by_default_and_saves_attributes_when_on(demo_template, tmp_path):
    from workbench.services import Workbench
    from workbench.study import load_config, save_config

    study = tmp_path / "study"
    shutil.copytree(demo_template, study)
    at = open_annotate(study)
    at.text_input(key=state.NEW_READER).input("dr-attr").run()
    report = at.session_state[state.ANN_REPORT]
    draft(at, state.ANN_FORM, labels=["pleural_effusion"])  # the tick, kept as the reader's draft
    assert not at.segmented_control, "presence-only reading shows no attribute picker"

    cfg = load_config(study)
    cfg.annotate_attributes = True
    save_config(study, cfg)
    at = open_annotate(study)
    at.text_input(key=state.NEW_READER).input("dr-attr").run()
    assert at.session_state[state.ANN_REPORT] == report
    side = at.segmented_control(key=state.widget_key("attr", report, "pleural_effusion", "side"))
    side.set_value("left").run()
    press(at, state.ANN_FORM, labels=["pleural_effusion"])  # Enter: the reading as shown, with its side
    from workbench.store import queries as q

    wb = Workbench(study)
    with wb.session() as s:
        stored = q.reading_attributes_frame(s)
    assert stored[stored["reader"] == "dr-attr"][["report_id", "label", "attribute", "value"]].values.tolist() == [
        [report, "pleural_effusion", "side", "left"]]
