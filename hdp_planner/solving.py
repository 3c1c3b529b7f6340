"""One call from groups to a verified plan: :func:`solve`, what ``hdp-plan solve``, ``compare`` and the examples run.

Problem 1 and GDPFed's four rows (:func:`~hdp_planner.methods.gdpfed.solve_plan`), the baselines asked for
(:func:`~hdp_planner.methods.baselines.add_baselines`), every row checked by the accountant, then the trust model's
sections (every row under secure aggregation, with cohorts where who contributes is hidden), re-derived before the
plan is returned: a plan never under-noises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hdp_planner.methods.baselines import add_baselines
from hdp_planner.methods.gdpfed import solve_plan
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planfile.document import PlanVerificationError, plan_problems
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Grouping, Groups
from hdp_planner.planning.plan import Plan, Trust
from hdp_planner.planning.trust import TrustedServer


def solve(
    groups: Groups,
    config: PlanConfig,
    *,
    baselines: Sequence[str] = (),
    options: BaselineOptions = BaselineOptions(),  # noqa: B008
    trust: Trust = TrustedServer(),  # noqa: B008
    grouping: tuple[Grouping, str] | None = None,
    trusted_fallback: bool = False,
) -> Plan:
    """A plan of ``groups`` under ``config``, with the ``baselines`` and ``trust``'s sections, verified.

    Args:
        groups: The groups' ε_m and |G_m| (canonical: by increasing ε).
        config: The plan's settings.
        baselines: Rows to add (plan names, :data:`~hdp_planner.methods.baselines.BASELINES` values), in order.
        options: The baselines' own parameters.
        trust: The trust model to plan for (:func:`~hdp_planner.trust.registry.requested_trust`): its sections are
            planned on the solved rows.
        grouping: How per-client budgets were grouped into ``groups`` and their SHA-256 (``solve --budgets``).
        trusted_fallback: Where no row has a secure form under ``trust``, return the plan for a trusted server (its
            trust model's :attr:`~hdp_planner.planning.trust.TrustedServer.declined` is ``trust``) instead of
            raising :class:`NoSecureForm`.

    Returns:
        The plan, every row within its budget and every section re-derived.

    Raises:
        PlanVerificationError: A row or section that the accountant refuses (never returned).
        NoSecureForm: No row has a secure form under ``trust`` (and ``trusted_fallback`` is False).
        ValueError: An invalid setting (one line).
    """
    plan = add_baselines(solve_plan(groups, config), baselines, options)
    if grouping is not None:
        plan = dataclasses.replace(plan, grouping=grouping[0], budgets_sha256=grouping[1])
    problems = plan_problems(plan)
    if problems:
        raise PlanVerificationError(problems)
    plan = secured(plan, trust)
    why = plan.trust.unplanned(plan)
    if why is not None:
        if not trusted_fallback:
            raise NoSecureForm(why)
        plan = dataclasses.replace(plan, trust=TrustedServer(declined=plan.trust))
    return plan


def secured(plan: Plan, trust: Trust) -> Plan:
    """``plan`` (solved for a trusted server, verified) with ``trust``'s sections, re-derived: the last step of
    :func:`solve`, apart for a caller that checks the trusted plan before the secure rows' slower calibration.

    Raises:
        PlanVerificationError: A section that the accountant refuses (never returned).
    """
    plan = dataclasses.replace(plan, trust=trust.planned(plan))
    problems = plan.trust.problems(plan)
    if problems:
        raise PlanVerificationError(problems)
    return plan


class NoSecureForm(ValueError):
    """No row of a plan has a secure form under the trust model asked for; ``why`` names the recommended row's
    reason."""

    def __init__(self, why: str) -> None:
        super().__init__(f"no row of this plan has a secure form under secure aggregation: {why}")
        self.why = why
