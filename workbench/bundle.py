"""Frozen bundles: a prompt version with its vocabulary, model, parameters and the metrics that
justified freezing it, in one canonical JSON file with a sha256 over its content.

Canonical means: sorted keys, no insignificant whitespace, UTF-8. Floats are rounded to 6 places
once, when the content is built (so the same inputs give byte-identical files on every platform);
the hash is then taken over the exact stored content, so any edit, even in the 7th decimal, shows.

What the sha256 proves: the file is the one whose hash you hold (integrity). It does not prove who
made it: anyone can edit a bundle and write a new hash. An Ed25519 signature with a key the team
holds (`workbench bundle keygen`, `freeze --sign`, `verify --public-key`) proves the bundle came from
the holder of that key; `verify --study` checks it against the study's annotated tag and audit trail.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from workbench.core.prompts import PromptSet, dump_label_prompt, dump_task, parse_label_prompt, parse_task
from workbench.core.vocab import STANDARD_ATTRIBUTES, Vocabulary, parse_vocabulary
from workbench.errors import WorkbenchError

FORMAT = "workbench-bundle/1"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
SIGNATURE_ALGORITHM = "ed25519"


class BundleError(WorkbenchError, ValueError):
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


def _dump(obj) -> bytes:
    """Canonical JSON bytes of plain data exactly as it is (sorted keys, no whitespace, UTF-8)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def check_name(name: str) -> None:
    """A bundle name is also a Git tag and a file name: refuse what either would reject, up front."""
    problem = None
    if not NAME_PATTERN.match(name or ""):
        problem = "must be letters, digits, '.', '_' or '-', start with a letter or digit (max 100)"
    elif ".." in name:
        problem = "must not contain '..' (Git refuses it in tag names)"
    elif name.endswith(".lock"):
        problem = "must not end with '.lock' (Git refuses it in tag names)"
    elif name.endswith("."):
        problem = "must not end with '.' (Git refuses it in tag names)"
    if problem:
        raise BundleError(f"bundle name {name!r} {problem}")


def vocab_to_dict(vocab: Vocabulary) -> dict:
    """A vocabulary as plain data (the file format)."""
    labels = []
    for lab in vocab.labels:
        item = {"id": lab.id, "name": lab.name, "category": lab.category, "definition": lab.definition}
        if lab.derived:
            item["derived"] = lab.derived
        if lab.ignore_for_derived:
            item["ignore_for_derived"] = list(lab.ignore_for_derived)
        if lab.attributes:
            item["attributes"] = list(lab.attributes)
        labels.append(item)
    out = {
        "id": vocab.id,
        "name": vocab.name,
        "description": vocab.description,
        "source": vocab.source,
        "labels": labels,
    }
    own = {name: list(values) for name, values in vocab.attribute_values if STANDARD_ATTRIBUTES.get(name) != values}
    if own:  # a study's own attributes (zone ...); the standard ones are known to every reader of the bundle
        out["attributes"] = own
    return out


def build_content(
    name: str,
    vocab: Vocabulary,
    prompts: PromptSet,
    model: dict,
    parser_version: str,
    prompt_commit: str,
    metrics: dict,
    frozen_by: str,
    frozen_at: str,
    sections: list[str],
    endpoint: dict | None = None,
) -> dict:
    """Everything a bundle holds, as plain data (endpoint: where the labeller's text went)."""
    check_name(name)
    content = {
        "format": FORMAT,
        "name": name,
        "vocabulary": vocab_to_dict(vocab),
        "prompts": {
            "task": dump_task(prompts.task),
            "labels": {k: dump_label_prompt(v) for k, v in prompts.labels.items()},
        },
        "mode": prompts.task.mode,
        "model": model,
        "parser_version": parser_version,
        "prompt_commit": prompt_commit,
        "sections": list(sections),
        "metrics": metrics,
        "frozen_by": frozen_by,
        "frozen_at": frozen_at,
    }
    if endpoint is not None:
        content["endpoint"] = endpoint
    return _round(content)


def content_bytes(content: dict) -> bytes:
    """The exact bytes that are hashed and signed: the canonical content, nothing rounded or dropped."""
    return _dump(_plain(content))


def _plain(content):
    """Content as plain JSON data: loaded content stays exactly as it is; built content is normalised."""
    return content if _is_plain(content) else _round(content)


def _is_plain(obj) -> bool:
    """True when obj is already plain JSON data (as loaded from a file): hashed as it is."""
    if isinstance(obj, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(_is_plain(v) for v in obj)
    if isinstance(obj, float):
        return type(obj) is float and not (math.isnan(obj) or math.isinf(obj))
    return obj is None or type(obj) in (str, int, bool)


def content_sha256(content: dict) -> str:
    """sha256 over the exact canonical content."""
    return hashlib.sha256(content_bytes(content)).hexdigest()


def bundle_bytes(content: dict, signature: dict | None = None) -> bytes:
    """The bundle file: canonical JSON of {content, sha256[, signature]}, newline-terminated."""
    whole = {"bundle": _plain(content), "sha256": content_sha256(content)}
    if signature is not None:
        whole["signature"] = signature
    return _dump(whole) + b"\n"


def write_bundle(folder: Path, content: dict) -> tuple[Path, Path, str]:
    """Write NAME.json (canonical) and NAME.yaml (readable copy); refuse to overwrite."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / f"{content['name']}.json"
    yaml_path = folder / f"{content['name']}.yaml"
    if json_path.exists():
        raise BundleError(
            f"a bundle named {content['name']!r} already exists at {json_path}; frozen names are never reused"
        )
    data = bundle_bytes(content)
    sha = content_sha256(content)
    readable = {"sha256": sha, "note": "readable copy; the .json file is the canonical bundle", **_round(content)}
    text = yaml.safe_dump(readable, sort_keys=False, allow_unicode=True, width=100)  # before writing anything
    tmp = json_path.with_suffix(".json.tmp")
    tmp.write_bytes(data)
    tmp.replace(json_path)
    _write_readable(yaml_path, text)
    return json_path, yaml_path, sha


def _write_readable(path: Path, text: str) -> None:
    """The readable YAML copy, written after the canonical JSON (a step of its own: freeze undoes both)."""
    path.write_text(text, encoding="utf-8")


def read_bundle_whole(path: Path) -> dict:
    """The whole bundle file as data: bundle, sha256 and (when signed) signature."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: not a readable bundle JSON file ({exc})") from exc
    if not isinstance(data, dict) or "bundle" not in data or "sha256" not in data:
        raise BundleError(f"{path}: not a workbench bundle (expected keys 'bundle' and 'sha256')")
    return data


def read_bundle_file(path: Path) -> tuple[dict, str]:
    """(content, recorded sha256) from a bundle file; errors say what is wrong."""
    data = read_bundle_whole(path)
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
        raise BundleError(
            f"{path}: content hash {actual[:12]} does not match the recorded {recorded[:12]}; the bundle was modified"
        )
    if content.get("format") != FORMAT:
        raise BundleError(f"{path}: unsupported bundle format {content.get('format')!r}")
    vocab = parse_vocabulary(content["vocabulary"], f"{path}: vocabulary")
    task = parse_task(content["prompts"]["task"], f"{path}: task")
    labels = {k: parse_label_prompt(v, f"{path}: prompts.{k}") for k, v in content["prompts"]["labels"].items()}
    attributes = {k: v for k, v in vocab.attribute_specs().items() if k in labels}
    return Bundle(
        sha256=actual, content=content, vocab=vocab, prompts=PromptSet(task=task, labels=labels, attributes=attributes)
    )


# ---------------------------------------------------------------- signatures (Ed25519, a team key)


def generate_key(private_path: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 private key (PEM, owner-only) and its public key beside it (.pub)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private_path = Path(private_path)
    public_path = private_path.with_name(private_path.name + ".pub")
    for path in (private_path, public_path):
        if path.exists():
            raise BundleError(f"{path} exists; a key is never overwritten (choose another file)")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    public_path.write_bytes(public)
    return private_path, public_path


def _load_private(path: Path):
    """An Ed25519 private key from a PEM file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise BundleError(f"{path}: not a readable unencrypted PEM private key ({type(exc).__name__})") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path}: not an Ed25519 key (make one with `workbench bundle keygen`)")
    return key


def _load_public(path: Path):
    """An Ed25519 public key from a PEM file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise BundleError(f"{path}: not a readable PEM public key ({type(exc).__name__})") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise BundleError(f"{path}: not an Ed25519 public key")
    return key


def _raw_public(key) -> bytes:
    """The 32 raw bytes of a public key."""
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(raw_public: bytes) -> str:
    """A short fingerprint of a public key (first 16 hex digits of its sha256)."""
    return hashlib.sha256(raw_public).hexdigest()[:16]


def sign_bundle(path: Path, private_key_path: Path) -> str:
    """Sign a bundle's exact content with an Ed25519 key; rewrites the file with the signature; returns the key id.

    The hash must verify first: signing a modified bundle would vouch for the modification.
    """
    data = read_bundle_whole(path)
    content = data["bundle"]
    if content_sha256(content) != data["sha256"]:
        raise BundleError(f"{path}: content does not match its sha256; refusing to sign a modified bundle")
    key = _load_private(private_key_path)
    raw = _raw_public(key.public_key())
    signature = {
        "algorithm": SIGNATURE_ALGORITHM,
        "key_id": key_id(raw),
        "public_key": base64.b64encode(raw).decode("ascii"),
        "value": base64.b64encode(key.sign(content_bytes(content))).decode("ascii"),
    }
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_bytes(bundle_bytes(content, signature))
    tmp.replace(path)
    return signature["key_id"]


def verify_signature(path: Path, public_key_path: Path) -> tuple[bool, str]:
    """(ok, message): does the bundle carry a valid signature by the given public key over its exact content?"""
    from cryptography.exceptions import InvalidSignature

    data = read_bundle_whole(path)
    expected = _load_public(public_key_path)
    kid = key_id(_raw_public(expected))
    sig = data.get("signature")
    if not isinstance(sig, dict) or sig.get("algorithm") != SIGNATURE_ALGORITHM:
        return False, "not signed (no Ed25519 signature in the file)"
    if sig.get("key_id") != kid:
        return False, f"signed by key {sig.get('key_id')}, not by the given key {kid}"
    try:
        expected.verify(base64.b64decode(sig.get("value", ""), validate=True), content_bytes(data["bundle"]))
    except (InvalidSignature, ValueError, TypeError):
        return False, f"the signature by key {kid} does not match the content (the bundle or its signature was changed)"
    return True, f"signed by key {kid}"
