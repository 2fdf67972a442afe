"""Frozen bundles: a prompt version with its vocabulary, model, parameters and the metrics that
justified freezing it, in one canonical JSON file with a sha256 over its content.

Canonical means: sorted keys, no insignificant whitespace, UTF-8, floats rounded to 6 places, so
the same inputs always give byte-identical files and the hash can be checked anywhere.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.core.prompts import PromptSet, dump_label_prompt, dump_task, parse_label_prompt, parse_task
from workbench.core.vocab import Vocabulary, parse_vocabulary

FORMAT = "workbench-bundle/1"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class BundleError(ValueError):
    """A bundle file is malformed or its hash does not match its content."""


@dataclass(frozen=True)
class Bundle:
    """A loaded, verified bundle."""

    sha256: str
    content: dict
    vocab: Vocabulary
    prompts: PromptSet

    @property
    def name(self) -> str:
        """The bundle's frozen name."""
        return self.content["name"]

    @property
    def model(self) -> dict:
        """Model and parameters recorded at freeze time."""
        return self.content["model"]

    @property
    def endpoint(self) -> dict:
        """Where the justifying run sent report text ({} for bundles frozen before this was recorded)."""
        return self.content.get("endpoint") or {}

    @property
    def sections(self) -> list[str]:
        """Report sections the labeller reads."""
        return self.content.get("sections", ["findings", "impression"])


def _round(obj):
    """Round floats (NaN -> None) so serialisation is stable across platforms."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, float):
        obj = float(obj)  # numpy float64 is a float subclass: make it a plain float
        return None if math.isnan(obj) or math.isinf(obj) else round(obj, 6)
    if isinstance(obj, dict):
        return {str(k): _round(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return _round(obj.item())
    if isinstance(obj, int):
        return int(obj)
    return obj


def canonical(obj) -> bytes:
    """Canonical JSON bytes of an object."""
    return json.dumps(_round(obj), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def vocab_to_dict(vocab: Vocabulary) -> dict:
    """A vocabulary as plain data (the file format)."""
    labels = []
    for lab in vocab.labels:
        item = {"id": lab.id, "name": lab.name, "category": lab.category, "definition": lab.definition}
        if lab.derived:
            item["derived"] = lab.derived
        if lab.ignore_for_derived:
            item["ignore_for_derived"] = list(lab.ignore_for_derived)
        labels.append(item)
    return {"id": vocab.id, "name": vocab.name, "description": vocab.description, "source": vocab.source, "labels": labels}


def build_content(name: str, vocab: Vocabulary, prompts: PromptSet, model: dict, parser_version: str,
                  prompt_commit: str, metrics: dict, frozen_by: str, frozen_at: str, sections: list[str],
                  endpoint: dict | None = None) -> dict:
    """Everything a bundle holds, as plain data (endpoint: where the labeller's text went)."""
    if not NAME_PATTERN.match(name):
        raise BundleError(f"bundle name {name!r} must be letters, digits, '.', '_' or '-' (max 100)")
    content = {
        "format": FORMAT, "name": name, "vocabulary": vocab_to_dict(vocab),
        "prompts": {"task": dump_task(prompts.task), "labels": {k: dump_label_prompt(v) for k, v in prompts.labels.items()}},
        "mode": prompts.task.mode, "model": model, "parser_version": parser_version, "prompt_commit": prompt_commit,
        "sections": list(sections), "metrics": metrics, "frozen_by": frozen_by, "frozen_at": frozen_at,
    }
    if endpoint is not None:
        content["endpoint"] = endpoint
    return content


def content_sha256(content: dict) -> str:
    """sha256 over the canonical content."""
    return hashlib.sha256(canonical(content)).hexdigest()


def bundle_bytes(content: dict) -> bytes:
    """The bundle file: canonical JSON of {content, sha256}, newline-terminated."""
    return canonical({"bundle": content, "sha256": content_sha256(content)}) + b"\n"


def write_bundle(folder: Path, content: dict) -> tuple[Path, Path, str]:
    """Write NAME.json (canonical) and NAME.yaml (readable copy); refuse to overwrite."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / f"{content['name']}.json"
    yaml_path = folder / f"{content['name']}.yaml"
    if json_path.exists():
        raise BundleError(f"a bundle named {content['name']!r} already exists at {json_path}; frozen names are never reused")
    data = bundle_bytes(content)
    sha = content_sha256(content)
    readable = {"sha256": sha, "note": "readable copy; the .json file is the canonical bundle", **_round(content)}
    text = yaml.safe_dump(readable, sort_keys=False, allow_unicode=True, width=100)  # before writing anything
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_bytes(data)
    tmp.replace(json_path)
    yaml_path.write_text(text, encoding="utf-8")
    return json_path, yaml_path, sha


def read_bundle_file(path: Path) -> tuple[dict, str]:
    """(content, recorded sha256) from a bundle file; errors say what is wrong."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not a readable bundle JSON file ({exc})") from exc
    if not isinstance(data, dict) or "bundle" not in data or "sha256" not in data:
        raise BundleError(f"{path}: not a workbench bundle (expected keys 'bundle' and 'sha256')")
    return data["bundle"], data["sha256"]


def verify_bundle(path: Path) -> tuple[bool, str, str]:
    """(ok, recorded sha256, recomputed sha256)."""
    content, recorded = read_bundle_file(path)
    actual = content_sha256(content)
    return actual == recorded, recorded, actual


def load_bundle(path: Path) -> Bundle:
    """Load and verify a bundle; a hash mismatch is an error (the file was changed)."""
    content, recorded = read_bundle_file(path)
    actual = content_sha256(content)
    if actual != recorded:
        raise BundleError(f"{path}: content hash {actual[:12]} does not match the recorded {recorded[:12]}; the bundle was modified")
    if content.get("format") != FORMAT:
        raise BundleError(f"{path}: unsupported bundle format {content.get('format')!r}")
    vocab = parse_vocabulary(content["vocabulary"], f"{path}: vocabulary")
    task = parse_task(content["prompts"]["task"], f"{path}: task")
    labels = {k: parse_label_prompt(v, f"{path}: prompts.{k}") for k, v in content["prompts"]["labels"].items()}
    return Bundle(sha256=actual, content=content, vocab=vocab, prompts=PromptSet(task=task, labels=labels))
