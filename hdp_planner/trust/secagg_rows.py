"""A plan's rows recalibrated for a server that is not trusted with updates: secure aggregation with distributed
discrete Gaussian noise.

Updates travel under secure aggregation and carry distributed discrete Gaussian shares
(:mod:`hdp_planner.distributed.encoding`) under a noise law fixed for the run (:mod:`hdp_planner.distributed.law`):
the N released shares meet the group's ε against third parties (:mod:`hdp_planner.distributed.accounting`), and its ε
against the server (⌈(t − k)/M⌉ honest shares of the smallest share of any group, no amplification, at most K
participations) is reported beside it. A row with a group that cannot be run so (too few clients a round for its
threshold, or releasing in under 99% of rounds) has no secagg form and is never recommended. The price of distrust
of a row is its Λ under secure aggregation over its Λ with a trusted server.
"""

from __future__ import annotations

import math

from hdp_planner.distributed.accounting import epsilon_server
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.law import LawError, expected_variance, group_law
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.trust import SecaggGroup, SecaggParameters, SecaggRow
from hdp_planner.rules.noise import lambda_exact


def distributed_form(m: MethodNoise) -> str | None:
    """Why row ``m`` has no distributed form (one pooled draw, a σ schedule, no noise), or None."""
    if m.pooled:
        return "one pooled draw"
    if m.schedule is not None:
        return "a σ schedule"
    if all(s == 0 for s in m.noise_multiplier):
        return "no noise"
    return None


def row_laws(m: MethodNoise, config: PlanConfig, parameters: SecaggParameters) -> tuple[GroupLaw, ...]:
    """Each group's noise law of row ``m`` (:func:`~hdp_planner.distributed.law.group_law`, cached); raises
    :class:`~hdp_planner.distributed.law.LawError` naming the first group that cannot be run so."""
    laws = []
    for i, (eps, size, q, clip) in enumerate(zip(m.epsilon, m.size, m.q, m.clips(config.clip))):
        try:
            laws.append(group_law(size=size, q=q, epsilon=eps, delta=config.delta, rounds=config.rounds,
                                  dim=parameters.dim, clip=clip, bits=parameters.bits, survivors=parameters.survivors,
                                  colluders=parameters.colluders, wrap=parameters.wrap))  # fmt: skip
        except LawError as exc:
            raise LawError(f"group {i + 1}: {exc}") from None
    return tuple(laws)


def secagg_row(m: MethodNoise, config: PlanConfig, parameters: SecaggParameters) -> SecaggRow:
    """Recalibrate one row for secure aggregation; pooled draws, σ schedules and groups without a law are left as
    notes."""

    def unplanned(why: str) -> SecaggRow:
        return SecaggRow(name=m.name, groups=None, lambda_secagg=None, lambda_server=m.lambda_exact,
                         note=f"not planned under secagg ({why})")  # fmt: skip

    why = distributed_form(m)
    if why is not None:
        return unplanned(why)
    k = parameters.participations or config.rounds
    if k > config.rounds:
        raise ValueError(f"participations K = {k} exceed the plan's T = {config.rounds} rounds")
    try:
        laws = row_laws(m, config, parameters)
    except LawError as exc:
        return unplanned(str(exc))
    least = min(law.share_sigma2 for law in laws)
    clips = m.clips(config.clip)
    groups = tuple(
        SecaggGroup(
            gamma=law.encoding.gamma,
            share_sigma2=law.share_sigma2,
            threshold=law.threshold,
            shares=law.shares,
            release_probability=law.release,
            noise_multiplier=law.noise_multiplier,
            epsilon_third_parties=eps,
            server_noise_multiplier=law.server_multiplier(least, groups=len(laws)),
            epsilon_server=epsilon_server(noise_multiplier=law.server_multiplier(least, groups=len(laws)),
                                          participations=k, delta=config.delta,
                                          tau_d=group_tau_d(size, model_dim=parameters.dim)),
            effective_noise_multiplier=math.sqrt(expected_variance(law, size=size, q=q)) / clip,
        )
        for law, eps, size, q, clip in zip(laws, m.epsilon, m.size, m.q, clips)
    )  # fmt: skip
    lam = lambda_exact(m.weight, [g.effective_noise_multiplier for g in groups], m.k_ratio, clips)
    return SecaggRow(name=m.name, groups=groups, lambda_secagg=lam, lambda_server=m.lambda_exact)
