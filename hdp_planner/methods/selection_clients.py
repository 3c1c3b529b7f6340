"""The selection paper's client table: a CSV of client_id, epsilon and num_samples, read with one-line errors."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path

__all__ = ["CSV_COLUMNS", "read_clients"]

CSV_COLUMNS: tuple[str, ...] = ("client_id", "epsilon", "num_samples")


def _number(text: str, where: str, cid: str, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where}: client {cid!r} has {column} {text!r}, not a number") from None


def read_clients(path: str | os.PathLike[str]) -> tuple[list[str], tuple[float, ...], tuple[int, ...]]:
    """Read a CSV with columns client_id, epsilon, num_samples (any order, extra columns ignored).

    Raises ValueError with a one-line message for a missing file or column, an empty file, a non-numeric
    value, ε ≤ 0 or not finite, num_samples not a whole number ≥ 1, and a duplicate client_id.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    ids: list[str] = []
    eps: list[float] = []
    sizes: list[int] = []
    seen: set[str] = set()
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise ValueError(f"{path}: empty file; expected a header {','.join(CSV_COLUMNS)} and one row per client")
        names = [h.strip().lower() for h in header]
        for col in CSV_COLUMNS:
            if col not in names:
                raise ValueError(f"{path}: missing column {col!r} (header has: {', '.join(header)})")
        ci, ei, si = (names.index(c) for c in CSV_COLUMNS)
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            where = f"{path}, line {line}"
            if len(row) <= max(ci, ei, si):
                raise ValueError(f"{where}: expected {len(names)} columns, got {len(row)}")
            cid = row[ci].strip()
            if not cid:
                raise ValueError(f"{where}: empty client_id")
            if cid in seen:
                raise ValueError(f"{where}: duplicate client_id {cid!r}")
            seen.add(cid)
            e = _number(row[ei].strip(), where, cid, "epsilon")
            if not (math.isfinite(e) and e > 0):
                raise ValueError(
                    f"{where}: client {cid!r} has epsilon {row[ei].strip()}; ε must be positive and finite"
                )
            m = _number(row[si].strip(), where, cid, "num_samples")
            if not (math.isfinite(m) and m.is_integer() and m >= 1):
                raise ValueError(f"{where}: client {cid!r} has num_samples {row[si].strip()}; need a whole number ≥ 1")
            ids.append(cid)
            eps.append(e)
            sizes.append(int(m))
    if not ids:
        raise ValueError(f"{path}: no clients (only a header)")
    return ids, tuple(eps), tuple(sizes)
