"""The ``"trust"`` object of a plan file: the trust model's parameters and, under ``secagg``, each row recalibrated
for distributed noise; :func:`verify_trust` re-derives all of it from the file's plan and parameters."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.distributed.trust import SecaggRow, TrustModel, secagg_row
from hdp_planner.planfile.document import PlanFileError
from hdp_planner.planning.plan import Plan

REL_TOL = 1e-9
PARAMETERS = ("kind", "bits", "survivors", "colluders", "participations", "model_dim", "wrap")


def secagg_rows(plan: Plan, trust: TrustModel) -> tuple[SecaggRow, ...]:
    """Every row of ``plan`` under ``trust`` (none under ``server``: the plan is as solved)."""
    return tuple(secagg_row(m, plan, trust) for m in plan.methods) if trust.kind == "secagg" else ()


def recommended(rows: tuple[SecaggRow, ...], plan: Plan) -> SecaggRow | None:
    """The secagg row with the least Λ among those meeting --min-share (the recommendation under ``secagg``)."""
    eligible = [r for r in rows if r.lambda_secagg is not None and plan.meets_min_share(plan.method(r.name))]
    return min(eligible, key=lambda r: r.lambda_secagg) if eligible else None


def row_numbers(r: SecaggRow) -> dict[str, Any]:
    """What a plan file records of a row under ``secagg`` (and ``verify`` recomputes)."""
    groups = r.groups or ()
    return {
        "gamma": [g.law.encoding.gamma for g in groups],
        "share_sigma2": [g.law.share_sigma2 for g in groups],
        "threshold": [g.law.threshold for g in groups],
        "shares": [g.law.shares for g in groups],
        "release_probability": [g.law.release for g in groups],
        "noise_multiplier": [g.noise_multiplier for g in groups],
        "epsilon_third_parties": [g.epsilon_third_parties for g in groups],
        "server_noise_multiplier": [g.server_noise_multiplier for g in groups],
        "epsilon_server": [g.epsilon_server for g in groups],
        "effective_noise_multiplier": [g.effective_noise_multiplier for g in groups],
        "lambda_secagg": r.lambda_secagg,
        "lambda_server": r.lambda_server,
        "price_of_distrust": r.price,
    }


def trust_to_dict(plan: Plan, trust: TrustModel, rows: tuple[SecaggRow, ...]) -> dict[str, Any]:
    doc: dict[str, Any] = {key: getattr(trust, key) for key in PARAMETERS}
    doc["participations"] = trust.participations or plan.config.rounds
    if trust.kind == "secagg":
        best = recommended(rows, plan)
        doc["rows"] = {r.name: None if r.groups is None else row_numbers(r) for r in rows}
        doc["recommendation"] = None if best is None else best.name
    return doc


def trust_from_dict(doc: Mapping[str, Any]) -> TrustModel:
    """The trust model of a plan document (``server`` when the file has none), validated."""
    obj = doc.get("trust")
    if obj is None:
        return TrustModel()
    if not isinstance(obj, dict):
        raise PlanFileError("plan: 'trust' must be an object")
    missing = [k for k in PARAMETERS if k not in obj]
    if missing:
        raise PlanFileError(f"trust: missing {', '.join(repr(k) for k in missing)}")
    try:
        return TrustModel(**{k: obj[k] for k in PARAMETERS})
    except (TypeError, ValueError) as exc:
        raise PlanFileError(f"trust: {exc}") from exc


def recorded_row(doc: Mapping[str, Any], row: str) -> dict[str, Any] | None:
    """What the plan document's trust object records for ``row`` (its z_m and the numbers beside them), or None where
    it records nothing: a trusted-server plan, or a row with no distributed form."""
    obj = doc.get("trust")
    rows = obj.get("rows") if isinstance(obj, dict) else None
    return rows.get(row) if isinstance(rows, dict) else None


def verify_trust(plan: Plan, doc: Mapping[str, Any]) -> list[str]:
    """Re-derive the file's trust object from its plan and parameters; one message per difference or violation.

    Under ``secagg``: every recorded z_m must meet its group's budget against third parties (at the δ its law leaves
    to the accountant), and every recorded number (the law's γ, share σ², threshold t and shares N, z_m, ε against
    the server, effective σ, Λ, price, recommendation) must equal the recomputed one, so a file whose bits,
    survivors, colluders, participations, shares or thresholds were edited is refused."""
    try:
        trust = trust_from_dict(doc)
    except PlanFileError as exc:
        return [str(exc)]
    obj = doc.get("trust")
    if obj is None or trust.kind == "server":
        return []
    problems = []
    if obj.get("participations") != (trust.participations or plan.config.rounds):
        problems.append("trust: participations differ from the plan's")
    recorded = obj.get("rows")
    if not isinstance(recorded, dict):
        return [*problems, "trust: 'rows' must be an object under secagg"]
    try:
        rows = secagg_rows(plan, trust)
    except ValueError as exc:
        return [*problems, f"trust: {exc}"]
    c = plan.config
    for r in rows:
        entry = recorded.get(r.name, "missing")
        where = f"trust, {r.name}"
        if r.groups is None:
            if entry is not None:
                problems.append(f"{where}: not plannable under secagg, but the file gives it numbers")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{where}: missing")
            continue
        m = plan.method(r.name)
        z_file = entry.get("noise_multiplier")
        if isinstance(z_file, list) and len(z_file) == len(m.size) and all(isinstance(z, (int, float)) for z in z_file):
            tau_d = [group_tau_d(s, model_dim=int(trust.model_dim or 1)) for s in m.size]
            for i, (z, eps, q, g) in enumerate(zip(z_file, m.epsilon, m.q, r.groups)):
                left = g.law.delta_accounted(c.delta, rounds=c.rounds)
                spent = epsilon_third_parties(noise_multiplier=float(z), q=q, rounds=c.rounds, delta=left,
                                              tau_d=tau_d[i])  # fmt: skip
                if spent > eps * (1 + 1e-9):
                    problems.append(f"{where}, group {i + 1}: z={z:.6g} spends ε={spent:.6g} > budget {eps:g}")
        for key, want in row_numbers(r).items():
            if not recorded_matches(entry.get(key), want):
                problems.append(f"{where}: {key} {entry.get(key)!r} differs from the recomputed {want!r}")
    best = recommended(rows, plan)
    if obj.get("recommendation") != (None if best is None else best.name):
        problems.append(f"trust: the file recommends {obj.get('recommendation')!r}, its rows give "
                        f"{None if best is None else best.name!r}")  # fmt: skip
    return problems


def recorded_matches(got: Any, want: Any) -> bool:
    """Whether a number, list, object or null read from a plan file equals the recomputed one (numbers to a relative
    :data:`REL_TOL`; a boolean is never a number)."""
    if isinstance(want, dict):
        return (
            isinstance(got, dict) and got.keys() == want.keys() and all(recorded_matches(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list) and len(got) == len(want) and all(recorded_matches(g, w) for g, w in zip(got, want))
        )
    if want is None:
        return got is None
    return isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=REL_TOL)
