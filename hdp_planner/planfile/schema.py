"""The plan file's format (schema hdp-plan/4): its name, the keys every row and group has, the error a file that
cannot be read raises, and reading its JSON object (:func:`read_document`).

hdp-plan/3 adds the baselines (:mod:`hdp_planner.methods.baselines`) to ``noise``, each with the keys of its own rules:
``clip`` (per-group C_m), ``pooled`` (one noise draw for all groups), ``projection`` (PFA) and ``schedule``
(per-round σ phases, each ``{"rounds", "noise_multiplier"}``). hdp-plan/4 adds HDP-Pooled (``pooled`` and
``clip``), ``config.min_share`` and ``recommendation`` (``{"method", "lambda", "ratio_to_planned"}``, re-derived
from the rows by :func:`~hdp_planner.planfile.document.verify`). Files of older schemas are refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hdp_planner.methods.registry import row_rules

__all__ = ["GROUP_KEYS", "REL_TOL", "SCHEMA", "PlanFileError", "read_document", "row_keys"]

SCHEMA = "hdp-plan/4"
GROUP_KEYS = ("epsilon", "size", "q", "noise_multiplier", "k_ratio", "weight", "epsilon_spent")
REL_TOL = 1e-6


def row_keys(name: str) -> frozenset[str]:
    """The optional keys row ``name``'s noise entry must have, and no other row may (its round rules in the method
    registry: :attr:`~hdp_planner.methods.method.RoundRules.row_keys`)."""
    rules = row_rules(name)
    return frozenset() if rules is None else rules.row_keys


class PlanFileError(ValueError):
    """A plan file that cannot be read, or whose content is impossible or inconsistent."""


def _reject_constant(token: str) -> float:
    raise PlanFileError(f"not valid JSON: {token} is not a number")


def read_document(path: str | Path) -> dict[str, Any]:
    """Load a plan file's JSON object, with errors that say what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise PlanFileError(f"plan file {path} not found")
    return parse_document(path.read_bytes(), path)


def parse_document(raw: bytes, path: str | Path) -> dict[str, Any]:
    """The plan object of a plan file's bytes ``raw`` (read from ``path``, named in the errors)."""
    try:
        doc = json.loads(raw.decode(), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise PlanFileError(f"{path} is not a text file") from exc
    except json.JSONDecodeError as exc:
        raise PlanFileError(f"{path} is not valid JSON (truncated?): {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(doc, dict):
        raise PlanFileError(f"{path} holds JSON but not a plan object")
    if doc.get("schema") != SCHEMA:
        raise PlanFileError(
            f"{path} has schema {doc.get('schema')!r}, expected {SCHEMA!r}: re-create it with hdp-plan solve"
        )
    return doc
