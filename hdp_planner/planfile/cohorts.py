"""The ``"hidden_participation"`` object of a plan file: each row with public cohorts and private coins
(:mod:`hdp_planner.distributed.cohorts`), the caps it was planned under, and the frontier of cohort size against Λ
of the recommended row; :func:`verify_hidden` re-derives all of it from the file's plan and trust parameters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohorts import CohortRow, cohort_frontier, cohort_row
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import TrustModel
from hdp_planner.planfile.trust import REL_TOL, recorded_matches, trust_from_dict
from hdp_planner.planning.plan import Plan

KEY = "hidden_participation"
GROUP_FIELDS = ("cohort", "coin", "expected_contributors", "memberships", "threshold", "noise_multiplier",
                "epsilon_server", "effective_noise_multiplier")  # fmt: skip
FRONTIER_MULTIPLES = (2.0, 5.0, 10.0, 20.0, 50.0)
"""Cohort caps, in multiples of each group's expected contributors, that the frontier shows (then uncapped)."""


def cohort_rows(
    plan: Plan, trust: TrustModel, *, max_cohort: int | None, max_multiple: float | None
) -> tuple[tuple[str, CohortRow | None], ...]:
    """Every row of ``plan`` with hidden participation under the caps (None: no distributed form, or no cohort
    within the caps)."""
    return tuple(
        (m.name, cohort_row(m, plan, trust, max_cohort=max_cohort, max_multiple=max_multiple)) for m in plan.methods
    )


def recommended_cohort(rows: tuple[tuple[str, CohortRow | None], ...], plan: Plan) -> CohortRow | None:
    """The row with the least Λ among those meeting --min-share."""
    eligible = [r for name, r in rows if r is not None and plan.meets_min_share(plan.method(name))]
    return min(eligible, key=lambda r: r.lambda_cohort) if eligible else None


def row_numbers(r: CohortRow) -> dict[str, Any]:
    """What a plan file records of a row with hidden participation (and ``verify`` recomputes)."""
    out: dict[str, Any] = {key: [getattr(g, key) for g in r.groups] for key in GROUP_FIELDS}
    out.update(weight=list(r.weight), k_ratio=list(r.k_ratio), lambda_cohort=r.lambda_cohort,
               lambda_server=r.lambda_server, price=r.price, vectors_per_round=r.vectors_per_round)  # fmt: skip
    return out


def frontier_numbers(plan: Plan, trust: TrustModel, best: CohortRow | None) -> list[dict[str, Any]]:
    """The recommended row at each cap of :data:`FRONTIER_MULTIPLES` and uncapped."""
    if best is None:
        return []
    return [
        {"multiple": multiple, "vectors_per_round": r.vectors_per_round, "lambda": r.lambda_cohort, "price": r.price}
        for multiple, r in cohort_frontier(plan.method(best.name), plan, trust, multiples=FRONTIER_MULTIPLES)
    ]


def hidden_to_dict(
    plan: Plan,
    trust: TrustModel,
    rows: tuple[tuple[str, CohortRow | None], ...],
    *,
    max_cohort: int | None,
    max_multiple: float | None,
) -> dict[str, Any]:
    best = recommended_cohort(rows, plan)
    return {
        "max_cohort": max_cohort,
        "max_multiple": max_multiple,
        "rows": {name: None if r is None else row_numbers(r) for name, r in rows},
        "recommendation": None if best is None else best.name,
        "frontier": frontier_numbers(plan, trust, best),
    }


def verify_hidden(plan: Plan, doc: Mapping[str, Any]) -> list[str]:
    """Re-derive the file's hidden-participation object; one message per difference or violation. Every recorded
    z must meet its group's budget against the server at the recorded coin and memberships, and every number must
    equal the recomputed one, so an edited cohort, coin, expected contributors, weight, sparsity, cap or share is
    refused."""
    obj = doc.get(KEY)
    if obj is None:
        return []
    if not isinstance(obj, dict):
        return [f"{KEY}: must be an object"]
    trust = trust_from_dict(doc)
    if trust.kind != "secagg":
        return [f"{KEY}: needs a plan that trusts secure aggregation (trust kind secagg)"]
    max_cohort, max_multiple = obj.get("max_cohort"), obj.get("max_multiple")
    if max_cohort is not None and (isinstance(max_cohort, bool) or not isinstance(max_cohort, int) or max_cohort < 2):
        return [f"{KEY}: max_cohort must be an integer ≥ 2 or null"]
    if max_multiple is not None and (not isinstance(max_multiple, (int, float)) or max_multiple < 1):
        return [f"{KEY}: max_multiple must be a number ≥ 1 or null"]
    recorded = obj.get("rows")
    if not isinstance(recorded, dict):
        return [f"{KEY}: 'rows' must be an object"]
    problems = _budgets_met(plan, trust, recorded)
    rows = cohort_rows(plan, trust, max_cohort=max_cohort, max_multiple=max_multiple)
    for name, r in rows:
        entry, where = recorded.get(name, "missing"), f"{KEY}, {name}"
        if r is None:
            if entry is not None:
                problems.append(f"{where}: no cohort under these caps, but the file gives it numbers")
            continue
        for key, want in row_numbers(r).items():
            if not isinstance(entry, dict) or not recorded_matches(entry.get(key), want):
                got = entry.get(key) if isinstance(entry, dict) else entry
                problems.append(f"{where}: {key} {got!r} differs from the recomputed {want!r}")
    best = recommended_cohort(rows, plan)
    if obj.get("recommendation") != (None if best is None else best.name):
        problems.append(f"{KEY}: the file recommends {obj.get('recommendation')!r}, its rows give "
                        f"{None if best is None else best.name!r}")  # fmt: skip
    if not recorded_matches(obj.get("frontier"), frontier_numbers(plan, trust, best)):
        problems.append(f"{KEY}: the frontier differs from the recomputed one")
    return problems


def _budgets_met(plan: Plan, trust: TrustModel, recorded: Mapping[str, Any]) -> list[str]:
    """Each recorded group's z spends at most its budget against the server at its recorded coin and memberships
    (checked before anything is recomputed, so the message names the group that would be under-noised)."""
    problems = []
    c = plan.config
    for name, entry in recorded.items():
        if not isinstance(entry, dict) or name not in {m.name for m in plan.methods}:
            continue
        m = plan.method(name)
        try:
            groups = list(zip(entry["noise_multiplier"], entry["coin"], entry["memberships"], entry["cohort"]))
            for i, ((z, coin, k, cohort), eps) in enumerate(zip(groups, m.epsilon)):
                tau_d = group_tau_d(int(cohort), model_dim=int(trust.model_dim or 1))
                spent = epsilon_third_parties(noise_multiplier=float(z), q=float(coin), rounds=int(k), delta=c.delta,
                                              tau_d=tau_d)  # fmt: skip
                if spent > eps * (1 + REL_TOL):
                    problems.append(f"{KEY}, {name}, group {i + 1}: z={z:.6g} spends ε={spent:.6g} against the "
                                    f"server > budget {eps:g}")  # fmt: skip
        except (KeyError, TypeError, ValueError):
            problems.append(f"{KEY}, {name}: noise_multiplier, coin, memberships and cohort must be lists of numbers")
    return problems
