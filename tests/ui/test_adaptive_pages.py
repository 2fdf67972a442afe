"""Adaptive reading in the app: the Settings switch (audited), Home's figures, Annotate's stated order."""

from __future__ import annotations

from test_app_pages import all_text, assert_clean, button, open_page, study, workbench  # noqa: F401  (fixture)


def test_settings_turn_adaptive_reading_on_and_home_and_annotate_say_so(study):  # noqa: F811
    from workbench.study import load_config

    at = open_page(study, "settings")
    [c for c in at.checkbox if c.label == "Adaptive reading on"][0].check()
    [n for n in at.number_input if n.label.startswith("Agreement sample")][0].set_value(0.25)
    button(at, "Save settings").click().run()
    assert_clean(at)
    assert load_config(study).adaptive == {"enabled": True, "agreement_share": 0.25, "seed": 0, "extra_reader": False,
                                           "order": "finish"}
    events = workbench(study).audit_log(entity="settings")
    assert any("adaptive" in key for key in events["entity_key"])
    home = open_page(study, "home")
    assert_clean(home)
    labels = [m.label for m in home.metric]
    assert {"Reads done", "Reads saved", "Items decided", "Undecided", "Waiting"} <= set(labels)
    assert "Adaptive reading is on" in all_text(home)
    annotate = open_page(study, "annotate")
    assert_clean(annotate)
    assert "nearest a decision first" in all_text(annotate)
