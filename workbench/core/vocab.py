"""Label vocabularies: which findings a study labels, and how derived labels follow from the rest.

A vocabulary is plain data (parsed from YAML by the caller); validation names the offending key
so that a user editing their own vocabulary file sees exactly what to fix.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from workbench.errors import NotFound, WorkbenchError

if TYPE_CHECKING:
    import pandas as pd

ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
LABEL_KEYS = {"id", "name", "category", "definition", "look_for", "derived", "ignore_for_derived", "attributes"}
VOCAB_KEYS = {"id", "name", "description", "source", "labels", "attributes"}
DERIVED_RULES = {"none_of_others"}
# a labeller asks one question per label per report: beyond this a study is not workable, and the
# check comes before any label is parsed so a runaway file is refused at once
MAX_LABELS = 1000

# Attributes every vocabulary may use (SPEC-CXR's location, severity and comparison); a vocabulary's
# own top-level `attributes:` mapping adds more (zone: [upper, middle, lower]) or narrows one of these.
STANDARD_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "side": ("left", "right", "bilateral"),
    "severity": ("mild", "moderate", "severe"),
    "change": ("new", "worse", "better", "unchanged", "resolved"),
}


class VocabularyError(WorkbenchError, ValueError):
    """A vocabulary file is malformed; the message names the file and key."""


@dataclass(frozen=True)
class Label:
    """One finding label: a stable snake_case id and the display name exchanged with other tools."""

    id: str
    name: str
    category: str
    definition: str
    derived: str | None = None
    # labels that do not cancel a derived label (CheXpert: support devices leave No Finding alone)
    ignore_for_derived: tuple[str, ...] = ()
    # names of the attributes a positive finding of this label carries (side, severity, ...)
    attributes: tuple[str, ...] = ()
    # wording a reader looks for in a report (the reading guideline shown beside each chip; not the prompt's)
    look_for: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vocabulary:
    """An ordered label set."""

    id: str
    name: str
    labels: tuple[Label, ...]
    description: str = ""
    source: str = ""
    _index: dict = field(default_factory=dict, compare=False, repr=False)
    # attribute name -> its closed set of values (the standard ones plus the vocabulary's own)
    attribute_values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def ids(self) -> list[str]:
        """All label ids in file order."""
        return [lab.id for lab in self.labels]

    @property
    def asked_ids(self) -> list[str]:
        """Labels that readers mark and the labeller is asked about (not derived)."""
        return [lab.id for lab in self.labels if not lab.derived]

    @property
    def derived_ids(self) -> list[str]:
        """Labels computed from the others."""
        return [lab.id for lab in self.labels if lab.derived]

    def label(self, key: str) -> Label:
        """Look a label up by id or display name (case-insensitive); KeyError names it."""
        found = self.resolve(key)
        if found is None:
            raise NotFound(f"unknown label {key!r} in vocabulary {self.id!r}")
        return self.labels[self.ids.index(found)]

    def resolve(self, key: str) -> str | None:
        """Map an id or display name (case-insensitive, spaces/underscores alike) to an id."""
        norm = _norm(key)
        for lab in self.labels:
            if _norm(lab.id) == norm or _norm(lab.name) == norm:
                return lab.id
        return None

    def names(self) -> dict[str, str]:
        """id -> display name."""
        return {lab.id: lab.name for lab in self.labels}

    def attribute_spec(self, label_id: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The attributes of one label with their allowed values, in the label's order (hashable)."""
        values = dict(self.attribute_values)
        return tuple((name, values[name]) for name in self.label(label_id).attributes)

    def attribute_specs(self) -> dict[str, tuple[tuple[str, tuple[str, ...]], ...]]:
        """label id -> attribute_spec, for every asked label that has attributes."""
        return {lab.id: self.attribute_spec(lab.id) for lab in self.labels if lab.attributes and not lab.derived}

    def check_attribute(self, label_id: str, attribute: str, value: str | None = None) -> None:
        """Raise VocabularyError unless the label carries the attribute and value is one of its values."""
        spec = dict(self.attribute_spec(label_id))
        if attribute not in spec:
            allowed = ", ".join(spec) or "none"
            raise VocabularyError(
                f"label {label_id!r} has no attribute {attribute!r} in vocabulary {self.id!r} "
                f"(its attributes: {allowed})"
            )
        if value is not None and value not in spec[attribute]:
            raise VocabularyError(
                f"{label_id}.{attribute}: unknown value {value!r}; allowed: {', '.join(spec[attribute])}"
            )


def _norm(text: str) -> str:
    """Normalise a label key for lookup."""
    return re.sub(r"[\s_\-]+", " ", str(text).strip().lower())


def parse_vocabulary(data: object, source: str = "<vocabulary>") -> Vocabulary:
    """Validate parsed YAML and build a Vocabulary; errors name source and key."""
    if not isinstance(data, dict):
        raise VocabularyError(f"{source}: top level must be a mapping with 'id', 'name', 'labels'")
    unknown = set(data) - VOCAB_KEYS
    if unknown:
        raise VocabularyError(f"{source}: unknown key(s) {sorted(unknown)}; allowed {sorted(VOCAB_KEYS)}")
    for key in ("id", "name", "labels"):
        if key not in data:
            raise VocabularyError(f"{source}: missing key {key!r}")
    if not isinstance(data["labels"], list) or not data["labels"]:
        raise VocabularyError(f"{source}: 'labels' must be a non-empty list")
    if len(data["labels"]) > MAX_LABELS:
        raise VocabularyError(
            f"{source}: {len(data['labels']):,} labels; a vocabulary holds at most {MAX_LABELS:,} "
            "(split it into several studies or keep the labels you read)"
        )
    labels = tuple(_parse_label(item, f"{source}: labels[{i}]") for i, item in enumerate(data["labels"]))
    _check_unique(labels, source)
    ids = {lab.id for lab in labels}
    for lab in labels:
        for other in lab.ignore_for_derived:
            if other not in ids:
                raise VocabularyError(f"{source}: label {lab.id!r} ignore_for_derived names unknown label {other!r}")
    values = _parse_attribute_values(data.get("attributes"), source)
    for lab in labels:
        for name in lab.attributes:
            if name not in values:
                raise VocabularyError(
                    f"{source}: label {lab.id!r} names unknown attribute {name!r}; known: "
                    f"{', '.join(values)} (declare your own under the top-level 'attributes:')"
                )
        if lab.derived and lab.attributes:
            raise VocabularyError(f"{source}: label {lab.id!r} is derived and cannot carry attributes")
    return Vocabulary(
        id=str(data["id"]),
        name=str(data["name"]),
        labels=labels,
        description=str(data.get("description", "")),
        source=str(data.get("source", "")),
        attribute_values=tuple(values.items()),
    )


def _parse_attribute_values(data: object, source: str) -> dict[str, tuple[str, ...]]:
    """The standard attributes plus a vocabulary's own {name: [values]} (which may redefine one)."""
    values = dict(STANDARD_ATTRIBUTES)
    if data is None:
        return values
    if not isinstance(data, dict):
        raise VocabularyError(f"{source}: 'attributes' must map an attribute name to its list of values")
    for name, items in data.items():
        where = f"{source}: attributes.{name}"
        if not ID_PATTERN.match(str(name)):
            raise VocabularyError(f"{where}: attribute name must be snake_case (a-z, 0-9, _)")
        if (
            not isinstance(items, list)
            or not items
            or not all(isinstance(v, str) and ID_PATTERN.match(v) for v in items)
        ):
            raise VocabularyError(f"{where}: must be a non-empty list of snake_case values (e.g. [upper, lower])")
        if len(set(items)) != len(items):
            raise VocabularyError(f"{where}: a value is listed twice")
        values[str(name)] = tuple(items)
    return values


def _parse_label(item: object, where: str) -> Label:
    """Validate one label entry."""
    if not isinstance(item, dict):
        raise VocabularyError(f"{where}: each label must be a mapping")
    unknown = set(item) - LABEL_KEYS
    if unknown:
        raise VocabularyError(f"{where}: unknown key(s) {sorted(unknown)}; allowed {sorted(LABEL_KEYS)}")
    for key in ("id", "name", "category", "definition"):
        if not item.get(key):
            raise VocabularyError(f"{where}: missing or empty key {key!r}")
    if not ID_PATTERN.match(str(item["id"])):
        raise VocabularyError(f"{where}: id {item['id']!r} must be snake_case (a-z, 0-9, _)")
    derived = item.get("derived")
    if derived is not None and derived not in DERIVED_RULES:
        raise VocabularyError(f"{where}: derived {derived!r} unknown; allowed {sorted(DERIVED_RULES)}")
    ignore = item.get("ignore_for_derived", []) or []
    if not isinstance(ignore, list):
        raise VocabularyError(f"{where}: ignore_for_derived must be a list of label ids")
    if ignore and not derived:
        raise VocabularyError(f"{where}: ignore_for_derived only applies to a derived label")
    attributes = item.get("attributes", []) or []
    if not isinstance(attributes, list) or not all(isinstance(a, str) for a in attributes):
        raise VocabularyError(f"{where}: attributes must be a list of attribute names (e.g. [side, severity])")
    if len(set(attributes)) != len(attributes):
        raise VocabularyError(f"{where}: an attribute is listed twice")
    look_for = item.get("look_for", []) or []
    if not isinstance(look_for, list) or not all(isinstance(p, str) and p.strip() for p in look_for):
        raise VocabularyError(
            f"{where}: look_for must be a list of phrases a reader looks for (e.g. [collapse, volume loss])"
        )
    return Label(
        id=str(item["id"]),
        name=str(item["name"]),
        category=str(item["category"]),
        definition=str(item["definition"]).strip(),
        derived=derived,
        ignore_for_derived=tuple(str(x) for x in ignore),
        attributes=tuple(attributes),
        look_for=tuple(p.strip() for p in look_for),
    )


def _check_unique(labels: tuple[Label, ...], source: str) -> None:
    """Ids and display names must be unique."""
    seen: dict[str, str] = {}
    counts = Counter(lab.id for lab in labels)  # one pass: list.count per label made this quadratic
    dupes = sorted(i for i, n in counts.items() if n > 1)
    if dupes:
        raise VocabularyError(f"{source}: label id {dupes[0]!r} is used more than once")
    for lab in labels:
        for key in (_norm(lab.id), _norm(lab.name)):
            if key in seen and seen[key] != lab.id:
                raise VocabularyError(f"{source}: label {lab.id!r} clashes with {seen[key]!r} ({key!r})")
            seen[key] = lab.id


def derive_frame(vocab: Vocabulary, table: pd.DataFrame) -> pd.DataFrame:
    """Derived labels filled from the asked ones over a reports x labels DataFrame (NaN = unknown); returns a copy."""
    out = table.copy()
    for lab in vocab.labels:
        if lab.derived != "none_of_others":
            continue
        cols = [i for i in vocab.asked_ids if i not in lab.ignore_for_derived and i in table.columns]
        block = table[cols]
        any_pos = (block == 1).any(axis=1)
        any_unknown = block.isna().any(axis=1)
        derived = (~any_pos).astype(float)
        derived[~any_pos & any_unknown] = float("nan")
        out[lab.id] = derived
    return out
