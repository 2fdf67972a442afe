"""Icons are Streamlit's own Material symbols or inline SVG: never an emoji (an empty box on a workstation
without an emoji font) and never a font or image from an outside server."""

from __future__ import annotations

import re
from pathlib import Path

UI = Path(__file__).resolve().parents[2] / "workbench" / "ui"
# pictographs and the symbol blocks whose characters have emoji forms (U+2192-style arrows and punctuation
# are plain text in every font and stay allowed)
EMOJI_BLOCKS = [
    (0x2300, 0x23FF),
    (0x2460, 0x24FF),
    (0x25A0, 0x27BF),
    (0x2900, 0x297F),
    (0x2B00, 0x2BFF),
    (0x1F000, 0x1FAFF),
    (0xFE0F, 0xFE0F),
    (0x200D, 0x200D),
]


def ui_sources() -> dict[str, str]:
    """Every Python, JavaScript and CSS file of the app, with \\uXXXX escapes of the JavaScript read as characters."""
    out = {}
    for path in sorted(UI.rglob("*")):
        if path.suffix in (".py", ".js", ".css"):
            text = path.read_text(encoding="utf-8")
            out[str(path.relative_to(UI))] = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    return out


def test_no_emoji_anywhere_in_the_app():
    found = [
        (name, hex(ord(ch)))
        for name, text in ui_sources().items()
        for ch in text
        if any(lo <= ord(ch) <= hi for lo, hi in EMOJI_BLOCKS)
    ]
    assert found == [], found


def test_every_icon_is_a_material_symbol_or_the_inline_svg():
    icons = [(name, m.group(1)) for name, text in ui_sources().items() for m in re.finditer(r"\bicon=([^,)\n]+)", text)]
    assert icons, "the scan finds the icons"
    wrong = [
        (name, value)
        for name, value in icons
        if not re.match(r"""^(["']:material/[a-z_]+:["']|icon\b|FAVICON\b)""", value)
    ]
    assert wrong == [], wrong


def test_the_browser_tab_icon_is_an_inline_svg():
    from workbench.ui import app

    assert app.FAVICON.startswith("<svg ") and "http" not in app.FAVICON.replace("http://www.w3.org/2000/svg", "")
