"""Sweeps: re-solve a plan while one parameter varies (GDPFed Figure 2: optimal q_m against ε_1).

>>> from hdp_planner.report.sweep import sweep_plan, parse_range
>>> result = sweep_plan(groups, config, vary="1", values=parse_range("0.2:3:15"))  # doctest: +SKIP

The varied parameter is a group's ε (``vary`` = its 1-based index, as a string or int) or one of
``rounds``, ``q``, ``clip``. Every other field of the plan is held fixed.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hdp_planner.io.inputs import parse_floats
from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import METHODS, Plan

CONFIG_PARAMETERS: tuple[str, ...] = ("rounds", "q", "clip")
MAX_POINTS = 1000


@dataclass(frozen=True, kw_only=True)
class Varied:
    """What a sweep varies: a group's ε (``group`` 0-based) or a config field (``name``)."""

    name: str
    group: int | None = None

    @property
    def label(self) -> str:
        """Axis label with units (matplotlib mathtext)."""
        if self.group is not None:
            g = self.group + 1
            return rf"$\varepsilon_{{{g}}}$, privacy budget of group {g}"
        return {
            "rounds": "training rounds $T$",
            "q": "global participation ratio $q$",
            "clip": r"clipping threshold $C$ ($\ell_2$ norm)",
        }[self.name]

    @property
    def text(self) -> str:
        """The same label for a terminal."""
        if self.group is not None:
            return f"ε_{self.group + 1}, privacy budget of group {self.group + 1}"
        return {"rounds": "training rounds T", "q": "global participation ratio q", "clip": "clipping threshold C"}[
            self.name
        ]

    @property
    def column(self) -> str:
        return self.name


def parse_vary(vary: str | int, groups: Groups) -> Varied:
    """``--vary``: a 1-based group index (its ε varies) or rounds | q | clip.

    Args:
        vary: the option's text or a group number.
        groups: the plan's groups (for the range of group numbers).

    Returns:
        What varies.

    Raises:
        ValueError: neither a parameter name nor a group number of ``groups`` (one line).
    """
    text = str(vary).strip().lower()
    if text in CONFIG_PARAMETERS:
        return Varied(name=text)
    try:
        index = int(text)
    except ValueError:
        raise ValueError(
            f"--vary must be a group number 1..{groups.count} or one of {', '.join(CONFIG_PARAMETERS)}, got {vary!r}"
        ) from None
    if not 1 <= index <= groups.count:
        raise ValueError(f"--vary {index}: there are {groups.count} groups (1..{groups.count})")
    return Varied(name=f"eps_{index}", group=index - 1)


def parse_values(text: str) -> tuple[float, ...]:
    """``--values v1,v2,...``: finite numbers."""
    return _check_count(parse_floats(text, "--values") or (), "--values")


def parse_range(text: str) -> tuple[float, ...]:
    """``--range a:b:steps``: ``steps`` evenly spaced values from a to b inclusive."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--range must be a:b:steps, got {text!r}")
    try:
        a, b = float(parts[0]), float(parts[1])
        steps = int(parts[2])
    except ValueError:
        raise ValueError(
            f"--range must be a:b:steps with numbers a, b and a whole number of steps, got {text!r}"
        ) from None
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"--range: bounds must be finite, got {text!r}")
    if steps < 2:
        raise ValueError(f"--range: steps must be at least 2, got {steps}")
    return _check_count(tuple(float(x) for x in np.linspace(a, b, steps)), "--range")


def _check_count(values: tuple[float, ...], name: str) -> tuple[float, ...]:
    if not values:
        raise ValueError(f"{name}: no values")
    if len(values) > MAX_POINTS:
        raise ValueError(f"{name}: {len(values)} values; at most {MAX_POINTS}")
    return values


def vary_plan(groups: Groups, config: PlanConfig, varied: Varied, value: float) -> tuple[Groups, PlanConfig]:
    """The (groups, config) of one sweep point.

    Args:
        groups: the plan's groups.
        config: the plan's settings.
        varied: what varies.
        value: its value at this point.

    Returns:
        (groups, config) with ``value`` in place.

    Raises:
        ValueError: an invalid value for the varied parameter.
    """
    if varied.group is not None:
        eps = list(groups.epsilons)
        eps[varied.group] = float(value)
        return Groups(epsilons=tuple(eps), sizes=groups.sizes), config
    if varied.name == "rounds":
        if not float(value).is_integer():
            raise ValueError(f"rounds must be whole numbers, got {value:g}")
        return groups, dataclasses.replace(config, rounds=int(value))
    return groups, dataclasses.replace(config, **{varied.name: float(value)})


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """One plan per value of the varied parameter: per-group q_m and σ_m² (GDPFed+), Λ per method."""

    varied: Varied
    values: tuple[float, ...]
    epsilons: tuple[tuple[float, ...], ...]
    sizes: tuple[int, ...]
    q: tuple[tuple[float, ...], ...]
    sigma2: tuple[tuple[float, ...], ...]
    lam: tuple[tuple[float, ...], ...]
    """Λ per value, in :data:`~hdp_planner.planning.plan.METHODS` order."""
    objective: tuple[float, ...]
    base: PlanConfig

    @property
    def count(self) -> int:
        return len(self.sizes)

    def q_of(self, group: int) -> np.ndarray:
        """q_m (0-based ``group``) at every value."""
        return np.array([row[group] for row in self.q])

    def lam_of(self, method: str) -> np.ndarray:
        i = METHODS.index(method)
        return np.array([row[i] for row in self.lam])

    @property
    def columns(self) -> tuple[str, ...]:
        m = range(1, self.count + 1)
        return (
            self.varied.column,
            *(f"q_{i}" for i in m),
            *(f"sigma2_{i}" for i in m),
            *(f"lambda_{name}" for name in METHODS),
        )

    def rows(self) -> list[tuple[float, ...]]:
        return [(v, *q, *s, *lam) for v, q, s, lam in zip(self.values, self.q, self.sigma2, self.lam)]

    def to_csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self.columns)
        for row in self.rows():
            writer.writerow([repr(float(x)) for x in row])
        return buf.getvalue()


def sweep_plan(
    groups: Groups,
    config: PlanConfig,
    vary: str | int | Varied,
    values: Sequence[float],
    progress: Callable[[int], None] | None = None,
) -> SweepResult:
    """Solve the plan (:func:`~hdp_planner.methods.gdpfed.solve_plan`) at every value of the varied parameter.

    All values are validated before the first plan is solved.

    Args:
        groups: the plan's groups.
        config: the plan's settings.
        vary: what varies (as ``--vary`` or :class:`Varied`).
        values: its values.
        progress: called with i after the i-th plan (1-based), or None.

    Returns:
        Every point's ε_m, q_m, σ_m², each method's Λ and Problem 1's objective.

    Raises:
        ValueError: a bad ``vary``, no values, too many, or an invalid one.
    """
    varied = vary if isinstance(vary, Varied) else parse_vary(vary, groups)
    values = _check_count(tuple(float(v) for v in values), "values")
    points = [vary_plan(groups, config, varied, v) for v in values]  # validate everything before solving
    plans: list[Plan] = []
    for i, (g, c) in enumerate(points, start=1):
        plans.append(solve_plan(g, c))
        if progress:
            progress(i)
    return SweepResult(
        varied=varied,
        values=values,
        epsilons=tuple(g.epsilons for g, _ in points),
        sizes=groups.sizes,
        q=tuple(p.groups.q for p in plans),
        sigma2=tuple(p.groups.sigma2 for p in plans),
        lam=tuple(tuple(p.method(name).lam for name in METHODS) for p in plans),
        objective=tuple(p.objective for p in plans),
        base=config,
    )
