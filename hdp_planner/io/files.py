"""Output files, written atomically: a temporary file beside the target, then a rename (never half-written)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _mode(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would leave: the existing file's, else 0o666 less the umask
    (``mkstemp`` creates 0o600 files, which would keep a plan from the colleagues who verify it)."""
    if path.exists():
        return path.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename; ValueError if its folder is missing."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"cannot write {path}: directory {parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, _mode(path))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write ``document`` as indented JSON (no NaN or infinity) to ``path``, atomically."""
    write_text_atomic(path, json.dumps(document, indent=2, allow_nan=False) + "\n")
