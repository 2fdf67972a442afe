"""The one YAML loader: every YAML the workbench reads (workbench.yaml, vocabularies, prompt files, phrase lists,
model replies) goes through load_yaml, so an alias bomb or a deeply nested document is refused in milliseconds.

A "billion laughs" file is a few hundred bytes whose aliases expand to billions of nodes: yaml.safe_load builds
them all (8 GB in two minutes). Here the document is composed first (aliases stay shared nodes, linear in the
text), its expanded size is counted over that graph, and only a document within the bounds is built.
"""

from __future__ import annotations

import yaml

from workbench.errors import UserError

MAX_DEPTH = 100  # nesting of mappings and sequences; real files use fewer than 10
MAX_ALIAS_NODES = 100_000  # nodes that aliases add beyond the document as written
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a tenth of the pure-Python time


class YamlTooLarge(yaml.YAMLError, UserError):
    """A YAML document past the nesting or alias-expansion bound; callers that catch YAMLError report it as such."""


def load_yaml(text: str):
    """yaml.safe_load with nesting and alias expansion bounded; past a bound, YamlTooLarge naming it."""
    _refuse_deep(text)
    loader = _LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_alias_bomb(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_deep(text: str) -> None:
    """Nesting is counted on the event stream, before any node or object exists."""
    depth = 0
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise YamlTooLarge(f"nested more than {MAX_DEPTH} levels deep (line {line}); is this the right file?")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _refuse_alias_bomb(root: yaml.Node) -> None:
    """Count the nodes the document would expand to (each alias counts its whole target again), iteratively;
    an alias inside its own anchor (a document that contains itself) is refused too."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            open_nodes.discard(key)
            continue
        if key in open_nodes:
            raise YamlTooLarge("an alias (*name) refers to a node that contains it; the document would be endless")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    expanded = sizes[id(root)]
    if expanded - len(sizes) > MAX_ALIAS_NODES:
        raise YamlTooLarge(
            f"its aliases (*name) expand to {expanded:,} nodes from {len(sizes):,} written; at most "
            f"{MAX_ALIAS_NODES:,} more are allowed (an alias bomb?)"
        )


def _children(node: yaml.Node) -> list[yaml.Node]:
    """A node's direct children (keys and values of a mapping)."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
