"""The plan file's ``"grouping"`` object: how ``solve --budgets`` grouped the per-client budgets into the plan's
groups (:class:`~hdp_planner.planning.budget_grouping.Grouping`), with the SHA-256 of the budgets read; checked on
reading to describe the plan's own groups."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hdp_planner.planfile.schema import PlanFileError
from hdp_planner.planning.grouping import Grouping, Groups
from hdp_planner.planning.plan import Plan

KEY = "grouping"
NUMBERS = {"boundaries": "boundaries", "max_budget": "max_budget", "unused_budget": "unused"}
"""The grouping's lists: the file's key → the field."""
SCALARS = {"total_unused_budget": "total_unused", "closed_form_objective": "objective",
           "closed_form_noise_term": "noise_term"}  # fmt: skip


def grouping_to_dict(plan: Plan) -> dict[str, Any]:
    """The ``"grouping"`` object of ``plan`` (none where its groups were given, not grouped from budgets)."""
    g = plan.grouping
    if g is None:
        return {}
    doc: dict[str, Any] = {"method": g.method, "clients": g.groups.n, "epsilons": list(g.groups.epsilons),
                           "sizes": list(g.groups.sizes)}  # fmt: skip
    doc.update({key: list(getattr(g, name)) for key, name in NUMBERS.items()})
    doc.update({key: getattr(g, name) for key, name in SCALARS.items()})
    if plan.budgets_sha256 is not None:
        doc["budgets_sha256"] = plan.budgets_sha256
    return {KEY: doc}


def grouping_from_dict(doc: Mapping[str, Any], plan: Plan) -> tuple[Grouping | None, str | None]:
    """The grouping a plan document records and the digest of its budgets (None, None: none), which must describe
    the plan's own groups: the same sizes and ε, in the plan's order; raises PlanFileError otherwise."""
    obj = doc.get(KEY)
    if obj is None:
        return None, None
    if not isinstance(obj, dict):
        raise PlanFileError("grouping: must be an object")
    digest = obj.get("budgets_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64):
        raise PlanFileError("grouping: 'budgets_sha256' must be a SHA-256 hex digest")
    sizes, eps = obj.get("sizes"), obj.get("epsilons")
    if not isinstance(sizes, list) or not isinstance(eps, list):
        raise PlanFileError("grouping: needs the lists 'sizes' and 'epsilons' of the groups")
    same = len(eps) == len(plan.groups.epsilon) and all(
        isinstance(e, (int, float)) and math.isclose(e, g, rel_tol=1e-12) for e, g in zip(eps, plan.groups.epsilon)
    )
    if list(sizes) != list(plan.groups.size) or not same:
        raise PlanFileError(f"grouping: the budgets were grouped into sizes {sizes} with ε {eps}, the plan's groups "
                            f"are {list(plan.groups.size)} with ε {list(plan.groups.epsilon)}")  # fmt: skip
    try:
        grouping = Grouping(
            method=str(obj["method"]), groups=Groups(epsilons=tuple(eps), sizes=tuple(sizes)),
            **{name: tuple(float(x) for x in obj[key]) for key, name in NUMBERS.items()},
            **{name: float(obj[key]) for key, name in SCALARS.items()},
        )  # fmt: skip
    except KeyError as exc:
        raise PlanFileError(f"grouping: missing {exc}") from None
    except (TypeError, ValueError) as exc:
        raise PlanFileError(f"grouping: {exc}") from None
    return grouping, digest
