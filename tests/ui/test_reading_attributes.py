"""The reading room's attribute keys and its one-screen layout in a real browser (issue 32, items 4 and 10).

A ticked finding's attributes (side, severity, change) are part of the keyboard form: Shift + the key on the
chip sets one on the finding ticked last, a click sets one on any ticked finding, and Enter saves exactly what
is shown. At 1280x800 and 1440x900 the report, the chips, the attributes, the comment and the save button of a
report of median length are all on screen without scrolling, and ? opens the guidelines in view.
"""

from __future__ import annotations

import pytest
from test_browser import ARTIFACTS, CHROMIUM, TIMEOUT_MS, browser, open_by_keyboard, serve, sign_in  # noqa: F401
from test_reading_keyboard import BOSS, READER, new_page, signed_in_demo, wait_ready

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

EFFUSION, ATELECTASIS = "pleural_effusion", "atelectasis"


@pytest.fixture(scope="module")
def attr_study(demo_template, tmp_path_factory):
    """The demo study with sign-in on, the attribute picker on and the reading settings at their defaults."""
    root = signed_in_demo(demo_template, tmp_path_factory)
    config = root / "workbench.yaml"
    config.write_text(config.read_text().replace("annotate_attributes: false", "annotate_attributes: true"))
    return root


@pytest.fixture(scope="module")
def attr_server(attr_study):
    yield from serve(attr_study)


def reader_wb(study):
    from workbench.services import Actor, Workbench

    return Workbench(study).as_actor(Actor(READER[0], "reader"))


# the boxes of what a reader needs on screen, read inside the form's shadow root (null when absent)
BOXES = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const f = host.shadowRoot && host.shadowRoot.querySelector('.wbk');
    if (!f) continue;
    const box = (node) => { if (!node || node.hidden) return null; const r = node.getBoundingClientRect();
      return r.width && r.height ? {top: r.top, bottom: r.bottom, left: r.left, right: r.right} : null; };
    const chips = [...f.querySelectorAll('[data-group="labels"] .wbk-chip')];
    return {report: box(f.querySelector('.wbk-report')), first_chip: box(chips[0]), last_chip: box(chips[chips.length - 1]),
            comment: box(f.querySelector('textarea')), save: box(f.querySelector('button[data-kind="save"]')),
            attributes: [...f.querySelectorAll('.wbk-attr')].filter((n) => !n.hidden).map(box),
            active: [...f.querySelectorAll('.wbk-attr.active')].map((n) => n.dataset.scope),
            w: innerWidth, h: innerHeight};
  }
  return null;
}"""


def out_of_view(boxes: dict) -> list[str]:
    """The parts of the form that are not wholly inside the viewport."""
    parts = {k: boxes[k] for k in ("report", "first_chip", "last_chip", "comment", "save")}
    parts.update({f"attributes {n + 1}": b for n, b in enumerate(boxes["attributes"])})
    return [
        f"{name} {b}" if b else f"{name} missing"
        for name, b in parts.items()
        if not b or b["top"] < 0 or b["left"] < 0 or b["bottom"] > boxes["h"] or b["right"] > boxes["w"]
    ]


def read(pg, report: str) -> None:
    """Wait for the report and for the reader to have read it (the save guard's time on screen)."""
    from workbench.core.reading import MIN_SECONDS_SHOWN

    wait_ready(pg, report)
    pg.wait_for_timeout(MIN_SECONDS_SHOWN * 1000)


def test_attributes_have_keys_stay_in_view_and_enter_saves_what_is_shown(browser, attr_server, attr_study):
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(attr_study)
    asked = wb.vocab.asked_ids
    key = {lab: LABEL_KEYS[asked.index(lab)] for lab in (EFFUSION, ATELECTASIS)}
    ids = wb.work_list(READER[0], "dev")["report_id"].tolist()
    context, pg, watch = new_page(browser, attr_server)
    sign_in(pg, attr_server, *READER)
    open_by_keyboard(pg, "Annotate")

    # keys alone: tick pleural effusion, Shift+R and Shift+2 set its side and severity, Enter saves them
    read(pg, ids[0])
    pg.keyboard.press(key[EFFUSION])
    pg.screenshot(path=str(ARTIFACTS / "attribute-picker.png"))
    boxes = pg.evaluate(BOXES)
    assert boxes["active"] == [EFFUSION] and not out_of_view(boxes), out_of_view(boxes)
    pg.keyboard.press("Shift+KeyR")
    pg.keyboard.press("Shift+Digit2")
    pg.keyboard.press("Enter")
    read(pg, ids[1])
    assert wb.reader_attributes(READER[0], ids[0]) == {EFFUSION: {"side": "right", "severity": "moderate"}}

    # the mouse: tick and pick with clicks, then Enter (it un-picked the value and saved nothing)
    pg.locator(f".wbk-chips[data-group='labels'] .wbk-chip[data-option='{EFFUSION}']").click()
    pg.locator(f".wbk-chips[data-group='attr.{EFFUSION}.side'] .wbk-chip[data-option='left']").click()
    pg.keyboard.press("Enter")
    read(pg, ids[2])
    assert wb.my_readings(READER[0], ids[1]).set_index("label")["value"].astype(int)[EFFUSION] == 1
    assert wb.reader_attributes(READER[0], ids[1]) == {EFFUSION: {"side": "left"}}

    # two findings: the keys go to the one ticked last; a click on the other's value moves them there
    pg.keyboard.press(key[ATELECTASIS])
    pg.keyboard.press(key[EFFUSION])
    pg.keyboard.press("Shift+KeyB")  # pleural effusion: bilateral
    pg.locator(f".wbk-chips[data-group='attr.{ATELECTASIS}.side'] .wbk-chip[data-option='right']").click()
    assert pg.evaluate(BOXES)["active"] == [ATELECTASIS]
    pg.keyboard.press("Shift+Digit1")  # atelectasis: mild
    boxes = pg.evaluate(BOXES)
    assert len(boxes["attributes"]) == 2 and not out_of_view(boxes), out_of_view(boxes)
    pg.screenshot(path=str(ARTIFACTS / "attribute-keys.png"))
    pg.keyboard.press("Enter")
    read(pg, ids[3])
    assert wb.reader_attributes(READER[0], ids[2]) == {
        EFFUSION: {"side": "bilateral"},
        ATELECTASIS: {"side": "right", "severity": "mild"},
    }
    watch.check(pg)
    context.close()


def median_report(wb, reader: str, offset: int = 0) -> str:
    """The report of median length in the reader's work list (offset: the one that many places longer)."""
    ids = wb.work_list(reader, "dev")["report_id"].tolist()
    by_length = sorted(ids, key=lambda r: len(wb.reading.report_text(r).text))
    return by_length[len(by_length) // 2 + offset]


@pytest.mark.parametrize("size", [(1280, 800), (1440, 900)], ids=["1280x800", "1440x900"])
def test_a_median_report_and_its_whole_form_fit_one_screen_and_the_guidelines_open_in_view(
    browser, attr_server, attr_study, size
):
    from workbench.services import Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = Workbench(attr_study).as_actor(Workbench(attr_study).actor_for(BOSS[0]))
    # one report per screen size: the first size's tick stays in the reader's draft of its report, and a second
    # press of the same key on that report would untick it
    report = median_report(wb, BOSS[0], offset=[(1280, 800), (1440, 900)].index(size))
    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    sign_in(pg, attr_server, *BOSS)
    pg.goto(f"{attr_server}/annotate?report={report}")
    read(pg, report)
    pg.keyboard.press(LABEL_KEYS[wb.vocab.asked_ids.index(EFFUSION)])  # a finding with three attributes
    pg.wait_for_function(f"() => ({BOXES})().attributes.length === 1")
    boxes = pg.evaluate(BOXES)
    pg.screenshot(path=str(ARTIFACTS / f"one-screen-{size[0]}x{size[1]}.png"))
    assert not out_of_view(boxes) and pg.evaluate("scrollY") == 0, out_of_view(boxes)
    pg.keyboard.press("?")
    box = pg.get_by_test_id("wbGuidelines").bounding_box()
    assert box and box["y"] >= 0 and box["y"] + min(box["height"], 200) <= size[1], box
    context.close()


def test_attributes_picked_stay_with_the_draft_when_the_reader_moves_away_and_back(browser, attr_server, attr_study):
    from test_reading_keyboard import FORM_STATE

    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = reader_wb(attr_study)
    ids = wb.work_list(READER[0], "dev")["report_id"].tolist()
    context, pg, watch = new_page(browser, attr_server)
    sign_in(pg, attr_server, *READER)
    open_by_keyboard(pg, "Annotate")
    pg.wait_for_function(f"() => ({FORM_STATE})() !== null")
    first = pg.evaluate(FORM_STATE)["item"]  # the reader's next unread report (the test above saved the first ones)
    second = ids[ids.index(first) + 1]
    read(pg, first)
    pg.keyboard.press(LABEL_KEYS[wb.vocab.asked_ids.index(EFFUSION)])
    pg.keyboard.press("Shift+KeyL")  # pleural effusion: left
    pg.keyboard.press("ArrowRight")  # away without saving: the ticks and the side are kept as the draft
    wait_ready(pg, second)
    pg.keyboard.press("ArrowLeft")
    wait_ready(pg, first)
    chip = pg.locator(f".wbk-chips[data-group='attr.{EFFUSION}.side'] .wbk-chip[data-option='left']")
    assert chip.get_attribute("aria-pressed") == "true", "the side picked before the move is on screen again"
    read(pg, first)
    pg.keyboard.press("Enter")
    pg.wait_for_function(f"() => ({FORM_STATE})().item !== {first!r}")
    assert wb.reader_attributes(READER[0], first) == {EFFUSION: {"side": "left"}}
    watch.check(pg)
    context.close()
