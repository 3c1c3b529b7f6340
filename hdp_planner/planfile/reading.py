"""Reading a plan file's document back into a :class:`~hdp_planner.planning.plan.Plan`: every field's type, range
and consistency checked, and :class:`~hdp_planner.planfile.schema.PlanFileError` naming the first that is wrong (a
hand-edited row or group included)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hdp_planner.methods.options import SUBSPACES
from hdp_planner.methods.registry import row_paper_weights, rows
from hdp_planner.planfile.grouping import grouping_from_dict
from hdp_planner.planfile.mechanism import pooled_problem, row_problems
from hdp_planner.planfile.schema import GROUP_KEYS, REL_TOL, PlanFileError, row_keys
from hdp_planner.planfile.trust import trust_from_dict
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise, Phase, Projection
from hdp_planner.planning.plan import METHODS, PLANNED_METHOD, Plan, Recommendation
from hdp_planner.rules.noise import aggregation_weights, lambda_exact, lambda_for, pooled_weights

__all__ = ["plan_from_dict"]


def _field(obj: Mapping[str, Any], key: str, where: str, kind: Callable[[Any], bool], what: str) -> Any:
    if key not in obj:
        raise PlanFileError(f"{where}: missing {key!r}")
    value = obj[key]
    if not kind(value):
        raise PlanFileError(f"{where}: {key!r} must be {what}, got {value!r}")
    return value


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_list_of(kind: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and len(v) > 0 and all(kind(x) for x in v)


def _optional_numbers(v: Any) -> bool:
    return v is None or _is_list_of(_is_number)(v)


def plan_from_dict(doc: Mapping[str, Any]) -> Plan:
    """Rebuild a :class:`Plan` from its JSON document, validating types, ranges and internal consistency: its rows,
    then its grouping (:mod:`.grouping`) and its trust model's sections (:mod:`.trust`)."""
    cfg = _field(doc, "config", "plan", lambda v: isinstance(v, dict), "an object")
    try:
        config = PlanConfig(
            n=_field(cfg, "n", "config", _is_int, "an integer"),
            rounds=_field(cfg, "rounds", "config", _is_int, "an integer"),
            q=_field(cfg, "q", "config", _is_number, "a number"),
            delta=_field(cfg, "delta", "config", _is_number, "a number"),
            clip=_field(cfg, "clip", "config", _is_number, "a number"),
            lr=_field(cfg, "lr", "config", _is_number, "a number"),
            local_steps=_field(cfg, "local_steps", "config", _is_int, "an integer"),
            accountant=_field(cfg, "accountant", "config", lambda v: isinstance(v, str), "a string"),
            sigma_model=_field(cfg, "sigma_model", "config", lambda v: isinstance(v, str), "a string"),
            lambda_convention=_field(cfg, "lambda_convention", "config", lambda v: isinstance(v, str), "a string"),
            sparsity=_tuple_or_none(_field(cfg, "sparsity", "config", _optional_numbers, "null or a list of numbers")),
            fixed_q=_tuple_or_none(_field(cfg, "fixed_q", "config", _optional_numbers, "null or a list of numbers")),
            min_share=_field(cfg, "min_share", "config", _is_number, "a number"),
            large_delta=cfg.get("allow_large_delta", False) is True,
        )
    except PlanFileError:
        raise
    except ValueError as exc:
        raise PlanFileError(f"config: {exc}") from exc
    noise = _field(doc, "noise", "plan", lambda v: isinstance(v, dict), "an object")
    unknown = sorted(set(noise) - set(rows()))
    if unknown:
        raise PlanFileError(f"noise: unknown method {unknown[0]!r}")
    methods = []
    for name in (*METHODS, *(b for b in rows() if b in noise and b not in METHODS)):
        entry = _field(noise, name, "noise", lambda v: isinstance(v, dict), "an object")
        methods.append(_method_from_dict(name, entry, config))
    edited = _edited_row(methods[1:])
    if edited:
        raise PlanFileError(edited)
    groups = _field(doc, "groups", "plan", _is_list_of(lambda v: isinstance(v, dict)), "a non-empty list")
    planned = methods[METHODS.index(PLANNED_METHOD)]
    if len(groups) != len(planned.size):
        raise PlanFileError(f"groups lists {len(groups)} groups but noise.{PLANNED_METHOD} has {len(planned.size)}")
    for i, row in enumerate(groups):
        for key in GROUP_KEYS:
            value = _field(row, key, f"group {i + 1}", _is_number, "a number")
            solved = getattr(planned, key)[i]
            if not math.isclose(value, solved, rel_tol=REL_TOL):
                raise PlanFileError(f"groups[{i}].{key} was edited ({value:.6g}; the plan was solved for {solved:.6g} "
                                    f"in noise.{PLANNED_METHOD}): re-run hdp-plan solve")  # fmt: skip
    eps = planned.epsilon
    if any(a > b for a, b in itertools.pairwise(eps)):
        raise PlanFileError(
            f"groups must be listed by increasing ε (the order clients are assigned in), got ε = {list(eps)}"
        )
    objective = _field(doc, "objective", "plan", _is_number, "a number")
    uniform_objective = _field(doc, "uniform_objective", "plan", _is_number, "a number")
    notes = _field(doc, "notes", "plan", lambda v: isinstance(v, list), "a list")
    stored = _field(doc, "recommendation", "plan", lambda v: isinstance(v, dict), "an object")
    recorded = Recommendation(
        method=_field(stored, "method", "recommendation", lambda v: isinstance(v, str), "a string"),
        lam=_field(stored, "lambda", "recommendation", _is_number, "a number"),
        ratio_to_planned=_field(stored, "ratio_to_planned", "recommendation", _is_number, "a number"),
    )
    plan = Plan(
        config=config,
        methods=tuple(methods),
        objective=float(objective),
        uniform_objective=float(uniform_objective),
        notes=tuple(str(x) for x in notes),
    )
    problems = row_problems(plan)
    if problems:  # a row that is not its method cannot be accounted as that method
        raise PlanFileError(f"noise.{problems[0]}")
    grouping, digest = grouping_from_dict(doc, plan)
    return dataclasses.replace(plan, trust=trust_from_dict(doc, plan), grouping=grouping, budgets_sha256=digest,
                               recorded=recorded)  # fmt: skip


def _edited_row(methods: list[MethodNoise]) -> str | None:
    """The message naming a group's ε or size that one row changed while the other rows agree (a hand edit), or
    the first row whose groups differ from the first's; None when every row has the same groups."""
    first = methods[0]
    if all(m.epsilon == first.epsilon and m.size == first.size for m in methods):
        return None
    if all(len(m.size) == len(first.size) for m in methods):
        for key in ("epsilon", "size"):
            for i in range(len(first.size)):
                values = [getattr(m, key)[i] for m in methods]
                common = max(set(values), key=values.count)
                odd = [m for m, v in zip(methods, values) if v != common]
                if len(odd) == 1 and values.count(common) > 1:
                    return (f"noise.{odd[0].name}.{key}[{i}] was edited ({getattr(odd[0], key)[i]:.6g}; the other rows "
                            f"were solved for {common:.6g}): re-run hdp-plan solve")  # fmt: skip
    odd = next(m for m in methods if m.epsilon != first.epsilon or m.size != first.size)
    return f"noise.{odd.name}: groups (ε, size) differ from noise.{first.name}: re-run hdp-plan solve"


def _tuple_or_none(v: list[float] | None) -> tuple[float, ...] | None:
    return None if v is None else tuple(float(x) for x in v)


def _method_from_dict(name: str, entry: Mapping[str, Any], config: PlanConfig) -> MethodNoise:
    where = f"noise.{name}"
    lists = {
        key: _field(entry, key, where, _is_list_of(_is_number), "a non-empty list of numbers") for key in GROUP_KEYS
    }
    count = len(lists["size"])
    for key, values in lists.items():
        if len(values) != count:
            raise PlanFileError(f"{where}: {key} has {len(values)} values for {count} groups")
    checks = {
        "epsilon": lambda v: v > 0,
        "size": lambda v: float(v).is_integer() and v >= 1,
        "q": lambda v: 0 < v <= 1,
        "noise_multiplier": lambda v: v > 0,
        "k_ratio": lambda v: 0 < v <= 1,
        "weight": lambda v: v > 0,
        "epsilon_spent": lambda v: v >= 0,
    }
    for key, ok in checks.items():
        for i, v in enumerate(lists[key]):
            if not ok(v):
                raise PlanFileError(f"{where}, group {i + 1}: impossible {key} = {v}")
    if sum(lists["size"]) != config.n:
        raise PlanFileError(f"{where}: group sizes sum to {sum(lists['size'])}, not n = {config.n}")
    rules = _rules(name, entry, where, count, config)
    r = [q * s for q, s in zip(lists["q"], lists["size"])]
    derived = {
        "expected_clients": r,
        "sigma2": [s * s for s in lists["noise_multiplier"]],
        "weight": list(pooled_weights(r) if rules["pooled"] else aggregation_weights(r)),
    }
    for key, values in derived.items():
        stored = _field(entry, key, where, _is_list_of(_is_number), "a non-empty list of numbers")
        if len(stored) != count or not np.allclose(stored, values, rtol=REL_TOL, atol=0):
            raise PlanFileError(f"{where}: {key} is inconsistent with q, size and noise_multiplier")
    sigma, k, w = lists["noise_multiplier"], lists["k_ratio"], lists["weight"]
    method = MethodNoise(
        name=name,
        epsilon=tuple(float(x) for x in lists["epsilon"]),
        size=tuple(int(x) for x in lists["size"]),
        q=tuple(float(x) for x in lists["q"]),
        noise_multiplier=tuple(float(x) for x in sigma),
        k_ratio=tuple(float(x) for x in k),
        weight=tuple(float(x) for x in w),
        epsilon_spent=tuple(float(x) for x in lists["epsilon_spent"]),
        lam=0.0,
        lambda_exact=0.0,
        **rules,
    )
    _check_rules(method, where, config)
    clips, rms = method.clips(config.clip), method.rms_noise_multiplier(config.rounds)
    lam = lambda_for(
        config.lambda_convention,
        row_paper_weights(name),
        expected_clients=r,
        weight=w,
        noise_multiplier=rms,
        k_ratio=k,
        clip=clips,
        pooled=method.pooled,
    )
    lam_exact = lambda_exact(w, rms, k, clips, method.pooled)
    for key, value in (("lambda", lam), ("lambda_exact", lam_exact)):
        stored = _field(entry, key, where, _is_number, "a number")
        if not math.isclose(stored, value, rel_tol=REL_TOL):
            raise PlanFileError(f"{where}: {key} = {stored} but the file's parameters give {value:.6g}")
    return dataclasses.replace(method, lam=lam, lambda_exact=lam_exact)


def _rules(name: str, entry: Mapping[str, Any], where: str, count: int, config: PlanConfig) -> dict[str, Any]:
    """The baseline keys of a noise entry (:func:`row_keys`), parsed and range-checked."""
    allowed = row_keys(name)
    present = {"clip", "pooled", "projection", "schedule"} & set(entry)
    if present != allowed:
        wrong = sorted(present ^ allowed)[0]
        raise PlanFileError(f"{where}: {'missing' if wrong in allowed else 'unexpected'} {wrong!r}")
    rules: dict[str, Any] = {
        "pooled": _field(entry, "pooled", where, lambda v: v is True, "true") if "pooled" in entry else False
    }
    positive_list = _is_list_of(lambda v: _is_number(v) and v > 0)
    if "clip" in entry:
        clip = _field(entry, "clip", where, positive_list, "a list of positive numbers")
        if len(clip) != count:
            raise PlanFileError(f"{where}: clip has {len(clip)} values for {count} groups")
        rules["clip"] = tuple(float(x) for x in clip)
    if "projection" in entry:
        proj = _field(entry, "projection", where, lambda v: isinstance(v, dict), "an object")
        ints = {
            key: _field(proj, key, f"{where}.projection", _is_int, "an integer")
            for key in ("public", "projected", "dim", "window", "model_dim")
        }
        subspace = _field(proj, "subspace", f"{where}.projection", lambda v: v in SUBSPACES, " or ".join(SUBSPACES))
        if not (0 <= ints["public"] < count and 0 <= ints["projected"] < count and ints["public"] != ints["projected"]):
            raise PlanFileError(f"{where}.projection: public and projected must be two of the {count} groups")
        if not 1 <= ints["dim"] <= min(ints["window"], ints["model_dim"]):
            raise PlanFileError(f"{where}.projection: need 1 ≤ dim ≤ window and dim ≤ model_dim")
        rules["projection"] = Projection(subspace=subspace, **ints)
    if "schedule" in entry:
        phases = _field(entry, "schedule", where, _is_list_of(lambda v: isinstance(v, dict)), "a list of phases")
        rules["schedule"] = tuple(
            Phase(
                rounds=_field(ph, "rounds", f"{where}.schedule", lambda v: _is_int(v) and v >= 1, "a positive integer"),
                noise_multiplier=tuple(
                    float(x) for x in _field(ph, "noise_multiplier", f"{where}.schedule", positive_list, "σ > 0")
                ),
            )
            for ph in phases
        )
    return rules


def _check_rules(m: MethodNoise, where: str, config: PlanConfig) -> None:
    """What the baseline keys imply: a schedule spanning T ending at σ, PFA's k/d (the rest of each
    method's definition: :func:`hdp_planner.planfile.mechanism.row_problems`)."""
    if m.schedule is not None:
        if sum(ph.rounds for ph in m.schedule) != config.rounds:
            raise PlanFileError(f"{where}: schedule phases do not add up to T = {config.rounds} rounds")
        if any(len(ph.noise_multiplier) != len(m.size) for ph in m.schedule):
            raise PlanFileError(f"{where}: every schedule phase needs one σ per group")
        if m.schedule[-1].noise_multiplier != m.noise_multiplier:
            raise PlanFileError(f"{where}: noise_multiplier must be the last schedule phase's σ")
    if pooled_problem(m, config.clip):
        raise PlanFileError(f"{where}: {pooled_problem(m, config.clip)}")
    if m.projection is not None:
        p = m.projection
        if not math.isclose(m.k_ratio[p.projected], p.dim / p.model_dim, rel_tol=REL_TOL):
            raise PlanFileError(f"{where}: the projected group's k_ratio must be dim/model_dim")
