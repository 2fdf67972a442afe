"""Rewrite a YAML file's data while keeping its comments, key order and layout.

A label prompt saved from a draft used to be dumped afresh: the starter comment went, list
indentation changed, and `git diff` showed every unchanged item as removed and added. Here the
file is loaded with ruamel.yaml's round-trip loader, only the values that differ are replaced (an
unchanged item keeps its object, and with it its comments and quoting), and it is written back
with the file's own indentation, so a diff shows what changed and nothing else.
"""

from __future__ import annotations

import difflib
import io
import json
import re

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

WIDTH = 100  # the width PyYAML wrapped the workbench's own files at: re-wrapped lines stay where they were


def rewrite(text: str, data: dict) -> str:
    """text with its data replaced by data (a mapping), changing only the lines of what differs."""
    yaml = _round_trip(text)
    doc = yaml.load(text)
    if not isinstance(doc, CommentedMap):
        return dump(data)
    _update_map(doc, data)
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()


def dump(data: dict) -> str:
    """A new file for data, in the layout of the shipped starter prompts (lists indented under their key)."""
    yaml = _yaml(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _yaml(mapping: int, sequence: int, offset: int) -> YAML:
    yaml = YAML()  # round-trip
    yaml.preserve_quotes = True
    yaml.width = WIDTH
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    return yaml


def _round_trip(text: str) -> YAML:
    """A round-trip YAML that writes with the indentation the text already uses."""
    return _yaml(*_indentation(text))


def _indentation(text: str) -> tuple[int, int, int]:
    """(mapping indent, sequence indent, dash offset) as first seen under a bare `key:` line; (2, 2, 0) by default."""
    mapping, sequence, offset = None, None, None
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for parent, child in zip(lines, lines[1:], strict=False):
        if not re.fullmatch(r"\s*(- )?[^\s#][^:#]*:\s*(#.*)?", parent):
            continue
        base = len(parent) - len(parent.lstrip()) + (2 if parent.lstrip().startswith("- ") else 0)
        step = len(child) - len(child.lstrip()) - base
        if step < 0:
            continue
        if child.lstrip().startswith("- "):
            if sequence is None:
                offset, sequence = step, step + 2
        elif mapping is None and step > 0:
            mapping = step
    return mapping or 2, sequence or 2, offset or 0


def _plain(value):
    """Round-trip nodes as plain data, for comparing with the new values."""
    return json.loads(json.dumps(value))


def _merged(old, new):
    """The node to keep for a key or item: the old one when equal (or updated in place), else the new value."""
    if _plain(old) == new:
        return old
    if isinstance(old, CommentedMap) and isinstance(new, dict):
        _update_map(old, new)
        return old
    if isinstance(old, CommentedSeq) and isinstance(new, list):
        _update_seq(old, new)
        return old
    if isinstance(old, str) and isinstance(new, str) and type(old) is not str:
        try:
            return type(old)(new)  # a literal or quoted string keeps its style
        except TypeError:
            return new
    return new


def _update_map(node: CommentedMap, new: dict) -> None:
    """Make node hold new's keys and values: removed keys go, new keys are placed in new's order."""
    for key in [k for k in node if k not in new]:
        del node[key]
    for position, (key, value) in enumerate(new.items()):
        if key in node:
            node[key] = _merged(node[key], value)
        else:
            node.insert(min(position, len(node)), key, value)


def _update_seq(node: CommentedSeq, new: list) -> None:
    """Make node hold new's items, keeping the nodes (and comments) of the items that did not change."""
    was_empty = len(node) == 0
    old = [json.dumps(_plain(x), sort_keys=True) for x in node]
    matcher = difflib.SequenceMatcher(a=old, b=[json.dumps(x, sort_keys=True) for x in new], autojunk=False)
    for tag, i1, i2, j1, j2 in reversed(matcher.get_opcodes()):
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                node[i] = _merged(node[i], new[j])
            continue
        for i in reversed(range(i1, i2)):
            del node[i]
        for offset, item in enumerate(new[j1:j2]):
            node.insert(i1 + offset, item)
    if was_empty and node:
        node.fa.set_block_style()  # `look_for: []` that gains items becomes a list like the others
