"""The method registry: every ``--method`` key, from the modules that declare them, in command-line order.

A new method is one module declaring ``METHODS`` (a tuple of :class:`~hdp_planner.methods.method.Method`) and its
name in :data:`MODULES`. The planner (:mod:`.baselines`), ``verify`` (:mod:`hdp_planner.planfile`), the trainer,
``compare``, the audit and Flower read this registry.
"""

from __future__ import annotations

from hdp_planner.methods import fedsam, gdpfed, idp_fedavg, pfa, pooled, selection, time_adaptive
from hdp_planner.methods.method import Family, Method, RoundRules
from hdp_planner.rules.noise import PaperWeights

MODULES = (gdpfed, pfa, idp_fedavg, time_adaptive, pooled, fedsam, selection)
"""The method modules, in the order their keys are listed."""


def collect(modules=MODULES) -> dict[str, Method]:
    """Every module's methods by key; refuses a key declared twice, or a row planned by none or by two methods."""
    found: dict[str, Method] = {}
    for module in modules:
        for m in module.METHODS:
            if m.key in found:
                raise ValueError(f"method {m.key!r} is declared twice")
            found[m.key] = m
    planners: dict[str, list[str]] = {}
    for m in found.values():
        planners.setdefault(m.row, [])
        if m.rules is not None:
            planners[m.row].append(m.key)
    for row, keys in planners.items():
        if len(keys) != 1:
            raise ValueError(f"row {row!r} must have its round rules declared by one method, has {keys or 'none'}")
    return found


REGISTRY: dict[str, Method] = collect()
"""``--method`` key → its :class:`Method` (tests may register a method here)."""


def keys(family: Family) -> tuple[str, ...]:
    """The keys of one trainer family, in registry order."""
    return tuple(key for key, m in REGISTRY.items() if m.family == family)


def _planning_method(row: str) -> Method | None:
    """The method that plans row ``row`` (declares its round rules), or None for an unknown row."""
    return next((m for m in REGISTRY.values() if m.row == row and m.rules is not None), None)


def row_rules(row: str) -> RoundRules | None:
    """The round rules of plan row ``row`` (declared by the method that plans it), or None for an unknown row."""
    m = _planning_method(row)
    return None if m is None else m.rules


def row_paper_weights(row: str) -> PaperWeights | None:
    """Row ``row``'s weights in GDPFed Table 5's Λ (declared by the method that plans it), or None."""
    m = _planning_method(row)
    return None if m is None else m.paper_weights


def planner(row: str) -> str:
    """The key of the method that plans row ``row`` (declares its round rules); KeyError for an unknown row."""
    m = _planning_method(row)
    if m is None:
        raise KeyError(row)
    return m.key


def rows() -> tuple[str, ...]:
    """Every plan row a registered method plans, in registry order."""
    return tuple(m.row for m in REGISTRY.values() if m.rules is not None)


__all__ = [
    "MODULES",
    "REGISTRY",
    "Family",
    "Method",
    "RoundRules",
    "collect",
    "keys",
    "planner",
    "row_paper_weights",
    "row_rules",
    "rows",
]
