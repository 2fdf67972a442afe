// The keyboard form of the reading room (Streamlit custom component v2, no iframe, no build step).
//
// Why it exists: a Streamlit button per key drops keys pressed 20-60 ms apart (clicks that arrive
// during a rerun replace one another). Here every key lands in a queue in the browser and is
// applied at once to what is on screen; the draft goes to the server as component state
// (debounced); Enter sends the complete reading as one trigger carrying a sequence number and the
// item id, and every key pressed after it is held until the server answers that it stored exactly
// that reading (data.acked >= seq) and sends the next item: held keys then apply to the next item,
// in order. Nothing is dropped and nothing is applied to an item other than the one on screen.
//
// The module is imported once per page (Streamlit caches it by its text), so the state below
// outlives reruns; Streamlit calls the default export again whenever the data changes.

const forms = new Map();          // component key -> form state
let lastSeq = 0;                  // one counter for every form of the page: a sequence number is never reused
let listening = false;
// this page's id: the server answers triggers per page, so a resend reaching a new server session
// (after a reconnect) is still recognised as already applied
const PAGE = Math.random().toString(36).slice(2) + Date.now().toString(36);
const DRAFT_DELAY_MS = 250;       // the draft is sent this long after the last key (fewer reruns while typing)
const RESEND_MS = 4000;           // an unanswered trigger is sent again (same seq: the server applies it once)

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "cls") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c) node.appendChild(c);
  return node;
}

// Enter on a report with nothing ticked, sooner than minSeconds after it was shown, asks first (the
// study's reading.min_seconds_empty; 0 = never). The same rule as workbench/core/reading.py.
export function needsEmptyConfirm(ticked, secondsShown, minSeconds, confirmed) {
  return minSeconds > 0 && ticked === 0 && secondsShown < minSeconds && !confirmed;
}

// A save pressed before the item appeared (negative: a second Enter held while the first was stored) or
// sooner than minSeconds after it appeared is ignored, and the status says so (reading.min_seconds_shown,
// 0.5 s by default; 0 = off). The same rule as workbench/core/reading.py save_too_soon.
export function saveTooSoon(pressedAfterShownS, minSeconds) {
  return minSeconds > 0 && pressedAfterShownS < minSeconds;
}
const MIN_SECONDS_SHOWN = 0.5;    // when the page sends no reading.min_seconds_shown

function ticked(f) {
  let n = 0;
  for (const g of f.data.groups) if (g.kind === "multi") n += (f.values[g.id] || []).length;
  return n;
}

function activeForm() {
  // the most recently mounted form still on the page owns the keyboard
  let found = null;
  for (const f of forms.values()) if (f.root && f.root.isConnected !== false && f.host && f.host.isConnected) found = !found || f.mountedAt > found.mountedAt ? f : found;
  return found;
}

function optionFor(f, key) {
  // a finding's attributes (scoped groups) take their keys with Shift only: see attributeFor
  for (const g of f.data.groups) if (!g.scope) for (const o of g.options) if (o.key && o.key === key) return [g, o];
  return null;
}

// Attributes (side, severity, ...) of a ticked finding: Shift + the key on the chip sets it on the finding that
// has the picker (the one ticked last, or the one whose value was clicked). With Shift, so that the plain keys
// stay the findings' own: no mode in which a "1" meant for a finding sets a severity instead.
function shiftedKey(e) {
  if (/^Digit[0-9]$/.test(e.code || "")) return e.code.slice(5);  // Shift+1 is "!" on one layout, "+" on another
  return e.key.length === 1 ? e.key.toLowerCase() : null;
}

function attributeKeys(f) {
  const keys = new Set();
  for (const g of f.data.groups) if (g.scope) for (const o of g.options) if (o.key) keys.add(o.key);
  return keys;
}

function attributeFor(f, key) {
  // the chip of this key in the picker that has the keys, or why there is none
  if (!f.picker) return { why: "Tick a finding first: Shift + a key sets an attribute of the finding ticked last." };
  let title = f.picker;
  for (const g of f.data.groups) {
    if (!g.scope || g.scope.option !== f.picker) continue;
    title = g.scope.title || title;
    for (const o of g.options) if (o.key === key) return { hit: [g, o] };
  }
  return { why: `${title} has no attribute on Shift+${key.toUpperCase()}.` };
}

function scoped(d, group, option) {
  // whether an option of a multi group (a finding) has attributes
  return d.groups.some((g) => g.scope && g.scope.group === group && g.scope.option === option);
}

function scopeShown(f, scope) {
  const v = f.values[scope.group];
  return Array.isArray(v) ? v.includes(scope.option) : v === scope.option;
}

// inputs that take typed text: a focused checkbox, toggle, radio or button does not (the My readings toggle,
// left focused by a click, took every label key)
const NOT_TEXT = new Set(["checkbox", "radio", "button", "submit", "reset", "range", "color", "file", "image"]);

function isEditable(node) {
  if (!node || !node.tagName) return false;
  const tag = node.tagName.toLowerCase();
  if (tag === "input") return !NOT_TEXT.has((node.getAttribute("type") || "text").toLowerCase());
  return tag === "textarea" || tag === "select" || node.isContentEditable;
}

// The control the mouse last pressed: left focused by that click, it does not take Enter for itself (the reading
// keys stay on the form); one reached with the keyboard (Tab) does. A Tab forgets the click.
let clicked = null;
function noteInput(e) {
  if (e.type === "pointerdown") clicked = e.composedPath ? e.composedPath()[0] : e.target;
  else if (e.key === "Tab") clicked = null;
}

function onKeyDown(e) {
  const f = activeForm();
  if (!f || e.isComposing) return;
  const target = e.composedPath ? e.composedPath()[0] : e.target;
  const inOwnText = f.textArea && target === f.textArea;
  let event = null;
  if (inOwnText) {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) event = { kind: "save" };
    else if (e.key === "Escape") { f.textArea.blur(); f.host.focus && f.host.focus(); e.preventDefault(); e.stopImmediatePropagation(); }
    if (!event) return;
  } else {
    const key = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if (isEditable(target) || e.altKey) return;
    const shifted = e.shiftKey && !e.ctrlKey && !e.metaKey ? shiftedKey(e) : null;
    if (shifted && attributeKeys(f).has(shifted)) {
      if (!e.repeat) event = { kind: "attr", key: shifted };  // resolved when applied: a held key acts on its item
    } else if (e.ctrlKey || e.metaKey) {
      if (key === "z" && f.data.nav && f.data.nav.undo !== undefined) { event = { kind: "undo" }; }
      else return;
    } else if (key === "Enter" && actsOnItself(f, target)) return;  // a focused link or button outside the form
    else if (key === "Enter") event = { kind: "save" };
    else if (key === "Escape" && f.confirming) event = { kind: "cancel" };
    else if (key === "/" && f.textArea) { e.preventDefault(); e.stopImmediatePropagation(); f.textArea.focus(); return; }
    else if (key === "ArrowLeft" && f.data.nav) event = { kind: "prev" };
    else if (key === "ArrowRight" && f.data.nav) event = { kind: "next" };
    else if (key === "?") event = { kind: "help" };
    else if (key === "s" && f.data.nav && f.data.nav.skip !== undefined && !optionFor(f, "s")) event = { kind: "skip" };
    else {
      const hit = optionFor(f, key);
      if (hit && !e.repeat) event = { kind: "pick", group: hit[0].id, option: hit[1].id };
    }
    if (!event) return;
  }
  e.preventDefault();
  e.stopImmediatePropagation();
  event.at = performance.now();  // when it was pressed: a held save must not act on an item that came later
  enqueue(f, event);
}

function enqueue(f, event) {
  f.queue.push(event);
  pump(f);
}

function pump(f) {
  while (f.queue.length && !f.waiting) apply(f, f.queue.shift());
  render(f);
}

function apply(f, ev) {
  const d = f.data;
  if (ev.kind === "pick") {
    const g = d.groups.find((x) => x.id === ev.group);
    if (!g) return;
    if (g.kind === "multi") {
      const on = new Set(f.values[g.id] || []);
      on.has(ev.option) ? on.delete(ev.option) : on.add(ev.option);
      f.values[g.id] = g.options.map((o) => o.id).filter((id) => on.has(id));
      if (scoped(d, g.id, ev.option)) {  // a finding with attributes: its picker takes the Shift keys while ticked
        f.order = (f.order || []).filter((x) => x !== ev.option);
        if (on.has(ev.option)) f.order.push(ev.option);
        f.picker = f.order.length ? f.order[f.order.length - 1] : null;
      }
    } else {
      f.values[g.id] = f.values[g.id] === ev.option ? null : ev.option;
      if (g.scope) f.picker = g.scope.option;  // a value clicked on another finding's picker: the keys follow
    }
    f.message = null;
    f.confirming = false;
    scheduleDraft(f);
  } else if (ev.kind === "attr") {
    const found = attributeFor(f, ev.key);
    if (found.hit) apply(f, { kind: "pick", group: found.hit[0].id, option: found.hit[1].id });
    else { f.message = found.why; f.flash = (f.flash || 0) + 1; }
  } else if (ev.kind === "cancel") {
    f.confirming = false;
    f.message = null;
  } else if (ev.kind === "help") {
    f.showHelp = !f.showHelp;
  } else if (ev.kind === "save") {
    if (tooSoon(f, ev)) return;
    const missing = (d.require || []).find((any) => !any.ids.some((id) => filled(f.values[id])));
    if (missing) { f.message = missing.message; return; }
    const shown = (performance.now() - (f.shownAt || 0)) / 1000;
    if (needsEmptyConfirm(ticked(f), shown, Number(d.min_seconds_empty || 0), f.confirming)) {
      f.confirming = true;
      f.message = `Nothing ticked after ${shown.toFixed(1)} s: press Enter again to save it with every label 0, Esc to go back.`;
      return;
    }
    f.confirming = false;
    send(f, "save");
  } else if (ev.kind === "prev" || ev.kind === "next" || ev.kind === "skip" || ev.kind === "undo") {
    if (d.nav && d.nav[ev.kind] === false) return;
    send(f, ev.kind);
  }
}

function tooSoon(f, ev) {
  // a save pressed before this item was on screen, or too soon after: nothing is saved, the status flashes
  const min = Number(f.data.min_seconds_shown ?? MIN_SECONDS_SHOWN);
  const after = ((ev.at ?? performance.now()) - (f.shownAt || 0)) / 1000;
  if (!saveTooSoon(after, min)) return false;
  f.message = after < 0
    ? "Not saved: Enter was pressed before this report appeared. Read it, then press Enter."
    : `Not saved: Enter came ${after.toFixed(2)} s after this report appeared (under ${min} s). Read it, then press Enter.`;
  f.flash = (f.flash || 0) + 1;
  f.confirming = false;
  return true;
}

function filled(v) {
  if (v === null || v === undefined) return false;
  if (Array.isArray(v)) return true;  // a multi group may be empty on purpose (nothing ticked = all 0)
  return String(v).trim() !== "";
}

function snapshot(f) {
  const values = {};
  for (const [k, v] of Object.entries(f.values)) values[k] = Array.isArray(v) ? v.slice() : v;
  if (f.textArea) values[f.data.text.id] = f.textArea.value;
  return values;
}

function scheduleDraft(f) {
  clearTimeout(f.draftTimer);
  f.draftTimer = setTimeout(() => sendDraft(f), DRAFT_DELAY_MS);
}

function sendDraft(f) {
  clearTimeout(f.draftTimer);
  f.draftTimer = null;
  if (!f.item) return;
  f.draftSeq += 1;
  f.api.setStateValue("draft", { item: f.item.id, values: snapshot(f), n: f.draftSeq, page: PAGE });
}

function send(f, kind) {
  clearTimeout(f.draftTimer);
  f.draftTimer = null;
  lastSeq += 1;
  const payload = { seq: lastSeq, kind, item: f.item.id, values: snapshot(f), context: f.data.context || null, page: PAGE };
  f.waiting = { seq: lastSeq, payload, sentAt: performance.now() };
  f.message = null;
  f.api.setTriggerValue("action", payload);
  clearTimeout(f.resendTimer);
  // Sent again only when the app is idle and has still not answered (e.g. the connection dropped):
  // a rerun request interrupts a script run that is under way, so resending while the server works
  // on the first copy would restart that work again and again on a slow machine.
  const resend = () => {
    if (!f.waiting || f.waiting.seq !== payload.seq) return;
    if (appIdle()) f.api.setTriggerValue("action", payload);
    f.resendTimer = setTimeout(resend, RESEND_MS);
  };
  f.resendTimer = setTimeout(resend, RESEND_MS);
}

function appIdle() {
  const app = document.querySelector('[data-testid="stApp"]');
  return !!app && app.getAttribute("data-test-script-state") === "notRunning";
}

function adopt(f, data) {
  f.item = data.item;
  f.values = {};
  for (const g of data.groups) {
    const v = (data.values || {})[g.id];
    f.values[g.id] = g.kind === "multi" ? (Array.isArray(v) ? v.slice() : []) : (v === undefined ? null : v);
  }
  f.text = data.text ? ((data.values || {})[data.text.id] || "") : null;
  f.textItem = null;  // the text field is refilled for the new item
  // the findings with attributes ticked on arrival, in the vocabulary's order: the last one has the picker
  f.order = [];
  for (const g of data.groups) {
    if (g.kind !== "multi") continue;
    for (const id of f.values[g.id]) if (scoped(data, g.id, id)) f.order.push(id);
  }
  f.picker = f.order.length ? f.order[f.order.length - 1] : null;
  f.shownAt = performance.now();  // the reading clock of reading.min_seconds_empty
  f.confirming = false;
}

function actsOnItself(f, target) {
  // Enter on a focused link or button outside the form (a sidebar link, a page button) is that element's
  // own: it opens the link or presses the button instead of saving the report
  if (!target || !target.closest || (f.host && f.host.contains(target))) return false;
  const own = target.closest("a[href], button, [role=button], [role=link], summary");
  // reached with the keyboard (Tab), not left focused by a click (Streamlit may focus a clicked control again
  // after a rerun, which a browser can show as :focus-visible)
  return !!own && own.matches(":focus-visible") && !(clicked && own.contains(clicked));
}

function build(f) {
  const root = f.root;
  let host = root.querySelector(".wbk");
  if (host) { f.host = host; return; }
  host = el("div", { cls: "wbk", tabindex: "-1" });
  root.appendChild(host);
  f.host = host;
  // a page just opened from a focused sidebar link: the keyboard belongs to the form, not to that link
  const focused = document.activeElement;
  if (focused && focused !== document.body && !isEditable(focused) && focused.closest && focused.closest('[data-testid="stSidebarNav"]')) focused.blur();
  // A mouse press is taken when the button goes down, not at the click: a click needs the press and the release
  // on the same element, and an element redrawn or remounted between the two (a rerun arriving) lost it.
  host.addEventListener("pointerdown", (e) => {
    if (e.button !== 0 || (e.pointerType !== "mouse" && e.pointerType !== "pen")) return;  // a finger may start a scroll
    f.pressedAt = performance.now();
    press(f, e);
  });
  host.addEventListener("click", (e) => {
    // the click that follows a press already taken (detail > 0: made by a pointer, not by Space or Enter)
    if (e.detail > 0 && f.pressedAt && performance.now() - f.pressedAt < 5000) { f.pressedAt = 0; return; }
    press(f, e);  // a key (Space on a focused chip), a finger, or a browser whose pointerdown did not come first
  });
}

function press(f, e) {
  const node = e.target.closest ? e.target.closest("[data-ev]") : null;
  if (!node || node.disabled) return;
  enqueue(f, { ...JSON.parse(node.getAttribute("data-ev")), at: performance.now() });
}

function chip(f, g, o) {
  const b = el("button", { cls: "wbk-chip", type: "button", title: o.hint || null,
    "data-ev": JSON.stringify({ kind: "pick", group: g.id, option: o.id }), "data-option": o.id });
  if (g.kind === "multi") b.appendChild(el("span", { cls: "wbk-box", "aria-hidden": "true" }));  // drawn by CSS: no glyph
  const label = el("span", { cls: "wbk-label", text: o.label });
  b.appendChild(label);
  if (o.key) b.appendChild(el("kbd", { text: (g.scope ? "\u21e7" : "") + o.key.toUpperCase() }));
  f.nodes.chips.push({ node: b, g, o });
  return b;
}

function navButton(f, kind, label, key, primary) {
  const b = el("button", { cls: "wbk-btn" + (primary ? " primary" : ""), type: "button",
    "data-ev": JSON.stringify({ kind }), "data-kind": kind });
  b.appendChild(el("span", { text: label }));
  if (key) b.appendChild(el("kbd", { text: key }));
  if (kind !== "save") f.nodes.nav.push({ node: b, kind });
  return b;
}

// What the form's elements are built from. While it is unchanged, a render only updates the elements in
// place: rebuilding them under a reader's hands detached the chip being clicked (the click was lost) and the
// text field being typed in (its focus went to the page, so the next letters were taken as label keys).
// The heading, the caption (a first tick's draft turns "unread" into "draft") and whether a navigation button
// is enabled change on the same item: they are updated in place, not part of the shape.
function shapeOf(f) {
  const d = f.data;
  const nav = d.nav ? Object.keys(d.nav).sort() : null;
  return JSON.stringify([f.item.id, f.item.text, f.item.html, d.groups, d.text, nav, d.save_label, d.help, d.footer]);
}

function render(f) {
  const shape = shapeOf(f);
  if (f.shape !== shape || !f.nodes || !f.host.contains(f.nodes.panel)) {
    draw(f);
    f.shape = shape;
  }
  refresh(f);
}

function draw(f) {
  // Builds the elements of the item on screen. The text field is kept while the item stays (its caret and
  // what is being typed), and it keeps the focus if it had it.
  const d = f.data;
  const host = f.host;
  const keepText = f.textArea && f.textItem === f.item.id ? f.textArea : null;
  const typing = keepText && keepText.getRootNode().activeElement === keepText;
  const caret = typing ? [keepText.selectionStart, keepText.selectionEnd] : null;
  f.nodes = { chips: [], counts: [], nav: [] };
  host.replaceChildren();
  host.setAttribute("data-item", f.item.id);
  const head = el("div", { cls: "wbk-head" });
  f.nodes.heading = el("div", { cls: "wbk-heading", role: "heading", "aria-level": "4" });
  f.nodes.caption = el("div", { cls: "wbk-caption" });
  const named = el("div", { cls: "wbk-name" });
  named.appendChild(f.nodes.heading);
  named.appendChild(f.nodes.caption);
  head.appendChild(named);
  host.appendChild(head);
  const layout = el("div", { cls: "wbk-layout" + (f.item.text !== undefined || f.item.html ? " with-report" : "") });
  host.appendChild(layout);
  if (f.item.text !== undefined || f.item.html) {
    const report = el("div", { cls: "wbk-report wb-report", "data-testid": "wbReportText" });
    if (f.item.html) report.innerHTML = f.item.html;  // built on the server from escaped pieces only
    else report.textContent = f.item.text || "(empty report)";
    layout.appendChild(report);
  }
  const panel = el("div", { cls: "wbk-panel" });
  f.nodes.panel = panel;
  layout.appendChild(panel);
  const bar = el("div", { cls: "wbk-bar" });
  if (d.nav) {
    bar.appendChild(navButton(f, "prev", "Back", "\u2190"));
    bar.appendChild(navButton(f, "next", "Next", "\u2192"));
    if (d.nav.skip !== undefined) bar.appendChild(navButton(f, "skip", "Skip", "S"));
    if (d.nav.undo !== undefined) bar.appendChild(navButton(f, "undo", "Undo last save", "Ctrl+Z"));
  }
  bar.appendChild(navButton(f, "save", d.save_label || "Save and next", "Enter", true));
  head.appendChild(bar);  // beside the item's name, above the report: in view whatever the form's length
  f.nodes.status = el("div", { cls: "wbk-status", "aria-live": "polite" });
  panel.appendChild(f.nodes.status);
  f.nodes.scopes = [];
  const pickers = new Map();  // finding -> its row of attribute chips
  for (const g of d.groups) {
    if (g.scope) {
      let row = pickers.get(g.scope.option);
      if (!row) {
        if (!pickers.size) {
          f.nodes.attrTitle = el("div", { cls: "wbk-title", text: d.attributes_title || "Attributes" });
          panel.appendChild(f.nodes.attrTitle);
        }
        row = el("div", { cls: "wbk-attr", "data-scope": g.scope.option });
        row.appendChild(el("span", { cls: "wbk-attr-name", text: g.scope.title || g.scope.option }));
        pickers.set(g.scope.option, row);
        f.nodes.scopes.push({ node: row, scope: g.scope });
        panel.appendChild(row);
      }
      const chips = el("span", { cls: "wbk-chips wbk-attr-values", "data-group": g.id, title: g.title });
      for (const o of g.options) chips.appendChild(chip(f, g, o));
      row.appendChild(chips);
      continue;
    }
    const row = g.inline ? el("div", { cls: "wbk-inline" }) : panel;  // a short group: title and chips on one line
    const title = el("div", { cls: "wbk-title" });
    title.appendChild(el("strong", { text: g.title }));
    const count = el("span");
    f.nodes.counts.push({ node: count, g });
    title.appendChild(count);
    row.appendChild(title);
    const chips = el("div", { cls: "wbk-chips", "data-group": g.id });
    for (const o of g.options) chips.appendChild(chip(f, g, o));
    row.appendChild(chips);
    if (row !== panel) panel.appendChild(row);
  }
  if (d.text) {
    const label = el("label", { cls: "wbk-title", text: d.text.label });
    let area = keepText;
    if (!area) {
      area = el("textarea", { cls: "wbk-text", rows: "2", placeholder: d.text.placeholder || "", "aria-label": d.text.label });
      area.value = f.text || "";
      area.addEventListener("input", () => { f.text = area.value; scheduleDraft(f); });
      f.textItem = f.item.id;
    }
    f.textArea = area;
    label.appendChild(area);
    panel.appendChild(label);
    if (d.text.hint) panel.appendChild(el("div", { cls: "wbk-caption", text: d.text.hint }));
    if (typing) { area.focus(); area.setSelectionRange(caret[0], caret[1]); }
  } else {
    f.textArea = null;
  }
  if (d.help) {
    const help = el("div", { cls: "wbk-help", "data-testid": "wbGuidelines" });
    for (const row of d.help) {
      const p = el("p");
      p.appendChild(el("strong", { text: row.title }));
      p.appendChild(el("span", { text: " " + row.text }));
      help.appendChild(p);
    }
    f.nodes.help = help;
    panel.appendChild(help);
  }
  if (d.footer) panel.appendChild(el("div", { cls: "wbk-caption", text: d.footer }));
}

function refresh(f) {
  // Updates what changes with keys and answers (ticks, counts, status), touching no element's place.
  const host = f.host;
  const nodes = f.nodes;
  if (nodes.heading.textContent !== (f.item.heading || "")) nodes.heading.textContent = f.item.heading || "";
  if (nodes.caption.textContent !== (f.item.caption || "")) nodes.caption.textContent = f.item.caption || "";
  nodes.caption.hidden = !f.item.caption;
  for (const { node, kind } of nodes.nav) node.disabled = (f.data.nav || {})[kind] === false;
  host.setAttribute("data-state", f.waiting ? "saving" : "ready");
  host.setAttribute("data-page", PAGE);  // with data-seq, the last press sent: what the server records it by
  host.setAttribute("data-seq", String(lastSeq));
  host.setAttribute("data-held", String(f.queue.length));
  host.setAttribute("data-confirm", f.confirming ? "1" : "0");
  for (const { node, g, o } of f.nodes.chips) {
    const v = f.values[g.id];
    const on = g.kind === "multi" ? (v || []).includes(o.id) : v === o.id;
    node.classList.toggle("on", on);
    node.setAttribute("aria-pressed", on ? "true" : "false");
  }
  let anyPicker = false;
  for (const { node, scope } of nodes.scopes) {
    const shown = scopeShown(f, scope);
    anyPicker = anyPicker || shown;
    node.hidden = !shown;
    node.classList.toggle("active", shown && f.picker === scope.option);
  }
  if (nodes.attrTitle) nodes.attrTitle.hidden = !anyPicker;
  for (const { node, g } of f.nodes.counts) {
    const text = g.kind === "multi" ? ` \u00b7 ${(f.values[g.id] || []).length} ticked${g.note ? " \u00b7 " + g.note : ""}`
      : (g.note ? " \u00b7 " + g.note : "");
    if (node.textContent !== text) node.textContent = text;
  }
  const status = f.nodes.status;
  let text = "";
  if (f.waiting) text = "Saving\u2026" + (f.queue.length ? ` ${f.queue.length} key(s) held for the next item` : "");
  else if (f.message) text = f.message;
  else if (f.notice) text = f.notice;
  status.classList.toggle("error", !f.waiting && !!f.message);
  if (status.textContent !== text) status.textContent = text;
  if (f.flash && status.dataset.flash !== String(f.flash)) {  // restart the flash: the same message again flashes again
    status.dataset.flash = String(f.flash);
    status.classList.remove("flash");
    void status.offsetWidth;
    status.classList.add("flash");
  }
  if (f.nodes.help) {
    const opening = f.nodes.help.hidden && f.showHelp;
    f.nodes.help.hidden = !f.showHelp;
    // it sits under the chips: opened below the fold (y = 922 px on a 900 px screen) it looked like nothing
    if (opening) f.nodes.help.scrollIntoView({ block: "nearest" });
  }
}

export default function (component) {
  const { data, key, parentElement, setStateValue, setTriggerValue } = component;
  let f = forms.get(key);
  if (!f) {
    f = { queue: [], waiting: null, values: {}, item: null, draftSeq: 0, message: null, notice: null, mountedAt: 0 };
    forms.set(key, f);
  }
  // a stale copy of the form (Streamlit may keep the old element while it mounts a moved one) draws older
  // data: never go back to it, or the next Enter would save the previous item again
  if ((data.acked || 0) < (f.acked || 0)) return;
  f.api = { setStateValue, setTriggerValue };
  f.root = parentElement;
  f.mountedAt = performance.now();
  build(f);
  if (!listening) {
    window.addEventListener("pointerdown", noteInput, true);
    window.addEventListener("keydown", noteInput, true);
    window.addEventListener("keydown", onKeyDown, true);
    listening = true;
  }
  f.acked = data.acked || 0;
  const answered = f.waiting && (data.acked || 0) >= f.waiting.seq;
  if (answered) {
    clearTimeout(f.resendTimer);
    const failed = data.error;
    f.waiting = null;
    f.data = data;
    adopt(f, data);
    if (failed) {
      const held = f.queue.length;
      f.queue = [];  // they were meant for the next item, which is not open: applying them here would be wrong
      f.message = failed + (held ? ` (${held} key(s) pressed after Enter were not applied)` : "");
    }
  } else if (!f.waiting && (!f.item || !f.data || f.item.id !== data.item.id)) {
    f.data = data;
    adopt(f, data);  // a different item was opened (first mount, a row click, a filter)
  } else if (!f.waiting) {
    f.data = { ...data, item: { ...data.item } };  // same item: the ticks on screen are newer than the server's copy
    f.item = f.data.item;
  }
  f.notice = (f.data && f.data.notice) || null;
  pump(f);
}
