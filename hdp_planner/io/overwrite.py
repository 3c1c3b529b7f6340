"""The rule of every file a command writes: an earlier result that differs from the new one is never replaced
unless asked (``--overwrite``, ``overwrite=True``); the same result written again is no replacement."""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, TypeVar

from hdp_planner.io.files import write_bytes_atomic

P = TypeVar("P", bound="str | os.PathLike[str]")

Replacing = Literal["new", "same", "replaced"]
"""What a write does to its path: creates it, writes what it held, or replaces a different earlier result."""


class EarlierResult(FileExistsError):
    """The path holds a different earlier result and replacing it was not asked for (one line)."""


def replacing(
    path: str | os.PathLike[str],
    new: bytes,
    *,
    overwrite: bool,
    what: str,
    hint: str,
    same: Callable[[bytes, bytes], bool] = operator.eq,
) -> Replacing:
    """What writing ``new`` to ``path`` would do, refused when it would replace a different earlier result.

    Args:
        path: The file to write.
        new: What would be written.
        overwrite: Whether replacing a different earlier result was asked for.
        what: What the file holds, for the message ("plan", "figure", …).
        hint: How to ask for the replacement ("--overwrite replaces it").
        same: Whether the earlier bytes and ``new`` hold the same result (default: equal bytes).

    Returns:
        ``"new"`` (no file there), ``"same"`` (it holds this result) or ``"replaced"`` (a different one, asked for).

    Raises:
        EarlierResult: ``path`` holds a different result and ``overwrite`` is False.
    """
    target = Path(path)
    if not target.is_file():
        return "new"  # nothing there, or not a file: the writer says why it cannot write
    try:
        old = target.read_bytes()
    except OSError:
        old = None  # unreadable: a different result as far as anyone can tell
    if old is not None and same(old, new):
        return "same"
    if not overwrite:
        raise EarlierResult(f"{path} holds a different {what}: {hint}")
    return "replaced"


def written(path: str | os.PathLike[str], what: str, how: Replacing) -> str:
    """The line that says what a write did: ``plan written to plan.json (it replaced a different plan)``."""
    said = {"new": "", "same": f" (the same {what} it held)", "replaced": f" (it replaced a different {what})"}
    return f"{what} written to {path}{said[how]}"


def write_results(files: Mapping[P, bytes], *, overwrite: bool, what: str, hint: str) -> dict[P, Replacing]:
    """Write several files of one result, each checked by :func:`replacing` before any is written (a refusal leaves
    every file as it was); returns what each write did, by path."""
    hows = {path: replacing(path, data, overwrite=overwrite, what=what, hint=hint) for path, data in files.items()}
    for path, data in files.items():
        write_bytes_atomic(path, data)
    return hows
