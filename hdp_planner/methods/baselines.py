"""The baselines of GDPFed (Section 2, Appendix B.2), planned on the same groups, sampling, clipping and noise.

Each is a :class:`~hdp_planner.planning.plan.MethodNoise` added to a solved plan by :func:`add_baselines`, checked by
the same accountant, written to and verified from the same plan file, and trained by ``hdp-plan train --method``:

- ``pfa``: Projected Federated Averaging (Liu et al., VLDB 2021), adapted to three groups as in B.2;
- ``idp-fedavg-sample`` / ``idp-fedavg-scale``: individualized DP-SGD (Boenisch et al., NeurIPS 2023) at client
  level as in B.2 (following Kiani et al.), with the IDP-SGD authors' rules for q_m and C_m;
- ``time-adaptive``: time-adaptive privacy spending (Kiani et al., ICLR 2025) as a per-round σ schedule;
- ``hdp-pooled``: per-group q_m and C_m with one pooled draw, chosen for the least error
(:mod:`hdp_planner.methods.pooled`).

Every row is calibrated with the plan's accountant (time-adaptive composes RDP curves and stays RDP).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hdp_planner.methods.options import SUBSPACES, BaselineOptions
from hdp_planner.methods.registry import REGISTRY, Method
from hdp_planner.planning.plan import Plan

__all__ = [
    "BASELINES",
    "SUBSPACES",
    "BaselineOptions",
    "add_baselines",
    "baseline_names",
    "needing_model_dim",
    "planned_with_all",
]


def _baselines() -> dict[str, Method]:
    """The registered methods whose row is added to a solved plan (in registry order), by command-line name."""
    return {key: m for key, m in REGISTRY.items() if m.build is not None}


BASELINES: dict[str, str] = {key: m.row for key, m in _baselines().items()}
"""Command-line name → plan name of each baseline (the registry's methods with a row builder)."""


def baseline_names(methods: Sequence[str], model_dim: int | None = None) -> tuple[str, ...]:
    """Plan names of the baselines among command-line method names (the planner's own four are always planned);
    ``all`` names every baseline, PFA only when ``model_dim`` is given."""
    baselines = {key: m.row for key, m in _baselines().items()}
    core = {key for key, m in REGISTRY.items() if m.family == "fedavg" and m.build is None}
    out = []
    for name in methods:
        key = name.strip().lower()
        if key == "all":
            out.extend(m.row for m in _baselines().values() if not m.needs_model_dim or model_dim is not None)
        elif key in baselines:
            out.append(baselines[key])
        elif key not in core:
            choices = ", ".join([*sorted(core), *baselines, "all"])
            raise ValueError(f"unknown method {name.strip()!r}; choose from {choices}")
    return tuple(dict.fromkeys(out))


def needing_model_dim(names: Sequence[str]) -> tuple[str, ...]:
    """The command-line names of the baselines among plan names ``names`` that need the model's d."""
    return tuple(key for key, m in _baselines().items() if m.row in names and m.needs_model_dim)


def planned_with_all(names: Sequence[str], epsilons: Sequence[float]) -> tuple[str, ...]:
    """``names`` (plan names) without the baselines ``--methods all`` skips for groups with budgets ``epsilons``."""
    skipped = {m.row for m in _baselines().values() if m.in_all is not None and not m.in_all(tuple(epsilons))}
    return tuple(name for name in names if name not in skipped)


def add_baselines(plan: Plan, names: Sequence[str], options: BaselineOptions = BaselineOptions()) -> Plan:  # noqa: B008
    """``plan`` with the named baselines added to its methods, each built by its registry entry (``Method.build``).

    Args:
        plan: A solved plan (:func:`~hdp_planner.methods.gdpfed.solve_plan`).
        names: Rows to add (plan names, :data:`BASELINES` values), in order; a row the plan has is kept as is.
        options: The baselines' own parameters.

    Returns:
        The plan with those rows and the notes their entries add.
    """
    builders = {m.row: m for m in _baselines().values()}
    for name in names:  # in order: HDP-Pooled reuses the IDP rows already added
        if name not in {m.name for m in plan.methods}:
            plan = dataclasses.replace(plan, methods=(*plan.methods, builders[name].build(plan, options)))
    notes = tuple(note for m in builders.values() if m.row in names and m.note and (note := m.note(plan, options)))
    return dataclasses.replace(plan, notes=plan.notes + notes)
