"""Adaptive reading in the app: the Settings switch (audited), Home's figures, Annotate's stated order."""

from __future__ import annotations

from test_app_pages import all_text, assert_clean, button, form_data, open_page, study, workbench  # noqa: F401  (fixture)


def test_settings_turn_adaptive_reading_on_and_home_and_annotate_say_so(study):  # noqa: F811
    from workbench.study import load_config

    path = study / "order.csv"  # a cohort with reports still to read (imported before the app caches its cohorts)
    path.write_text("id,findings\norder-1,Heart size normal.\norder-2,Lungs clear.\n", encoding="utf-8")
    workbench(study).import_reports(path, "fresh")
    at = open_page(study, "settings")
    [c for c in at.checkbox if c.label == "Adaptive reading on"][0].check()
    [n for n in at.number_input if n.label.startswith("Agreement sample")][0].set_value(0.25)
    button(at, "Save settings").click().run()
    assert_clean(at)
    assert load_config(study).adaptive == {
        "enabled": True,
        "agreement_share": 0.25,
        "seed": 0,
        "extra_reader": False,
        "order": "finish",
    }
    events = workbench(study).audit_log(entity="settings")
    assert any("adaptive" in key for key in events["entity_key"])
    home = open_page(study, "home")
    assert_clean(home)
    labels = [m.label for m in home.metric]
    assert {"Reads done", "Reads saved", "Items decided", "Undecided", "Waiting"} <= set(labels)
    assert "Adaptive reading is on" in all_text(home)
    from test_app_pages import open_url

    from workbench.ui import state

    annotate = open_url(study, "annotate", {"cohort": "fresh", "report": "order-1"}, {state.NEW_READER: "dr-order"})
    assert_clean(annotate)
    help_panel = form_data(annotate, state.ANN_FORM)["help"]  # the ? panel: Annotate's help lives there
    assert any("nearest a decision first" in part["text"] for part in help_panel)


def _fresh_cohort(study, n: int = 4):  # noqa: F811
    """A cohort nobody has read yet in the demo study, with adaptive reading on and no agreement sample."""
    import pandas as pd

    wb = workbench(study)
    path = study / "fresh.csv"
    pd.DataFrame(
        {
            "id": [f"fresh-{i}" for i in range(n)],
            "findings": [f"Report {i}: heart size normal, lungs clear." for i in range(n)],
        }
    ).to_csv(path, index=False)
    wb.import_reports(path, "fresh")
    wb.set_adaptive(enabled=True, agreement_share=0.0)
    return wb


def test_a_report_opened_by_a_link_or_the_arrows_is_not_given_to_another_reader_meanwhile(study):  # noqa: F811
    """A reader who opens a report next_report did not give them (a link, the arrows) holds it like a given one:
    another reader asking for their next report meanwhile gets another report (before, the same one)."""
    from test_app_pages import form_data, open_url, press

    from workbench.ui import state

    wb = _fresh_cohort(study)
    at = open_url(study, "annotate", {"report": "fresh-0", "cohort": "fresh"}, {state.NEW_READER: "dr-link"})
    assert form_data(at, state.ANN_FORM)["item"]["id"] == "fresh-0"
    assert wb.next_report("dr-other", "fresh") != "fresh-0"
    press(at, state.ANN_FORM, kind="next")  # the arrow to the next report of the list
    shown = form_data(at, state.ANN_FORM)["item"]["id"]
    assert shown != "fresh-0"
    assert wb.next_report("dr-third", "fresh") not in {"fresh-0", shown}


def test_the_runs_pages_human_ceiling_states_the_sample_of_the_runs_cohort(study):  # noqa: F811
    """The caption above the human ceiling gives the run's cohort's sample (before: every cohort's, summed)."""
    from workbench.ui import state

    wb = _fresh_cohort(study, n=10)
    wb.set_adaptive(agreement_share=0.2)
    for cohort in ("dev", "fresh"):
        wb.adaptive_status(cohort)  # draws each cohort's sample
    dev = wb.agreement_sample("dev")
    assert wb.agreement_sample("fresh").reports == 2
    at = open_page(study, "runs")
    at.toggle(key=state.widget_key("ceiling")).set_value(True).run()
    assert_clean(at)
    assert f"n = {dev.reports} reports of {dev.of} (sample share 20%)" in all_text(at)
