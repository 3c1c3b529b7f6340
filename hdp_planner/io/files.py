"""Output files, written atomically: a temporary file beside the target, then a rename (never half-written)."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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


REASONS = {
    errno.EISDIR: "it is a directory",
    errno.ENOENT: "no such file or directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EEXIST: "it already exists",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.ENAMETOOLONG: "the name is too long",
}
"""What an OSError's number means, in words (others: the system's own message)."""


def os_reason(exc: OSError) -> str:
    """Why an OSError happened, in words, without ``[Errno N]`` or a file name."""
    return REASONS.get(exc.errno or 0) or (exc.strerror or str(exc) or type(exc).__name__).lower()


def os_message(exc: OSError, path: str | os.PathLike[str]) -> str:
    """One line for a failed write of ``path``: what went wrong in words, never a temporary file's name."""
    reason = "no file can be created in its directory" if exc.errno == errno.ENOENT else os_reason(exc)
    return f"cannot write {path}: {reason}"


@contextmanager
def atomic_target(path: str | os.PathLike[str], suffix: str = "", *, private: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path`` with the permissions a plain
    write would leave (``private``: readable and writable by its owner only, 0600), on failure remove it. OS errors
    become a one-line ValueError naming ``path``."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"cannot write {path}: directory {parent} does not exist")
    if path.is_dir():
        raise ValueError(f"cannot write {path}: it is a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=parent)
    except OSError as exc:
        raise ValueError(os_message(exc, path)) from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o600 if private else _mode(path))
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ValueError(os_message(exc, path)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str, *, private: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (``private``: mode 0600); ValueError if it
    cannot be written."""
    with atomic_target(path, private=private) as tmp, open(tmp, "w", newline="") as fh:
        fh.write(text)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename; ValueError if it cannot be written."""
    with atomic_target(path) as tmp:
        tmp.write_bytes(data)


def json_text(document: Mapping[str, Any]) -> str:
    """``document`` as the indented JSON text (no NaN or infinity) that :func:`write_json_atomic` writes."""
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], document: Mapping[str, Any], *, private: bool = False) -> None:
    """Write ``document`` as indented JSON (no NaN or infinity) to ``path``, atomically (``private``: mode 0600)."""
    write_text_atomic(path, json_text(document), private=private)
