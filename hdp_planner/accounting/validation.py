"""Validation of the accountants' numerical arguments, written once: every public function of
:mod:`hdp_planner.accounting` checks its inputs here and works with the normalised values returned.

A number is any real (Python or numpy) that is not a bool; a count of rounds is an integer (``50`` or
``np.int64(50)``, never ``50.0``); a sampling ratio up to :data:`Q_ROUNDING` above 1 is float rounding of 1.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence

import numpy as np

Q_ROUNDING = 1e-12
"""A sampling ratio up to this far above 1 is float rounding of 1 (e.g. Σ r_m / n = 1.0000000000000004): read as 1."""


def _real(name: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a number, got {x!r}")
    return float(x)


def check_positive(name: str, x: object) -> float:
    """A positive finite number."""
    value = _real(name, x)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    return value


def check_epsilon(epsilon: object) -> float:
    return check_positive("epsilon", epsilon)


def check_noise_multiplier(noise_multiplier: object) -> float:
    return check_positive("noise_multiplier", noise_multiplier)


def check_delta(delta: object) -> float:
    """δ ∈ (0, 1]; δ = 1 (one client: 1/n^1.1 = 1) is vacuous, met by any σ."""
    value = _real("delta", delta)
    if not 0 < value <= 1:
        raise ValueError(f"delta must lie in (0, 1], got {delta!r}")
    return value


def check_ratio(q: object, *, name: str = "q", allow_zero: bool = False) -> float:
    """A sampling ratio in (0, 1] (or [0, 1]), float rounding of 1 read as 1."""
    value = _real(name, q)
    if not ((value >= 0 if allow_zero else value > 0) and value <= 1 + Q_ROUNDING):
        raise ValueError(f"{name} must lie in {'[0' if allow_zero else '(0'}, 1], got {q!r}")
    return min(value, 1.0)


def check_rounds(rounds: object) -> int:
    """A positive integer count of rounds (Python or numpy integer)."""
    if isinstance(rounds, bool):
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    try:
        value = operator.index(rounds)
    except TypeError:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}") from None
    if value < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    return value


def check_groups(epsilons: Sequence[float], q: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Budgets ε_m and sampling ratios q_m of as many groups, checked and normalised."""
    eps = np.array([check_epsilon(e) for e in epsilons], dtype=np.float64)
    qs = np.array([check_ratio(x) for x in q], dtype=np.float64)
    if eps.shape != qs.shape:
        raise ValueError(f"{eps.size} epsilons for {qs.size} sampling ratios")
    return eps, qs
