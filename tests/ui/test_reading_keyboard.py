"""The reading room's keyboard forms in a real browser, typed at a fast reader's pace on a loaded machine.

Keys 20 ms apart and Enter 10 ms after the last one (rolling two fingers), while a busy-loop
process competes for the CPU: every saved reading, note and decision must equal the keys pressed,
on the item that was on screen. Half of each walk waits for the next item, half types ahead of
it (those keys are held by the form and applied to the next item). No console error and no
request to a host other than the app's own.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from test_browser import ARTIFACTS, CHROMIUM, TIMEOUT_MS, Watch, browser, open_by_keyboard, serve, sign_in  # noqa: F401

from workbench.services.results import ReadingNote

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Chromium at /usr/bin/chromium"),
]

KEY_GAP_MS, ENTER_GAP_MS = 20, 10  # the reader's pace: these are inputs of the test, not waits for a condition
READER, BOSS = ("dr-burst", "reader-password-1"), ("boss", "boss-password-1")
# the form's state, read from inside its shadow root: item id, ready/saving, keys held
FORM_STATE = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const f = host.shadowRoot && host.shadowRoot.querySelector('.wbk');
    if (f) return {item: f.dataset.item, state: f.dataset.state, held: Number(f.dataset.held)};
  }
  return null;
}"""


IDLE = '() => document.querySelector(\'[data-testid="stApp"]\').dataset.testScriptState === "notRunning"'


# These tests press keys at a machine's pace, Enter at once on an item that just appeared: the save guard
# (reading.min_seconds_shown, a save sooner than 0.5 s after a report appeared is ignored) is off in their
# study. The guard at its default is tested in test_reading_edges.py.
NO_SAVE_GUARD = "reading:\n  min_seconds_shown: 0\n"


def signed_in_demo(demo_template, tmp_path_factory, extra_config: str = "") -> Path:
    """A copy of the demo study with sign-in on: an admin and a reader (extra_config appended to workbench.yaml)."""
    from workbench.services import Workbench

    root = tmp_path_factory.mktemp("burst") / "demo"
    shutil.copytree(demo_template, root)
    wb = Workbench(root)
    wb.add_user(BOSS[0], "admin", BOSS[1])
    wb = wb.as_actor(wb.actor_for(BOSS[0]))
    wb.add_user(READER[0], "reader", READER[1])
    wb.engine.dispose()
    config = root / "workbench.yaml"
    config.write_text(config.read_text().replace("auth: none", "auth: local") + extra_config)
    return root


@pytest.fixture(scope="module")
def burst_study(demo_template, tmp_path_factory) -> Path:
    """The demo study with sign-in on: an admin and a reader; no save guard (keys at a machine's pace)."""
    return signed_in_demo(demo_template, tmp_path_factory, NO_SAVE_GUARD)


@pytest.fixture(scope="module")
def burst_server(burst_study):
    yield from serve(burst_study)


@pytest.fixture
def cpu_hog():
    """A busy loop on one core for the length of a test (bounded: it ends by itself after 10 minutes)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end:\n    pass\n"]
    )
    yield proc
    proc.terminate()
    proc.wait(10)


def wait_ready(pg, item: str) -> None:
    """Wait until the form shows this item, holds no key and waits for no answer (as long as it moves on)."""
    seen = None
    while True:
        try:
            seen = pg.wait_for_function(
                f"([item, seen]) => {{ const s = ({FORM_STATE})(); if (!s) return false;"
                " if (s.item === item && s.state === 'ready' && s.held === 0) return 'done';"
                " const now = s.item + '/' + s.held; return now !== seen ? now : false; }",
                arg=[item, seen],
                timeout=TIMEOUT_MS * 2,
            ).json_value()
        except Exception:
            pg.screenshot(path=str(ARTIFACTS / f"form-not-ready-{item.replace('|', '-')}.png"))
            raise AssertionError(f"waiting for {item}, the form is stuck at {pg.evaluate(FORM_STATE)}") from None
        if seen == "done":
            return


def type_item(pg, keys: list[str]) -> None:
    """The keys of one item at the reader's pace, then Enter."""
    for n, key in enumerate(keys):
        if n:
            pg.wait_for_timeout(KEY_GAP_MS)
        pg.keyboard.press(key)
    pg.wait_for_timeout(ENTER_GAP_MS)
    pg.keyboard.press("Enter")


def walk(pg, items: list[str], plans: list[list[str]]) -> None:
    """Type every plan on its item: the first half waits for each next item, the second half types ahead."""
    half = len(plans) // 2
    for k, keys in enumerate(plans):
        if k <= half:
            wait_ready(pg, items[k])
        type_item(pg, keys)
    wait_ready(pg, items[len(plans)])


def new_page(browser, base: str):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    return context, pg, Watch(pg, base)


def test_fifty_reports_typed_fast_on_a_loaded_machine_lose_nothing(browser, burst_server, burst_study, cpu_hog):
    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    wb = Workbench(burst_study).as_actor(Actor(READER[0], "reader"))
    asked = wb.vocab.asked_ids
    ids = wb.work_list(READER[0], "dev")["report_id"].tolist()[:51]
    rng = random.Random(22)
    ticks = [sorted(rng.sample(range(len(asked)), rng.choice([0, 1, 2, 3, 3, 4]))) for _ in range(50)]
    ticks[0] = [0, 1, 3]  # the issue's own case: keys 1, 2, 4 then Enter
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *READER)
    open_by_keyboard(pg, "Annotate")
    walk(pg, ids, [[LABEL_KEYS[i] for i in t] for t in ticks])
    lost = []
    for report, t in zip(ids, ticks, strict=False):
        saved = wb.my_readings(READER[0], report).set_index("label")["value"].astype(int).to_dict()
        if saved != {lab: int(j in t) for j, lab in enumerate(asked)}:
            lost.append((report, saved))
    assert lost == [], f"{len(lost)} of 50 readings differ from the keys pressed: {lost[:3]}"
    others = [
        r
        for r in ids[50:] + wb.work_list(READER[0], "dev")["report_id"].tolist()[51:]
        if len(wb.my_readings(READER[0], r))
    ]
    assert others == [], "a reading landed on a report that was not typed"
    watch.check(pg)
    context.close()


def test_twenty_notes_typed_fast_lose_nothing(browser, burst_server, burst_study, cpu_hog):
    from workbench.services import Workbench
    from workbench.study import SIGNIFICANCE
    from workbench.ui.app_pages.disagreements import CATEGORY_KEYS, SIGNIFICANCE_KEYS, WRONG

    wb = Workbench(burst_study)
    run_id = int(wb.runs().iloc[0]["id"])
    queue, _ = wb.disagreement_queue(run_id)
    cases = [f"{r}|{lab}" for r, lab in zip(queue["report_id"], queue["label"], strict=False)][:21]
    categories = [c for c in wb.config.error_categories[: len(CATEGORY_KEYS)] if c != WRONG]  # the ones with a key
    rng = random.Random(7)
    plans = [(rng.choice(categories), rng.choice(SIGNIFICANCE)) for _ in range(20)]
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *BOSS)
    open_by_keyboard(pg, "Disagreements")
    keys = [[CATEGORY_KEYS[wb.config.error_categories.index(c)], SIGNIFICANCE_KEYS[s].lower()] for c, s in plans]
    wait_ready(pg, cases[0])
    # one note with text: typed in the field, Esc leaves it and the keys work again; one saved with Ctrl+Enter
    area = pg.get_by_role("textbox", name="Note (optional)")
    area.click()
    pg.keyboard.type("collapse 1")
    pg.keyboard.press("Escape")
    type_item(pg, keys[0])
    wait_ready(pg, cases[1])
    for key in keys[1]:
        pg.keyboard.press(key)
        pg.wait_for_timeout(KEY_GAP_MS)
    area.click()
    pg.keyboard.type("collapse 2")
    pg.keyboard.press("Control+Enter")
    walk(pg, cases[2:], plans=keys[2:])
    notes = wb.notes()
    got = {
        f"{r}|{lab}": (c, s, t)
        for r, lab, c, s, t in zip(
            notes["report_id"], notes["label"], notes["category"], notes["significance"], notes["text"], strict=False
        )
    }
    texts = ["collapse 1", "collapse 2"] + [""] * 18
    want = {case: (c, s, t) for case, (c, s), t in zip(cases, plans, texts, strict=False)}
    assert {k: got.get(k) for k in want} == want
    assert len(notes) == 20, "no note on a case that was not typed"
    watch.check(pg)
    context.close()


def test_twenty_adjudications_typed_fast_lose_nothing(browser, burst_server, burst_study, cpu_hog):
    from workbench.core.reference import reason_contradiction
    from workbench.services import Workbench
    from workbench.ui.app_pages.adjudicate import REASON_KEYS, REASONS

    wb = Workbench(burst_study)
    queue = wb.adjudication_worklist("dev")
    items = [f"{r}|{lab}" for r, lab in zip(queue["report_id"], queue["label"], strict=False)][:21]
    rng = random.Random(3)
    values = [rng.choice([0, 1]) for _ in range(20)]
    # a reason that names the other value is questioned before it is saved (tests/ui/test_adjudicate_reason_page.py):
    # this test types reasons that agree with their value
    plans = [(v, rng.choice([i for i, r in enumerate(REASONS) if reason_contradiction(v, r) is None])) for v in values]
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *BOSS)
    open_by_keyboard(pg, "Adjudicate")
    walk(pg, items, [[str(v), REASON_KEYS[r].lower()] for v, r in plans])
    for item, (value, reason) in zip(items, plans, strict=False):
        report, _, label = item.partition("|")
        history = wb.adjudication_history(report, label)
        assert len(history) == 1 and (int(history["value"].iloc[0]), history["reason"].iloc[0]) == (
            value,
            REASONS[reason],
        ), item
    assert len(wb.adjudication_worklist("dev")) == len(queue) - 20
    watch.check(pg)
    context.close()


class ReloadWatch(Watch):
    """As Watch, and no response is an error: a reload or a link on a page's own URL made Streamlit's frontend
    look for the server at `/<page>/_stcore/health` and `/host-config` first (two 404s and two console errors
    each time); workbench/ui/serve.py names the server's base URL in the page instead."""

    def __init__(self, pg, base: str):
        super().__init__(pg, base)
        self.failed: list[str] = []
        pg.on(
            "response", lambda r: self.failed.append(f"{r.status} {urlparse(r.url).path}") if r.status >= 400 else None
        )

    def check(self, pg) -> None:
        assert self.failed == [], self.failed
        super().check(pg)


def step_and_reload(pg, key: str) -> str:
    """Move the open form by one key, then reload: returns the item that must be open again."""
    before = pg.evaluate(FORM_STATE)["item"]
    pg.keyboard.press(key)
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_STATE})(); return s && s.item !== b && s.state === 'ready'; }}", arg=before
    )
    item = pg.evaluate(FORM_STATE)["item"]
    pg.reload()
    wait_ready(pg, item)
    return item


def test_reload_keeps_the_user_signed_in_and_on_the_same_item(browser, burst_server):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    watch = ReloadWatch(pg, burst_server)
    sign_in(pg, burst_server, *BOSS)
    pg.wait_for_function(IDLE)
    cookies = [c for c in context.cookies() if c["name"].startswith("wb_session_")]
    assert len(cookies) == 1 and cookies[0]["sameSite"] == "Strict" and cookies[0]["value"].startswith("wbs_")
    assert cookies[0]["httpOnly"], "set by the server: the page's scripts cannot read the token"
    assert "wb_session_" not in pg.evaluate("document.cookie")
    for title, key, param in (
        ("Annotate", "ArrowRight", "report"),
        ("Disagreements", "ArrowRight", "case"),
        ("Adjudicate", "ArrowRight", "item"),
    ):
        # by click: while a keyboard form is open it takes Enter, also on a focused sidebar link
        pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True).click()
        pg.get_by_role("heading", name=title, exact=True).wait_for()
        pg.wait_for_function(f"(t) => {{ const s = ({FORM_STATE})(); return s && s.state === 'ready'; }}", arg=title)
        item = step_and_reload(pg, key)
        assert pg.get_by_role("heading", name=title, exact=True).is_visible(), "the same page after F5"
        assert urlparse(pg.url).path.endswith("/" + title.lower()) and parse_qs(urlparse(pg.url).query)[param] == [item]
        # the link opens the same item in another tab of this browser (the session cookie is shared)
        other = context.new_page()
        other.goto(pg.url)
        wait_ready(other, item)
        other.close()
    pg.get_by_role("button", name="Sign out", exact=True).click()
    pg.get_by_label("User", exact=True).wait_for()
    pg.reload()
    pg.get_by_label("User", exact=True).wait_for()
    assert not [c for c in context.cookies() if c["name"].startswith("wb_session_") and c["value"]]
    watch.check(pg)
    context.close()


EXTRA, CONFIRMER = ("dr-extra", "reader-password-3"), ("dr-confirm", "reader-password-4")
CONFIRM_STATE = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const f = host.shadowRoot && host.shadowRoot.querySelector('.wbk');
    if (f) return {item: f.dataset.item, confirm: f.dataset.confirm, status: f.querySelector('.wbk-status').textContent};
  }
  return null;
}"""


def _add_reader(study: Path, user: tuple[str, str]) -> None:
    from workbench.services import Workbench

    wb = Workbench(study)
    wb = wb.as_actor(wb.actor_for(BOSS[0]))
    if user[0] not in set(wb.users()["id"]):
        wb.add_user(user[0], "reader", user[1])
    wb.engine.dispose()


# what the Annotate form shows: its comment, whether Unsure is pressed, how many labels are ticked
ON_SCREEN = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const f = host.shadowRoot && host.shadowRoot.querySelector('.wbk');
    if (!f) continue;
    const unsure = f.querySelector('[data-option="unsure"]');
    return {comment: f.querySelector('textarea').value, unsure: unsure.getAttribute('aria-pressed') === 'true',
            ticked: f.querySelectorAll('[data-group="labels"] .wbk-chip.on').length};
  }
  return null;
}"""


def test_unsure_comment_undo_and_enter_on_a_focused_link(browser, burst_server, burst_study):
    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import COMMENT_KEY, LABEL_KEYS, UNSURE_KEY

    _add_reader(burst_study, EXTRA)
    wb = Workbench(burst_study).as_actor(Actor(EXTRA[0], "reader"))
    asked = wb.vocab.asked_ids
    ids = wb.work_list(EXTRA[0], "dev")["report_id"].tolist()[:2]
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *EXTRA)
    open_by_keyboard(pg, "Annotate")  # the link had the focus: the form takes the keys after it opens
    wait_ready(pg, ids[0])
    pg.keyboard.press(LABEL_KEYS[0])
    pg.keyboard.press(UNSURE_KEY)
    pg.keyboard.press(COMMENT_KEY)  # into the comment field: the label keys are text there
    pg.keyboard.type("faint 2 opacity")
    pg.keyboard.press("Escape")  # out again: the keys tick labels
    pg.keyboard.press(LABEL_KEYS[1])
    pg.keyboard.press("Enter")
    wait_ready(pg, ids[1])
    saved = wb.my_readings(EXTRA[0], ids[0]).set_index("label")["value"].astype(int).to_dict()
    assert saved == {lab: int(j in (0, 1)) for j, lab in enumerate(asked)}
    assert wb.reading_note(EXTRA[0], ids[0]) == ReadingNote("faint 2 opacity", unsure=True)
    pg.keyboard.press("Control+z")  # undo: the new reading goes, its ticks come back as the draft on screen
    wait_ready(pg, ids[0])
    assert wb.my_readings(EXTRA[0], ids[0]).empty and wb.reading_note(EXTRA[0], ids[0]) is None
    assert wb.reading_draft(EXTRA[0], ids[0]) == {lab: int(j in (0, 1)) for j, lab in enumerate(asked)}
    shown = pg.evaluate(ON_SCREEN)  # the whole reading comes back on screen: ticks, comment, unsure (issue 32, 9)
    assert shown == {"comment": "faint 2 opacity", "unsure": True, "ticked": 2}, shown
    audit = Workbench(burst_study).audit_log()
    assert {"add", "undo"} <= set(audit.loc[audit["entity_key"] == f"{ids[0]}/{EXTRA[0]}", "action"])
    # Enter on a link reached with the keyboard opens that link; it does not save the report on screen
    pg.get_by_test_id("stSidebarNav").get_by_role("link", name="Home").focus()
    pg.keyboard.press("Enter")
    pg.get_by_role("heading", name="Study: demo", exact=True).wait_for()
    assert wb.my_readings(EXTRA[0], ids[0]).empty
    watch.check(pg)
    context.close()


def open_disagreements_as_boss(browser, base: str):
    """A new page signed in as the admin on Disagreements, its form ready: (context, page, watch, case on screen)."""
    context, pg, watch = new_page(browser, base)
    sign_in(pg, base, *BOSS)
    open_by_keyboard(pg, "Disagreements")
    pg.wait_for_function(f"() => {{ const s = ({FORM_STATE})(); return s && s.state === 'ready'; }}")
    return context, pg, watch, pg.evaluate(FORM_STATE)["item"]


SLOW = ("dr-slow", "reader-password-5")
READER_PAUSE_MS = 350  # between two letters: longer than the form's draft delay (250 ms), as a reader who thinks


def type_at_a_readers_pace(pg, text: str) -> None:
    """Type letter by letter, each pause long enough for the draft to reach the server and its rerun to end."""
    idle = '() => document.querySelector(\'[data-testid="stApp"]\').dataset.testScriptState === "notRunning"'
    for ch in text:
        pg.keyboard.type(ch)
        pg.wait_for_timeout(READER_PAUSE_MS)
        pg.wait_for_function(idle)


def test_text_typed_at_a_readers_pace_stays_in_the_field_and_ticks_nothing(browser, burst_server, burst_study):
    """The draft's rerun redrew the form under the reader's hands: the field lost its focus after a letter or
    two and the next letters ticked labels (Annotate) or set the significance (Disagreements)."""
    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import COMMENT_KEY

    _add_reader(burst_study, SLOW)
    wb = Workbench(burst_study).as_actor(Actor(SLOW[0], "reader"))
    first = wb.work_list(SLOW[0], "dev")["report_id"].tolist()[0]
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *SLOW)
    open_by_keyboard(pg, "Annotate")
    wait_ready(pg, first)
    comment = "faint 2 left base"  # letters and a digit that are label keys outside the field
    pg.keyboard.press(COMMENT_KEY)
    type_at_a_readers_pace(pg, comment)
    pg.keyboard.press("Control+Enter")
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_STATE})(); return s && s.item !== b && s.state === 'ready'; }}", arg=first
    )
    assert wb.reading_note(SLOW[0], first) == ReadingNote(comment, unsure=False)
    assert wb.my_readings(SLOW[0], first)["value"].astype(int).sum() == 0, "no letter of the comment ticked a label"
    context.close()

    boss = Workbench(burst_study)
    context, pg, watch, case = open_disagreements_as_boss(browser, burst_server)
    pg.get_by_role("textbox", name="Note (optional)").click()
    note = "many nodules unchanged"  # m, n and u are significance keys outside the field
    type_at_a_readers_pace(pg, note)
    pg.keyboard.press("Escape")
    pg.keyboard.press("1")
    pg.keyboard.press("n")
    pg.keyboard.press("Enter")
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_STATE})(); return s && s.item !== b && s.state === 'ready'; }}", arg=case
    )
    report, _, label = case.partition("|")
    notes = boss.notes(label, report)
    mine = notes[notes["text"] == note]
    assert len(mine) == 1, notes[["category", "significance", "text"]].to_dict("records")
    assert mine["significance"].iloc[0] == "does not change management"
    watch.check(pg)
    context.close()


@pytest.fixture(scope="module")
def confirm_server(burst_study, tmp_path_factory):
    """A copy of the study whose reading.min_seconds_empty is 600 s (every empty Enter asks first)."""
    root = tmp_path_factory.mktemp("confirm") / "demo"
    shutil.copytree(burst_study, root, ignore=shutil.ignore_patterns("streamlit.log"))
    config = root / "workbench.yaml"
    config.write_text(config.read_text().replace(NO_SAVE_GUARD, NO_SAVE_GUARD + "  min_seconds_empty: 600\n"))
    _add_reader(root, CONFIRMER)
    running = serve(root)
    yield next(running), root
    running.close()


def test_enter_on_an_empty_report_asks_first_when_the_study_says_so(browser, confirm_server):
    from workbench.services import Actor, Workbench

    url, root = confirm_server
    wb = Workbench(root).as_actor(Actor(CONFIRMER[0], "reader"))
    context, pg, watch = new_page(browser, url)
    sign_in(pg, url, *CONFIRMER)
    open_by_keyboard(pg, "Annotate")
    first = pg.evaluate(FORM_STATE)["item"]
    wait_ready(pg, first)
    pg.keyboard.press("Enter")
    pg.wait_for_function(f"() => ({CONFIRM_STATE})().confirm === '1'")
    assert "press Enter again" in pg.evaluate(CONFIRM_STATE)["status"]
    pg.keyboard.press("Escape")  # cancel: still on the same report, nothing saved
    pg.wait_for_function(f"() => ({CONFIRM_STATE})().confirm === '0'")
    assert pg.evaluate(FORM_STATE)["item"] == first and wb.my_readings(CONFIRMER[0], first).empty
    pg.keyboard.press("Enter")
    pg.wait_for_function(f"() => ({CONFIRM_STATE})().confirm === '1'")
    pg.keyboard.press("Enter")  # confirmed: saved with every label 0, the next report opens
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_STATE})(); return s && s.item !== b && s.state === 'ready'; }}", arg=first
    )
    second = pg.evaluate(FORM_STATE)["item"]
    assert wb.my_readings(CONFIRMER[0], first)["value"].astype(int).tolist() == [0] * len(wb.vocab.asked_ids)
    pg.keyboard.press("1")  # something ticked: Enter saves at once
    pg.keyboard.press("Enter")
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_STATE})(); return s && s.item !== b && s.state === 'ready'; }}", arg=second
    )
    assert wb.my_readings(CONFIRMER[0], second)["value"].astype(int).sum() == 1
    watch.check(pg)
    context.close()


FIT = """(minWidth) => {
  let save = null;
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const b = host.shadowRoot && host.shadowRoot.querySelector('.wbk button[data-kind="save"]');
    if (b) save = b.getBoundingClientRect();
  }
  const grids = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stDataFrame"]')]
    .filter((g) => g.getBoundingClientRect().width > 0);
  const box = (r) => r && {left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width};
  const queue = grids[0] || null;
  // the grid's own scroller: wider content than it shows means columns cut off or scrolled out of sight
  const scroller = queue && queue.querySelector('.dvn-scroller');
  return {w: innerWidth, h: innerHeight, scrollY: scrollY, save: box(save), queue: box(queue && queue.getBoundingClientRect()),
          columns: scroller && scroller.scrollWidth, shown: scroller && scroller.clientWidth};
}"""
QUEUES = ("Disagreements", "Adjudicate")  # every column of their queue (the row checkboxes too) in sight


@pytest.mark.parametrize("size", [(1440, 900), (1280, 800)], ids=["1440x900", "1280x800"])
def test_save_button_and_queue_columns_fit_without_scrolling(browser, burst_server, size):
    from playwright.sync_api import Error as PlaywrightError

    context = browser.new_context(viewport={"width": size[0], "height": size[1]})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    watch = Watch(pg, burst_server)
    sign_in(pg, burst_server, *BOSS)
    for title in ("Annotate", "Disagreements", "Adjudicate"):
        open_by_keyboard(pg, title)
        pg.wait_for_function(f"() => {{ const s = ({FORM_STATE})(); return s && s.state === 'ready'; }}")
        if title in QUEUES:  # a loaded machine may still be laying the page out: wait for it to settle
            with contextlib.suppress(PlaywrightError):
                pg.wait_for_function(
                    f"() => {{ const f = ({FIT})(); return f.shown && f.columns <= f.shown; }}", timeout=30_000
                )
        fit = pg.evaluate(FIT)
        save = fit["save"]
        assert save and save["top"] >= 0 and save["bottom"] <= fit["h"] and save["right"] <= fit["w"], (title, fit)
        if title in QUEUES:
            queue = fit["queue"]
            assert queue and queue["left"] >= 0 and queue["right"] <= fit["w"] and queue["top"] < fit["h"], (title, fit)
            assert fit["shown"] and fit["columns"] <= fit["shown"], (
                f"{title}: the queue shows {fit['shown']} px of its {fit['columns']} px of columns"
            )
    watch.check(pg)
    context.close()


PRESSER = ("dr-press", "reader-password-6")
FORM_TEXT = """() => {
  for (const host of document.querySelectorAll('[data-testid="stBidiComponentIsolated"]')) {
    const f = host.shadowRoot && host.shadowRoot.querySelector('.wbk');
    if (f) return {item: f.dataset.item, state: f.dataset.state, caption: f.querySelector('.wbk-caption').textContent,
                   status: f.querySelector('.wbk-status').textContent};
  }
  return null;
}"""


def press_across(pg, chip, until: str, arg=None) -> None:
    """Press the mouse on a chip, hold it until a condition (a rerun's answer on screen), then release."""
    box = chip.bounding_box()
    pg.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    pg.mouse.down()
    pg.wait_for_function(until, arg=arg)
    pg.wait_for_function(IDLE)
    pg.mouse.up()


def test_a_chip_clicked_while_a_rerun_arrives_is_not_lost(browser, burst_server, burst_study):
    """A reader's click whose press and release straddle a rerun: the first tick's draft turned the caption from
    "unread" to "draft" and the form redrew every chip, and on Disagreements a flash message that went away moved
    the form, which Streamlit then mounted anew: press and release landed on different elements, the click was
    lost, and Enter saved the reading (or refused the note) without it."""
    from workbench.services import Actor, Workbench
    from workbench.ui.app_pages.annotate import LABEL_KEYS

    _add_reader(burst_study, PRESSER)
    wb = Workbench(burst_study).as_actor(Actor(PRESSER[0], "reader"))
    asked = wb.vocab.asked_ids
    first = wb.work_list(PRESSER[0], "dev")["report_id"].tolist()[0]
    context, pg, watch = new_page(browser, burst_server)
    sign_in(pg, burst_server, *PRESSER)
    open_by_keyboard(pg, "Annotate")
    wait_ready(pg, first)
    assert "unread" in pg.evaluate(FORM_TEXT)["caption"]
    pg.keyboard.press(LABEL_KEYS[0])  # its draft reaches the server 250 ms later: the page reruns
    press_across(
        pg, pg.locator(f".wbk-chip[data-option='{asked[1]}']"), f"() => ({FORM_TEXT})().caption.includes('draft')"
    )
    pg.keyboard.press("Enter")
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_TEXT})(); return s && s.state === 'ready' && s.item !== b; }}", arg=first
    )
    saved = wb.my_readings(PRESSER[0], first).set_index("label")["value"].astype(int).to_dict()
    assert saved == {lab: int(j in (0, 1)) for j, lab in enumerate(asked)}
    context.close()

    boss = Workbench(burst_study)
    context, pg, watch, case = open_disagreements_as_boss(browser, burst_server)
    pg.get_by_role("button", name="Add as few-shot example", exact=True).click()
    pg.get_by_text("Added ").first.wait_for()
    pg.wait_for_function(IDLE)
    pg.keyboard.press("1")  # a category by key: its draft's rerun no longer shows the flash
    press_across(
        pg,
        pg.locator(".wbk-chip", has=pg.locator(".wbk-label", has_text="does not change management")),
        "() => ![...document.querySelectorAll('[data-testid=\"stAlertContainer\"]')]"
        ".some((e) => e.textContent.includes('Added '))",
    )
    pg.keyboard.press("Enter")
    pg.wait_for_function(
        f"(b) => {{ const s = ({FORM_TEXT})(); return s && s.state === 'ready' && (s.item !== b || s.status); }}",
        arg=case,
    )
    assert pg.evaluate(FORM_TEXT)["status"] == "", "the note was refused: a choice was lost"
    report, _, label = case.partition("|")
    notes = boss.notes(label, report)
    assert notes[["category", "significance"]].values.tolist()[-1:] == [
        [boss.config.error_categories[0], "does not change management"]
    ]
    watch.check(pg)
    context.close()
