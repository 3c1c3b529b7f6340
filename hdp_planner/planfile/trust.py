"""The plan file's trust sections: ``"trust"`` (the trust model's name and parameters and, under secure aggregation,
each row recalibrated for distributed noise) and ``"hidden_participation"`` (each row with public cohorts and private
coins, the caps it was planned under, and the frontier of the recommended row), written from and read into the plan's
typed :attr:`~hdp_planner.planning.plan.Plan.trust`. Each trust model re-derives its own sections (``problems``)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.planfile.schema import PlanFileError
from hdp_planner.planning.plan import Plan, Trust
from hdp_planner.planning.trust import (
    CohortCaps,
    CohortRow,
    FrontierPoint,
    HiddenSection,
    SecaggGroup,
    SecaggParameters,
    SecaggRow,
    numbers,
)
from hdp_planner.trust.registry import requested_trust, trust_name

TRUST_KEY = "trust"
HIDDEN_KEY = "hidden_participation"
PARAMETERS = ("bits", "survivors", "colluders", "participations", "model_dim", "wrap")
DERIVED = {"price_of_distrust": lambda r: r.price, "price": lambda r: r.price,
           "vectors_per_round": lambda r: r.vectors_per_round}  # fmt: skip
"""What a section's row records beyond its fields, derived from them (re-derived on reading)."""


def trust_sections(plan: Plan) -> dict[str, Any]:
    """The ``"trust"`` and ``"hidden_participation"`` objects of ``plan``'s trust model (none for a trusted
    server)."""
    trust, out = plan.trust, {}
    if trust.parameters is not None:
        params = trust.parameters
        out[TRUST_KEY] = {"kind": trust_name(trust), **{key: getattr(params, key) for key in PARAMETERS}}
        out[TRUST_KEY]["participations"] = params.participations or plan.config.rounds
        out[TRUST_KEY]["rows"] = {
            r.name: None if r.groups is None else _row(r, "price_of_distrust") for r in trust.rows
        }
        out[TRUST_KEY]["recommendation"] = trust.recommendation
    hidden = trust.hidden
    if hidden is not None:
        out[HIDDEN_KEY] = {
            "max_cohort": hidden.caps.max_cohort,
            "max_multiple": hidden.caps.max_multiple,
            "rows": {name: None if r is None else _row(r, "price", "vectors_per_round") for name, r in hidden.rows},
            "recommendation": hidden.recommendation,
            "frontier": [{"multiple": p.multiple, "vectors_per_round": p.vectors_per_round, "lambda": p.lam,
                          "price": p.price} for p in hidden.frontier],
        }  # fmt: skip
    return out


def _row(r: SecaggRow | CohortRow, *derived: str) -> dict[str, Any]:
    return {**numbers(r), **{key: DERIVED[key](r) for key in derived}}


def trust_from_dict(doc: Mapping[str, Any], plan: Plan) -> Trust:
    """The trust model a plan document records (a trusted server where it records none), its sections typed; raises
    :class:`~hdp_planner.planfile.schema.PlanFileError` naming what is missing or malformed."""
    obj, hidden = doc.get(TRUST_KEY), doc.get(HIDDEN_KEY)
    if obj is None and hidden is None:
        return plan.trust
    if not isinstance(obj, dict):
        where = "plan: 'trust' must be an object" if obj is not None else f"{HIDDEN_KEY}: needs a trust object"
        raise PlanFileError(where)
    missing = [k for k in ("kind", *PARAMETERS) if k not in obj]
    if missing:
        raise PlanFileError(f"trust: missing {', '.join(repr(k) for k in missing)}")
    if hidden is not None and not isinstance(hidden, dict):
        raise PlanFileError(f"{HIDDEN_KEY}: must be an object")
    try:
        parameters = SecaggParameters(**{k: obj[k] for k in PARAMETERS})
        trust = requested_trust(obj["kind"], parameters)
    except (TypeError, ValueError) as exc:
        raise PlanFileError(f"trust: {exc}") from exc
    try:
        caps = None if hidden is None else CohortCaps(max_cohort=hidden.get("max_cohort"),
                                                      max_multiple=hidden.get("max_multiple"))  # fmt: skip
        trust = trust if caps is None else requested_trust(obj["kind"], parameters, caps)
    except (TypeError, ValueError) as exc:
        raise PlanFileError(f"{HIDDEN_KEY}: {exc}") from exc
    if "rows" in obj:
        trust = _with_rows(trust, obj, plan)
    if caps is not None:
        trust = dataclasses.replace(trust, section=_hidden(hidden, caps, plan))  # type: ignore[type-var]
    return trust


def _with_rows(trust: Trust, obj: Mapping[str, Any], plan: Plan) -> Trust:
    rows = obj["rows"]
    if "rows" not in _fields(trust):
        raise PlanFileError(f"trust: a {obj['kind']} plan records no rows")
    if not isinstance(rows, dict):
        raise PlanFileError("trust: 'rows' must be an object")
    recommendation = obj.get("recommendation")
    if recommendation is not None and not isinstance(recommendation, str):
        raise PlanFileError("trust: 'recommendation' must be a row's name or null")
    parsed = tuple(_secagg_row(name, entry, plan) for name, entry in rows.items())
    return dataclasses.replace(trust, rows=parsed, recommendation=recommendation)  # type: ignore[type-var]


def _fields(obj: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj) else set()


def _known(name: str, plan: Plan, where: str) -> int:
    """The number of groups of the plan's row ``name``."""
    try:
        return len(plan.method(name).size)
    except KeyError:
        raise PlanFileError(f"{where}: the plan has no row {name!r}") from None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _groups(entry: Mapping[str, Any], group: type, count: int, where: str) -> tuple[Any, ...]:
    """The groups of a recorded row: one list per field of ``group``, ``count`` values each."""
    lists = {}
    for f in dataclasses.fields(group):
        values = entry.get(f.name)
        kind: Callable[[Any], bool] = _is_int if f.type == "int" else _is_number
        if not isinstance(values, list) or len(values) != count or not all(kind(v) for v in values):
            raise PlanFileError(f"{where}: {f.name} must be a list of {count} numbers")
        lists[f.name] = values
    return tuple(group(**{key: values[i] for key, values in lists.items()}) for i in range(count))


def _number(entry: Mapping[str, Any], key: str, where: str) -> float:
    value = entry.get(key)
    if not _is_number(value):
        raise PlanFileError(f"{where}: {key} must be a number")
    return float(value)


def _derived(entry: Mapping[str, Any], row: SecaggRow | CohortRow, keys: tuple[str, ...], where: str) -> None:
    """A recorded derived number (price, vectors a round) must be what the row's own numbers give."""
    for key in keys:
        got, want = entry.get(key), DERIVED[key](row)
        if not (_is_number(got) and math.isclose(got, want, rel_tol=1e-9)):
            raise PlanFileError(f"{where}: {key} {got!r} is not what its numbers give ({want!r})")


def _secagg_row(name: str, entry: Any, plan: Plan) -> SecaggRow:
    where = f"trust, {name}"
    count = _known(name, plan, where)
    if entry is None:
        return SecaggRow(name=name, groups=None, lambda_secagg=None, lambda_server=plan.method(name).lambda_exact)
    if not isinstance(entry, dict):
        raise PlanFileError(f"{where}: must be an object or null")
    row = SecaggRow(name=name, groups=_groups(entry, SecaggGroup, count, where),
                    lambda_secagg=_number(entry, "lambda_secagg", where),
                    lambda_server=_number(entry, "lambda_server", where))  # fmt: skip
    _derived(entry, row, ("price_of_distrust",), where)
    return row


def _hidden(obj: Mapping[str, Any], caps: CohortCaps, plan: Plan) -> HiddenSection:
    rows = obj.get("rows")
    if not isinstance(rows, dict):
        raise PlanFileError(f"{HIDDEN_KEY}: 'rows' must be an object")
    recommendation, frontier = obj.get("recommendation"), obj.get("frontier")
    if recommendation is not None and not isinstance(recommendation, str):
        raise PlanFileError(f"{HIDDEN_KEY}: 'recommendation' must be a row's name or null")
    if not isinstance(frontier, list) or not all(isinstance(p, dict) for p in frontier):
        raise PlanFileError(f"{HIDDEN_KEY}: 'frontier' must be a list of objects")
    return HiddenSection(caps=caps, rows=tuple((name, _cohort_row(name, entry, plan)) for name, entry in rows.items()),
                         recommendation=recommendation, frontier=tuple(_point(p) for p in frontier))  # fmt: skip


def _cohort_row(name: str, entry: Any, plan: Plan) -> CohortRow | None:
    where = f"{HIDDEN_KEY}, {name}"
    count = _known(name, plan, where)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise PlanFileError(f"{where}: must be an object or null")
    lists = {"clips": tuple(plan.method(name).clips(plan.config.clip))}  # recorded since plans kept every group
    for key in ("weight", "k_ratio", "clips") if "clips" in entry else ("weight", "k_ratio"):
        values = entry.get(key)
        if not isinstance(values, list) or len(values) != count or not all(_is_number(v) for v in values):
            raise PlanFileError(f"{where}: {key} must be a list of {count} numbers")
        lists[key] = tuple(float(v) for v in values)
    row = CohortRow(name=name, groups=_groups(entry, CohortGroup, count, where), **lists,
                    lambda_cohort=_number(entry, "lambda_cohort", where),
                    lambda_server=_number(entry, "lambda_server", where))  # fmt: skip
    _derived(entry, row, ("price", "vectors_per_round"), where)
    return row


def _point(p: Mapping[str, Any]) -> FrontierPoint:
    where = f"{HIDDEN_KEY}, frontier"
    multiple, vectors = p.get("multiple"), p.get("vectors_per_round")
    if not (multiple is None or _is_number(multiple)) or not _is_int(vectors):
        raise PlanFileError(f"{where}: 'multiple' must be a number or null, 'vectors_per_round' an integer")
    return FrontierPoint(multiple=multiple, vectors_per_round=vectors, lam=_number(p, "lambda", where),
                         price=_number(p, "price", where))  # fmt: skip
