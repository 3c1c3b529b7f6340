"""Reading per-client budgets and groups files, and the digest a plan records of the budgets it was made from.

A budgets file is CSV (``client_id,epsilon`` and an optional ``delta`` column) or JSON (a list of
``{client_id, epsilon}`` objects or an ``{id: epsilon}`` mapping); a groups file is ``hdp-plan assign
--output``'s CSV. Every reader checks ids (present, unique) and budgets (ε positive and finite, δ in (0, 1)) and
raises :class:`BudgetError`: one line naming the file and, where they apply, the line and the client.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hdp_planner.planning.budget_columns import BudgetColumns, read_plain_csv


class BudgetError(ValueError):
    """A budgets file or grouping request that cannot be used (one-line message)."""


def _check_eps(values: np.ndarray, where: str, ids: Sequence[str]) -> None:
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BudgetError(
            f"{where}: client {ids[i]!r} has budget ε = {float(values[i])!r}; every ε must be positive and finite"
        )


def _first_duplicate(items: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _check_ids(ids: Sequence[str], where: str) -> None:
    duplicate = _first_duplicate(ids)
    if duplicate is not None:
        raise BudgetError(f"{where}: duplicate client_id {duplicate!r}")


def _parse_eps(text: object, where: str, cid: str) -> float:
    if isinstance(text, bool) or text is None:
        raise BudgetError(f"{where}: client {cid!r} has budget {text!r}, not a number")
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BudgetError(f"{where}: client {cid!r} has budget {text!r}, not a number") from None


def _parse_delta(text: object, where: str, cid: str) -> float:
    value = float("nan") if isinstance(text, bool) or text in (None, "") else text
    try:
        delta = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        delta = float("nan")
    if not 0 < delta < 1:
        raise BudgetError(f"{where}: client {cid!r} has delta {text!r}; every delta must lie in (0, 1)")
    return delta


def _read_csv(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    with path.open(newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's UTF-8 BOM is not part of the header
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise BudgetError(f"{path}: empty file; expected a header client_id,epsilon and one row per client")
        names = [h.strip().lower() for h in header]
        missing = [c for c in ("client_id", "epsilon") if c not in names]
        if missing:
            raise BudgetError(f"{path}: missing column {missing[0]!r} (header has: {', '.join(header)})")
        ci, ei = names.index("client_id"), names.index("epsilon")
        di = names.index("delta") if "delta" in names else None
        ids: list[str] = []
        eps: list[float] = []
        deltas: list[float] = []
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) <= max(ci, ei):
                raise BudgetError(f"{path}, line {line}: expected {len(names)} columns, got {len(row)}")
            cid = row[ci].strip()
            if not cid:
                raise BudgetError(f"{path}, line {line}: empty client_id")
            ids.append(cid)
            eps.append(_parse_eps(row[ei].strip(), f"{path}, line {line}", cid))
            if di is not None:
                deltas.append(_parse_delta(row[di].strip() if di < len(row) else None, f"{path}, line {line}", cid))
    return ids, np.asarray(eps, dtype=float), deltas if di is not None else None


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    duplicate = _first_duplicate([k for k, _ in pairs])
    if duplicate is not None:
        raise BudgetError(f"duplicate client_id {duplicate!r}")
    return dict(pairs)


def _read_json(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    text = path.read_text(encoding="utf-8-sig")
    if not text.strip():
        raise BudgetError(f"{path}: empty file")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=lambda c: float("nan"))
    except BudgetError as exc:
        raise BudgetError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BudgetError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    ids: list[str] = []
    eps: list[float] = []
    deltas: list[float] = []
    if isinstance(doc, dict):
        for cid, value in doc.items():
            ids.append(str(cid))
            eps.append(_parse_eps(value, str(path), str(cid)))
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            if not isinstance(item, dict):
                raise BudgetError(f"{path}: entry {i + 1} is not an object with client_id and epsilon")
            for key in ("client_id", "epsilon"):
                if key not in item:
                    raise BudgetError(f"{path}: entry {i + 1} is missing {key!r}")
            cid = item["client_id"]
            if isinstance(cid, (dict, list, bool)) or cid is None or str(cid).strip() == "":
                raise BudgetError(f"{path}: entry {i + 1} has an invalid client_id {cid!r}")
            ids.append(str(cid))
            eps.append(_parse_eps(item["epsilon"], str(path), str(cid)))
            if "delta" in item:
                deltas.append(_parse_delta(item["delta"], str(path), str(cid)))
        if deltas and len(deltas) != len(ids):
            raise BudgetError(f"{path}: some entries carry a delta and others do not")
    else:
        raise BudgetError(f"{path}: expected a list of {{client_id, epsilon}} objects or an {{id: epsilon}} mapping")
    return ids, np.asarray(eps, dtype=float), deltas or None


def load_budgets(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray]:
    """Read per-client budgets from CSV (columns ``client_id,epsilon``) or JSON (a list of
    ``{client_id, epsilon}`` or an ``{id: epsilon}`` mapping). Returns (ids, ε array) in file order.

    Raises :class:`BudgetError` for a missing file or column, an empty file, duplicate ids, or an ε that is
    not a positive finite number.
    """
    ids, eps, _ = load_budgets_with_delta(path)
    return ids, eps


def load_budgets_with_delta(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray, float | None]:
    """:func:`load_budgets`, and the smallest δ_i of an optional ``delta`` column (JSON: key) or None: a plan made
    from the file must use δ ≤ every client's δ_i."""
    ids, eps, deltas = _read_checked(_existing(path))
    return ids, eps, None if deltas is None else min(deltas)


def load_budget_columns(path: str | os.PathLike[str]) -> BudgetColumns:
    """:func:`load_budgets_with_delta` as columns, for millions of clients: a plain CSV file is parsed by numpy a
    block at a time (:func:`~hdp_planner.planning.budget_columns.read_plain_csv`); any other file, or one that
    fails a check, is read row by row, with the same checks and messages."""
    path = _existing(path)
    columns = None if path.suffix.lower() == ".json" else read_plain_csv(path)
    if columns is not None and _valid(columns):
        return columns
    return BudgetColumns.from_lists(*_read_checked(path))


def _valid(columns: BudgetColumns) -> bool:
    values, delta = columns.values, columns.delta
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        return False
    return (delta is None or bool(np.all((delta > 0) & (delta < 1)))) and not columns.duplicate()


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BudgetError(f"budgets file {path} not found")
    return path


def _read_checked(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    try:
        ids, eps, deltas = _read_json(path) if path.suffix.lower() == ".json" else _read_csv(path)
    except UnicodeDecodeError:
        raise BudgetError(f"{path} is not a text file") from None
    if not ids:
        raise BudgetError(f"{path}: no clients (the file lists no budgets)")
    _check_ids(ids, str(path))
    _check_eps(eps, str(path), ids)
    return ids, eps, deltas


def budgets_digest(ids: Sequence[str], epsilons: Sequence[float]) -> str:
    """SHA-256 of the budgets as ``client_id,repr(ε)`` lines sorted by id: what a plan records of the budgets it was
    made from, and what every consumer of a budgets or groups file recomputes.

    Args:
        ids: the client ids.
        epsilons: each client's budget ε_i, in the order of ``ids``.

    Returns:
        The hexadecimal digest; it does not depend on the order of the clients.
    """
    lines = sorted(f"{cid},{float(e)!r}" for cid, e in zip(ids, epsilons))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def read_assignment(
    path: str | os.PathLike[str], group_epsilons: Sequence[float], digest: str | None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Read ``hdp-plan assign --output``'s CSV (client_id, epsilon, group 1-based, group_epsilon) against a plan.

    Every client's ε_i must be at least its group's ε (and the row's group_epsilon the plan's), so no client joins a
    group that would spend more than its budget.

    Args:
        path: the groups file.
        group_epsilons: the plan's ε_m, in its group order (increasing).
        digest: the :func:`budgets_digest` the plan recorded of the budgets it was made from (the file's budgets
            must be those), or None when the plan recorded none.

    Returns:
        (ids, 0-based groups, budgets ε_i), in file order.

    Raises:
        BudgetError: an unreadable file, a missing column, a bad value, a client below its group's ε, a duplicate
            id or a digest mismatch (one line).
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise BudgetError(f"cannot read groups file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BudgetError(f"groups file {path} is not a text file") from None
    missing = [c for c in ("client_id", "epsilon", "group") if rows and c not in rows[0]]
    if not rows or missing:
        raise BudgetError(f"groups file {path}: needs columns client_id,epsilon,group (hdp-plan assign --output)")
    ids, eps, groups = [], [], []
    count = len(group_epsilons)
    for line, row in enumerate(rows, start=2):
        try:
            cid, e, g = row["client_id"].strip(), float(row["epsilon"]), int(row["group"])
        except (TypeError, ValueError, AttributeError):
            raise BudgetError(
                f"groups file {path}, line {line}: epsilon must be a number and group an integer"
            ) from None
        if not 1 <= g <= count:
            raise BudgetError(f"groups file {path}, line {line}: group {g} is not one of the plan's 1..{count}")
        if not e >= group_epsilons[g - 1]:
            raise BudgetError(f"groups file {path}, line {line}: client {cid} has budget ε={e:g} below its group "
                              f"{g}'s ε={group_epsilons[g - 1]:g}")  # fmt: skip
        stated = row.get("group_epsilon")
        if stated not in (None, "") and not math.isclose(float(stated), group_epsilons[g - 1], rel_tol=1e-12):
            raise BudgetError(f"groups file {path}, line {line}: group_epsilon {stated} is not group {g}'s "
                              f"ε={group_epsilons[g - 1]:g} in the plan")  # fmt: skip
        ids.append(cid)
        eps.append(e)
        groups.append(g - 1)
    _check_ids(ids, str(path))
    if digest is not None and budgets_digest(ids, eps) != digest:
        raise BudgetError(f"groups file {path}: its budgets are not those the plan was made from (digest mismatch); "
                          "assign the plan's own budgets file")  # fmt: skip
    return ids, np.asarray(groups, dtype=np.int64), np.asarray(eps, dtype=float)
