"""The pages' caches give way to writes: what one session saves, the next page opened shows
(readings through the process-wide memos, runs through the predictions memo)."""

from __future__ import annotations

from test_app_pages import (  # noqa: F401  (fixtures)
    all_text,
    assert_clean,
    button,
    open_page,
    press,
    study,
    wait_for_job,
    workbench,
)

from workbench.ui import state


def _progress(at) -> dict:
    """Reader -> reports complete, from Home's Readers table."""
    table = [d.value for d in at.dataframe if "reports complete" in d.value.columns][0]
    return dict(zip(table["reader"], table["reports complete"], strict=False))


def test_a_reading_saved_on_annotate_shows_on_home(study):
    before = _progress(open_page(study, "home"))
    assert "dr-cache" not in before
    at = open_page(study, "annotate")
    at.text_input(key=state.NEW_READER).input("dr-cache").run()
    press(at, state.ANN_FORM)  # Enter on the keyboard form: the reading as shown (nothing ticked)
    assert at.toast and "Saved" in at.toast[0].value
    after = _progress(open_page(study, "home"))  # a new session, as a colleague opening Home
    assert after["dr-cache"] == 1 and {k: after[k] for k in before} == before


def test_a_saved_reading_that_flips_the_reference_changes_the_metrics(study):
    """Metrics are kept by content: a reading that changes a reference value changes Home's figures."""
    wb = workbench(study)
    run_id = int(wb.runs().iloc[0]["id"])
    first = open_page(study, "home")
    decided = [m.value for m in first.metric if m.label == "Reference decided"][0]
    ref = wb.reference(wb.cohorts()["name"].iloc[0])
    waiting = ref[ref["status"] == "waiting"]
    assert len(waiting), "the demo study has items waiting for adjudication"
    item = waiting.iloc[0]
    wb.adjudicate(item["report_id"], item["label"], 1, "settled for the cache test")
    home = open_page(study, "home", {})
    assert home.button(key=state.widget_key("reload")).click().run()  # the write came from outside this app
    assert_clean(home)
    assert [m.value for m in home.metric if m.label == "Reference decided"][0] == str(int(decided) + 1)
    assert wb.evaluate_run(run_id, n_resamples=0).averages["macro_f1"] is not None


def test_a_run_started_on_the_page_appears_in_the_list_when_it_finishes(study):
    wb = workbench(study)
    before = len(wb.runs())
    at = open_page(study, "runs")
    assert f"All runs ({before})" in [e.label for e in at.expander]
    at.multiselect[0].select("atelectasis")
    button(at, "Start run").click().run()
    wait_for_job(at, "run")
    assert f"All runs ({before + 1})" in [e.label for e in at.expander], all_text(at)
    new = int(wb.runs().iloc[0]["id"])
    assert at.session_state[state.RUN] == new
    again = open_page(study, "runs")  # a new session sees it too, with its metrics
    assert f"All runs ({before + 1})" in [e.label for e in again.expander]
    assert wb.predictions(new)["label"].unique().tolist() == ["atelectasis"]
