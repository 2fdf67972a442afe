"""The files the package ships: label vocabularies, starter prompt sets and the demo study's data.

They live inside the package so that a wheel (`pipx install`, `uv tool install`) carries them; every
reader finds them through `shipped_dir` (importlib.resources), never through a path into a checkout.
The checkout's top-level vocab/, prompts/ and annotations/ are symlinks to these folders.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from workbench.errors import WorkbenchError

FOLDERS = ("vocab", "prompts", "annotations")


def shipped_dir(name: str) -> Path:
    """The shipped folder `name` (vocab, prompts or annotations) as a path on disk."""
    if name not in FOLDERS:
        raise ValueError(f"no shipped folder {name!r}: one of {FOLDERS}")
    folder = files(__name__) / name
    if not isinstance(folder, Path) or not folder.is_dir():  # a zipped install: the studies copy these with shutil
        raise WorkbenchError(f"the workbench's shipped {name}/ folder is not on disk ({folder}): install it unzipped")
    return folder
