"""Annotate's attribute picker (off by default): a reader sets the side of a ticked finding and saves."""

from __future__ import annotations

import shutil

from streamlit.testing.v1 import AppTest
from test_app_pages import draft, form_data, press

from workbench.ui import state

SIDE = "attr.pleural_effusion.side"  # the form's group of pleural effusion's side


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
    assert not [g for g in form_data(at, state.ANN_FORM)["groups"] if g.get("scope")], "presence-only: no picker"

    cfg = load_config(study)
    cfg.annotate_attributes = True
    save_config(study, cfg)
    at = open_annotate(study)
    at.text_input(key=state.NEW_READER).input("dr-attr").run()
    assert at.session_state[state.ANN_REPORT] == report
    groups = {g["id"]: g for g in form_data(at, state.ANN_FORM)["groups"]}
    assert groups[SIDE]["scope"]["option"] == "pleural_effusion"  # shown while pleural effusion is ticked
    assert {o["id"]: o["key"] for o in groups[SIDE]["options"]} == {"left": "l", "right": "r", "bilateral": "b"}
    press(at, state.ANN_FORM, labels=["pleural_effusion"], **{SIDE: "left"})  # Enter: the reading as shown
    from workbench.store import queries as q

    wb = Workbench(study)
    with wb.session() as s:
        stored = q.reading_attributes_frame(s)
    assert stored[stored["reader"] == "dr-attr"][["report_id", "label", "attribute", "value"]].values.tolist() == [
        [report, "pleural_effusion", "side", "left"]
    ]


def test_a_saved_report_opened_again_shows_its_attributes_and_saving_keeps_them(demo_template, tmp_path):
    """Back on a report saved earlier (another session, or the arrows), the picker shows the stored values:
    an empty picker saved with Enter would erase them."""
    from workbench.services import Workbench
    from workbench.store import queries as q
    from workbench.study import load_config, save_config

    study = tmp_path / "study"
    shutil.copytree(demo_template, study)
    cfg = load_config(study)
    cfg.annotate_attributes = True
    save_config(study, cfg)
    at = open_annotate(study)
    at.text_input(key=state.NEW_READER).input("dr-attr").run()
    report = at.session_state[state.ANN_REPORT]
    press(at, state.ANN_FORM, labels=["pleural_effusion"], **{SIDE: "left"})
    assert at.session_state[state.ANN_REPORT] != report  # on to the next report

    later = AppTest.from_function(app_script, args=(str(study), "annotate"), default_timeout=60)
    later.session_state[state.ANN_REPORT] = report  # a new session opens the saved report again
    later.run()
    later.text_input(key=state.NEW_READER).input("dr-attr").run()
    assert later.session_state[state.ANN_REPORT] == report
    assert form_data(later, state.ANN_FORM)["values"][SIDE] == "left"
    press(later, state.ANN_FORM, labels=["pleural_effusion"])
    with Workbench(study).session() as s:
        stored = q.reading_attributes_frame(s)
    assert stored[stored["reader"] == "dr-attr"][["report_id", "attribute", "value"]].values.tolist() == [
        [report, "side", "left"]
    ]


def test_an_admin_turns_the_picker_on_in_settings(demo_template, tmp_path):
    from test_app_pages import assert_clean, open_page

    from workbench.study import load_config

    study = tmp_path / "study"
    shutil.copytree(demo_template, study)
    at = open_page(study, "settings")
    box = [c for c in at.checkbox if c.label.startswith("Attribute picker in Annotate")][0]
    assert box.value is False  # off by default: presence-only reading stays as fast
    box.check()
    [b for b in at.button if b.label == "Save settings"][0].click().run()
    assert_clean(at)
    assert load_config(study).annotate_attributes is True
