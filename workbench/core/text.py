"""Report text: which sections the labeller reads, and the hash that identifies a text."""

from __future__ import annotations

import hashlib


def text_hash(text: str) -> str:
    """sha256 of a report text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compose_text(findings: str, impression: str, text: str, sections: list[str]) -> str:
    """The text the labeller reads, from the study's chosen sections (whole text as a fallback)."""
    parts = []
    for name, value in (("findings", findings), ("impression", impression), ("text", text)):
        if name in sections and value and value.strip():
            parts.append(f"{name.upper()}: {value.strip()}" if name != "text" else value.strip())
    if not parts:
        parts = [p.strip() for p in (text, findings, impression) if p and p.strip()]
    return "\n".join(parts)
