"""A study folder: workbench.yaml (settings), the vocabulary copy, the prompt Git repo, the database.

A study is self-contained (its vocabulary is copied in at creation), so it can be zipped, moved
or opened by a later version of the workbench and still mean the same thing.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from workbench.core.reading import min_seconds_empty, min_seconds_shown
from workbench.core.vocab import MAX_LABELS, Vocabulary, VocabularyError, parse_vocabulary
from workbench.core.yaml_text import load_yaml
from workbench.errors import NotFound, WorkbenchError
from workbench.shipped import shipped_dir

VOCAB_DIR = shipped_dir("vocab")
PROMPTS_DIR = shipped_dir("prompts")
CONFIG_FILE = "workbench.yaml"
VOCAB_FILE = "vocabulary.yaml"
PROMPT_REPO_DIR = "prompts"
DEFAULT_CATEGORIES = [
    "negation missed",
    "hedging/uncertainty",
    "synonym or abbreviation",
    "temporal wording",
    "device or post-procedure",
    "laterality/location",
    "overlapping label definitions",
    "report ambiguous",
    "reference label wrong",
    "other",
    # attribute disagreements (a matched finding's severity or change differs; side is laterality/location)
    "severity",
    "comparison",
]
SIGNIFICANCE = ["changes management", "does not change management", "unsure"]
AUTH_MODES = ("none", "local", "oidc")
NO_AUTH_ON_NETWORK = "WORKBENCH_NO_AUTH_ON_NETWORK"  # set by `workbench app --no-auth-on-network` to the address served
ZERO_DIVISION_POLICIES = ("zero", "one", "exclude")
# a new study allows the offline labeller only: a local model server is allowed by its address and port
# (`workbench allow-endpoint 127.0.0.1:8080`), never every local port (a forwarder can listen on any of them)
DEFAULT_ENDPOINTS = ["workbench/rules"]


class StudyError(WorkbenchError, ValueError):
    """A study folder or its settings are wrong; the message says what to do."""


class UnknownName(StudyError, NotFound):
    """A label, cohort or run the user named does not exist; the message names the closest and what exists."""


@dataclass
class StudyConfig:
    """workbench.yaml as an object; unknown keys are refused so typos don't go unnoticed."""

    name: str
    vocabulary: str = VOCAB_FILE
    database: str = "sqlite:///workbench.db"
    reference: dict = field(default_factory=lambda: {"rule": "at_least", "k": 4, "n": 6})
    sections: list = field(default_factory=lambda: ["findings", "impression"])
    labeller: dict = field(default_factory=lambda: {"model": "workbench/rules", "concurrency": 8})
    error_categories: list = field(default_factory=lambda: list(DEFAULT_CATEGORIES))
    allowed_endpoints: list = field(default_factory=lambda: list(DEFAULT_ENDPOINTS))
    auth: str = "none"
    dev_cohort: str = "dev"
    # Annotate offers a picker for the attributes (side, severity ...) of each ticked label; off by default
    # so presence-only reading stays as fast
    annotate_attributes: bool = False

    # what a label with no positive on either side counts as in every macro figure of the study: exclude
    # (left out of the mean, and named; the default), zero (as the released Ran Score script) or one
    zero_division: str = "exclude"

    adaptive: dict = field(default_factory=dict)  # adaptive reading (core/adaptive.py); empty: off
    reading: dict = field(default_factory=dict)  # the reading room's settings (core/reading.py); empty: defaults

    KEYS = (
        "name",
        "vocabulary",
        "database",
        "reference",
        "sections",
        "labeller",
        "error_categories",
        "allowed_endpoints",
        "auth",
        "dev_cohort",
        "annotate_attributes",
        "zero_division",
        "adaptive",
        "reading",
    )

    def to_dict(self) -> dict:
        """Plain data for YAML (adaptive reading only once set: older studies' settings read as before)."""
        return {k: getattr(self, k) for k in self.KEYS if k not in ("adaptive", "reading") or getattr(self, k)}

    @classmethod
    def from_dict(cls, data: dict, source: str) -> StudyConfig:
        """Validate workbench.yaml content."""
        if not isinstance(data, dict) or "name" not in data:
            raise StudyError(f"{source}: must be a mapping with at least 'name'")
        unknown = sorted(set(data) - set(cls.KEYS))
        if unknown:
            raise StudyError(f"{source}: unknown key {unknown[0]!r} (allowed: {', '.join(cls.KEYS)})")
        cfg = cls(**data)
        bad = [s for s in cfg.sections if s not in ("findings", "impression", "text")]
        if bad or not cfg.sections:
            raise StudyError(
                f"{source}: sections must be a non-empty list of findings, impression, text; got {cfg.sections}"
            )
        if cfg.auth not in AUTH_MODES:  # a typo ("NONE") must not pass as no sign-in, nor skip the 0.0.0.0 refusal
            raise StudyError(f"{source}: auth must be one of {', '.join(AUTH_MODES)}, got {cfg.auth!r}")
        if cfg.zero_division not in ZERO_DIVISION_POLICIES:
            raise StudyError(
                f"{source}: zero_division must be one of {', '.join(ZERO_DIVISION_POLICIES)}, got {cfg.zero_division!r}"
            )
        # numpy/pandas come with these: not needed for `workbench --help`, so imported only to check a config
        from workbench.core.adaptive import AdaptiveSettings
        from workbench.core.reference import ReferenceRule

        try:
            ReferenceRule.from_config(cfg.reference)
        except ValueError as exc:
            raise StudyError(f"{source}: reference: {exc}") from exc

        try:
            AdaptiveSettings.from_config(cfg.adaptive)
        except (TypeError, ValueError) as exc:
            raise StudyError(f"{source}: adaptive: {exc}") from exc

        try:
            min_seconds_empty(cfg.reading)
            min_seconds_shown(cfg.reading)
        except ValueError as exc:
            raise StudyError(f"{source}: reading: {exc}") from exc
        return cfg


@dataclass
class StudyPaths:
    """Where a study's parts live."""

    root: Path

    @property
    def config(self) -> Path:
        """workbench.yaml."""
        return self.root / CONFIG_FILE

    @property
    def prompts(self) -> Path:
        """The study's prompt Git repository."""
        return self.root / PROMPT_REPO_DIR

    @property
    def bundles(self) -> Path:
        """Where frozen bundles are written."""
        return self.root / "bundles"


def builtin_vocabularies() -> list[str]:
    """Names of the vocabularies shipped with the package (workbench/shipped/vocab)."""
    return sorted(p.stem for p in VOCAB_DIR.glob("*.yaml"))


def find_vocabulary_file(name_or_path: str) -> Path:
    """A shipped vocabulary by name, or a user's own file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    shipped = VOCAB_DIR / f"{name_or_path}.yaml"
    if shipped.exists():
        return shipped
    raise StudyError(
        f"unknown vocabulary {name_or_path!r}: use one of {builtin_vocabularies()} or a path to a .yaml file"
    )


def safe_load_fast(text: str):
    """The bounded YAML loader (libyaml when PyYAML has it: every command reads the study's settings and
    vocabulary; alias bombs and deep nesting refused in milliseconds)."""
    return load_yaml(text)


def _refuse_too_many_labels(text: str, source: str) -> None:
    """Count the top-level `labels` items from the YAML event stream and stop past MAX_LABELS: building
    100,000 labels as Python objects takes a minute before parse_vocabulary could refuse them."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth, key, in_labels, count = 0, None, False, 0
    for ev in yaml.parse(text, Loader=loader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            if in_labels and depth == 2:
                count += 1
            in_labels = in_labels or (depth == 1 and key == "labels" and isinstance(ev, yaml.SequenceStartEvent))
            depth, key = depth + 1, None
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            in_labels = in_labels and depth >= 2
        elif isinstance(ev, yaml.ScalarEvent):
            if in_labels and depth == 2:
                count += 1
            elif depth == 1:
                key = ev.value if key is None else None  # a top-level key, then its value
        if count > MAX_LABELS:
            raise VocabularyError(
                f"{source}: more than {MAX_LABELS:,} labels; a vocabulary holds at most {MAX_LABELS:,} "
                "(split it into several studies or keep the labels you read)"
            )


_VOCABULARIES: dict[tuple[str, int, int], Vocabulary] = {}  # (path, mtime_ns, size) -> parsed (it is frozen)


def load_vocabulary_file(path: Path) -> Vocabulary:
    """Read and validate a vocabulary YAML file (parsed once while the file is unchanged: the app opens
    the study on every rerun)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _VOCABULARIES:
        _VOCABULARIES[key] = _read_vocabulary_file(path)
    return _VOCABULARIES[key]


def _read_vocabulary_file(path: Path) -> Vocabulary:
    """Read and validate a vocabulary YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
        _refuse_too_many_labels(text, str(path))
        data = safe_load_fast(text)
    except yaml.YAMLError as exc:
        raise StudyError(f"{path}: not valid YAML ({exc})") from exc
    return parse_vocabulary(data, str(path))


def load_config(root: Path) -> StudyConfig:
    """Read a study's workbench.yaml."""
    path = root / CONFIG_FILE
    if not path.exists():
        raise StudyError(f"{root} is not a study (no {CONFIG_FILE}); create one with `workbench init {root}`")
    try:
        data = safe_load_fast(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise StudyError(f"{path}: not valid YAML ({exc})") from exc
    return StudyConfig.from_dict(data, str(path))


def save_config(root: Path, cfg: StudyConfig) -> None:
    """Write workbench.yaml atomically (write a temp file, then rename)."""
    path = root / CONFIG_FILE
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, path)


def refuse_password_in_url(url: str, option: str) -> None:
    """A database URL that would be written to workbench.yaml must not carry a password (the file is read in clear)."""
    if re.search(r"://[^/@]*:[^/@]*@", url):
        raise StudyError(
            f"{option}: the URL holds a password, which would be written to workbench.yaml in clear; "
            "give the URL without it (postgresql+psycopg://USER@HOST/DB) and the password in the PGPASSWORD "
            "environment variable or a password file (~/.pgpass, or the file named by PGPASSFILE, mode 600); "
            "nothing was written"
        )


def database_url(root: Path, cfg: StudyConfig) -> str:
    """The database URL with a relative SQLite path resolved against the study folder."""
    url = os.environ.get("WORKBENCH_DATABASE_URL") or cfg.database
    prefix = "sqlite:///"
    if (
        url.startswith(prefix)
        and not url.startswith(("sqlite:////", "sqlite:///file:"))
        and url != "sqlite:///:memory:"
    ):
        return prefix + str((root / url[len(prefix) :]).resolve())
    return url


def permission_warnings(root: Path, db: Path | None) -> list[str]:
    """What about the study's folder and database file lets other users of this machine read it (said, never changed)."""
    checks = [(root, 0o700, "study folder"), *([(db, 0o600, "database")] if db is not None else [])]
    found = []
    for path, private, what in checks:
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if mode & 0o077:
            found.append(
                f"the {what} {path} can be read by other users of this machine (mode {mode:04o}; it holds "
                f"report text{' and password hashes' if what == 'database' else ''}): `chmod {private:o} {path}`"
            )
    return found


def resolve_study_path(path: str | os.PathLike | None) -> Path:
    """--study PATH, else $WORKBENCH_STUDY, else the current folder."""
    chosen = path or os.environ.get("WORKBENCH_STUDY") or "."
    return Path(chosen).expanduser().resolve()
