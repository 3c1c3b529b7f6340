"""plan.json: the versioned file a plan is written to, read back from, and verified from (schema
:data:`~hdp_planner.planfile.schema.SCHEMA`, its format in :mod:`.schema`).

Reading validates every field (:mod:`.reading`) and raises :class:`PlanFileError` (a ValueError) naming what is wrong;
:func:`verify` re-derives every group's ε with the accountant from the file alone and raises
:class:`PlanVerificationError` (a PlanFileError) carrying every problem; :func:`plan_problems` lists them instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import platform
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from hdp_planner.io.files import json_text, write_text_atomic
from hdp_planner.io.overwrite import Replacing, replacing
from hdp_planner.planfile.grouping import grouping_to_dict
from hdp_planner.planfile.mechanism import row_problems
from hdp_planner.planfile.reading import plan_from_dict
from hdp_planner.planfile.schema import REL_TOL, SCHEMA, PlanFileError, read_document
from hdp_planner.planfile.trust import trust_sections
from hdp_planner.planning.mechanism import executed_mechanism, mechanism_epsilon
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import PLANNED_METHOD, Plan

__all__ = [
    "SCHEMA",
    "PlanFileError",
    "PlanVerificationError",
    "library_versions",
    "load_plan",
    "plan_from_dict",
    "plan_problems",
    "plan_to_dict",
    "read_document",
    "save_plan",
    "verify",
]


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("hdp-planner", "dp-accounting", "numpy", "scipy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "unknown"
    return versions


def _method_dict(m: MethodNoise) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "epsilon": list(m.epsilon),
        "size": list(m.size),
        "q": list(m.q),
        "expected_clients": list(m.expected_clients),
        "noise_multiplier": list(m.noise_multiplier),
        "sigma2": list(m.sigma2),
        "k_ratio": list(m.k_ratio),
        "weight": list(m.weight),
        "epsilon_spent": list(m.epsilon_spent),
        "lambda": m.lam,
        "lambda_exact": m.lambda_exact,
    }
    if m.clip is not None:
        doc["clip"] = list(m.clip)
    if m.pooled:
        doc["pooled"] = True
    if m.projection is not None:
        doc["projection"] = dataclasses.asdict(m.projection)
    if m.schedule is not None:
        doc["schedule"] = [{"rounds": ph.rounds, "noise_multiplier": list(ph.noise_multiplier)} for ph in m.schedule]
    return doc


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The JSON document of a plan (what :func:`save_plan` writes).

    Args:
        plan: The plan, its groups listed by increasing ε (group 1 the strictest).

    Returns:
        The document; its ``groups`` lists the planned (GDPFed+) parameters per group.

    Raises:
        ValueError: The groups are not in increasing ε.
    """
    eps = plan.groups.epsilon
    if any(a > b for a, b in itertools.pairwise(eps)):
        raise ValueError(f"a plan file lists its groups by increasing ε (group 1 the strictest), got ε = {list(eps)}")
    c = plan.config
    g = plan.groups
    groups = [
        {
            "epsilon": g.epsilon[i],
            "size": g.size[i],
            "q": g.q[i],
            "expected_clients": g.expected_clients[i],
            "noise_multiplier": g.noise_multiplier[i],
            "sigma2": g.sigma2[i],
            "k_ratio": g.k_ratio[i],
            "weight": g.weight[i],
            "epsilon_spent": g.epsilon_spent[i],
        }
        for i in range(len(g.size))
    ]
    return {
        "schema": SCHEMA,
        "config": {
            "n": c.n,
            "rounds": c.rounds,
            "q": c.q,
            "delta": c.delta,
            "clip": c.clip,
            "lr": c.lr,
            "local_steps": c.local_steps,
            "accountant": c.accountant,
            "sigma_model": c.sigma_model,
            "lambda_convention": c.lambda_convention,
            "sparsity": None if c.sparsity is None else list(c.sparsity),
            "fixed_q": None if c.fixed_q is None else list(c.fixed_q),
            "min_share": c.min_share,
            **({"allow_large_delta": True} if c.large_delta else {}),
        },
        "groups": groups,
        "noise": {m.name: _method_dict(m) for m in plan.methods},
        "recommendation": _recommendation_dict(plan),
        "objective": plan.objective,
        "uniform_objective": plan.uniform_objective,
        "notes": list(plan.notes),
        "versions": library_versions(),
        **grouping_to_dict(plan),
        **trust_sections(plan),
    }


def _recommendation_dict(plan: Plan) -> dict[str, Any]:
    r = plan.recommendation
    return {"method": r.method, "lambda": r.lam, "ratio_to_planned": r.ratio_to_planned}


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file (types, ranges, consistency); privacy is checked by :func:`verify`.

    Args:
        path: The plan file (JSON, as :func:`save_plan` writes it).

    Returns:
        The plan it holds.

    Raises:
        PlanFileError: The file cannot be read, or a field is missing, out of range or inconsistent.
    """
    return plan_from_dict(read_document(path))


def save_plan(plan: Plan, path: str | Path, *, overwrite: bool = False) -> None:
    """Write a plan file atomically (a reader never sees it half-written); a file that holds a different plan is
    replaced only when asked.

    Args:
        plan: The plan, its groups listed by increasing ε.
        path: Where to write the JSON document (:func:`plan_to_dict`).
        overwrite: Replace a file that holds a different plan (the same plan is written again either way).

    Raises:
        EarlierResult: ``path`` holds a different plan (or another file) and ``overwrite`` is False.
    """
    write_plan_document(path, plan_to_dict(plan), overwrite=overwrite, hint="save_plan(…, overwrite=True) replaces it")


def same_plan(old: bytes, new: bytes) -> bool:
    """Whether two plan files hold the same plan: equal documents but for the library versions that wrote them."""
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return False
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    return {k: v for k, v in a.items() if k != "versions"} == {k: v for k, v in b.items() if k != "versions"}


def write_plan_document(path: str | Path, doc: Mapping[str, Any], *, overwrite: bool, hint: str) -> Replacing:
    """Write a plan document to ``path`` (:func:`save_plan`'s rule: a different plan there is replaced only with
    ``overwrite``; ``hint`` says how to ask); returns what the write did (:func:`~hdp_planner.io.overwrite.replacing`).
    """
    text = json_text(doc)
    how = replacing(path, text.encode(), overwrite=overwrite, what="plan", hint=hint, same=same_plan)
    write_text_atomic(path, text)
    return how


class PlanVerificationError(PlanFileError):
    """A plan that :func:`verify` rejects: its message names every problem, separated by "; ".

    Args:
        problems: What is wrong, one message per violation (at least one).
    """

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems: tuple[str, ...] = tuple(problems)


def verify(plan: Plan) -> None:
    """Re-derive every group's ε from the mechanism the trainer executes; raise if any row breaks its budget.

    The same check as :func:`plan_problems`, with the convention of :func:`load_plan`: a plan that fails raises.

    Args:
        plan: The plan to check, as loaded from its file.

    Raises:
        PlanVerificationError: One or more problems, every one of them in ``problems``.
    """
    problems = plan_problems(plan)
    if problems:
        raise PlanVerificationError(problems)


def plan_problems(plan: Plan) -> list[str]:
    """Re-derive every group's ε from the mechanism the trainer executes; one message per violation.

    Checks every row against its method's definition (:func:`hdp_planner.planfile.mechanism.row_problems`), then
    accounts each group of the executed mechanism (:func:`~hdp_planner.planfile.mechanism.executed_mechanism`:
    Poisson rate q_m, effective σ_m = noise std / C_m, a σ schedule composed with RDP) against the plan's budget for
    that group (DP-FedAvg: the strictest ε), and the recorded ε spent against the recomputed one; last, a file's
    recorded recommendation against the least-noise row its rows give.

    Args:
        plan: The plan to check, as loaded from its file.

    Returns:
        Every problem found, one message each; empty when the plan verifies.
    """
    c = plan.config
    problems = row_problems(plan)
    for m in plan.methods:
        budgets = plan.row_budgets(m)
        mech = executed_mechanism(m, c)
        for i, (eps, q, spent) in enumerate(zip(budgets, mech.q, m.epsilon_spent)):
            actual = mechanism_epsilon(mech, group=i, rounds=c.rounds, delta=c.delta, accountant=c.spending_accountant)
            label = f"{m.name}, group {i + 1} (ε={eps:g})"
            if actual > eps * (1 + 1e-9):
                what = "its σ schedule" if mech.scheduled else f"σ={mech.noise_multiplier[i]:.6g}"
                problems.append(f"{label}: {what} at q={q:.6g} spends ε={actual:.6g} > budget {eps:g}")
            elif not math.isclose(actual, spent, rel_tol=1e-4, abs_tol=1e-9):
                problems.append(f"{label}: file records ε spent {spent:.6g}, the accountant gives {actual:.6g}")
    rec, got = plan.recommendation, plan.recorded
    if got is not None and (
        got.method != rec.method
        or not math.isclose(got.lam, rec.lam, rel_tol=REL_TOL)
        or not math.isclose(got.ratio_to_planned, rec.ratio_to_planned, rel_tol=REL_TOL)
    ):
        problems.append(
            f"recommendation: the file recommends {got.method} (Λ = {got.lam:.6g}), its rows give {rec.method} "
            f"(Λ = {rec.lam:.6g}, {rec.ratio_to_planned:.4g}x less than {PLANNED_METHOD})"
        )
    return problems + plan.trust.problems(plan)
