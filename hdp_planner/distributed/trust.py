"""Planning under a trust model: a plan's rows recalibrated for a server that is not trusted with updates.

Under ``server`` the plan is as solved: the server sees individual updates and adds each group's noise. Under
``secagg`` updates travel under secure aggregation and carry distributed discrete Gaussian shares
(:mod:`.encoding`) under a noise law fixed for the run (:mod:`.law`): the N released shares meet the group's ε
against third parties (:mod:`.accounting`), and its ε against the server (⌈(t − k)/M⌉ honest shares of the smallest
share of any group, no amplification, at most K participations) is reported beside it. A row with a group that
cannot be run so (too few clients a round for its threshold, or releasing in under 99% of rounds) has no secagg
form and is never recommended. The price of distrust of a row is its Λ under ``secagg`` over its Λ under ``server``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hdp_planner.distributed.accounting import epsilon_server
from hdp_planner.distributed.law import GroupLaw, LawError, expected_variance, group_law
from hdp_planner.distributed.rounds import WRAP_PROBABILITY, group_tau_d
from hdp_planner.planning.plan import MethodNoise, Plan
from hdp_planner.rules.noise import lambda_exact

TrustKind = Literal["server", "secagg"]
TRUST_KINDS: tuple[TrustKind, ...] = ("server", "secagg")
"""The trust models, the one list every layer checks against: a trusted server, or secure aggregation."""


@dataclass(frozen=True, kw_only=True)
class TrustModel:
    """Who is trusted with what. ``survivors`` F > 1/2: the fraction of a group's sampled clients assumed to survive
    to the sum (a strict majority: Flower's SecAgg+ has no consistency round); ``colluders`` k: clients that may
    share their noise with the server; ``participations`` K: the rounds a client takes part in at most (None: every
    round, T); ``model_dim`` d."""

    kind: TrustKind = "server"
    bits: int = 20
    survivors: float = 0.9
    colluders: int = 0
    participations: int | None = None
    model_dim: int | None = None
    wrap: float = WRAP_PROBABILITY

    def __post_init__(self) -> None:
        if self.kind not in TRUST_KINDS:
            raise ValueError(f"trust must be one of {', '.join(TRUST_KINDS)}, got {self.kind!r}")
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 8 <= self.bits <= 32:
            raise ValueError(f"bits must be an integer in [8, 32] (Flower's SecAgg+ sums modulo 2^32), got {self.bits}")
        if not 0.5 < self.survivors <= 1:
            raise ValueError(
                f"survivors F must lie in (1/2, 1], got {self.survivors}: at F ≤ 1/2 a server telling two halves of a "
                f"group different dropouts unmasks a client (SecAgg+ here has no consistency round)"
            )
        if isinstance(self.colluders, bool) or not isinstance(self.colluders, int) or self.colluders < 0:
            raise ValueError(f"colluders must be a non-negative integer, got {self.colluders}")
        k = self.participations
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"participations K must be a positive integer, got {k}")
        if self.kind == "secagg" and (self.model_dim is None or self.model_dim < 1):
            raise ValueError("--trust secagg needs --model-dim (the model's parameter count d)")
        if not 0 < self.wrap < 1:
            raise ValueError(f"wrap-around probability must lie in (0, 1), got {self.wrap}")


@dataclass(frozen=True, kw_only=True)
class SecaggGroup:
    """One group under ``secagg``: its law (:class:`~.law.GroupLaw`), z_m, its ε against third parties (the budget)
    and against the server, and the released noise's effective multiplier (√(E[error variance per coordinate])/C_m:
    N shares, rounding, wrap-around)."""

    law: GroupLaw
    noise_multiplier: float
    epsilon_third_parties: float
    server_noise_multiplier: float
    epsilon_server: float
    effective_noise_multiplier: float


@dataclass(frozen=True, kw_only=True)
class SecaggRow:
    """A method row under ``secagg`` (None fields: the row's mechanism has no distributed form here)."""

    name: str
    groups: tuple[SecaggGroup, ...] | None
    lambda_secagg: float | None
    lambda_server: float
    note: str = ""

    @property
    def price(self) -> float | None:
        """Λ under secagg over Λ under server."""
        return None if self.lambda_secagg is None else self.lambda_secagg / self.lambda_server


def secagg_row(m: MethodNoise, plan: Plan, trust: TrustModel) -> SecaggRow:
    """Recalibrate one row for ``secagg``; pooled draws, σ schedules and groups without a law are left as notes."""
    c = plan.config

    def unplanned(why: str) -> SecaggRow:
        return SecaggRow(name=m.name, groups=None, lambda_secagg=None, lambda_server=m.lambda_exact,
                         note=f"not planned under secagg ({why})")  # fmt: skip

    if m.pooled or m.schedule is not None or all(s == 0 for s in m.noise_multiplier):
        return unplanned("one pooled draw" if m.pooled else "a σ schedule" if m.schedule is not None else "no noise")
    dim = int(trust.model_dim or 0)
    k = trust.participations or c.rounds
    if k > c.rounds:
        raise ValueError(f"participations K = {k} exceed the plan's T = {c.rounds} rounds")
    laws = []
    for i, (eps, size, q, clip) in enumerate(zip(m.epsilon, m.size, m.q, m.clips(c.clip))):
        try:
            laws.append(group_law(size=size, q=q, epsilon=eps, delta=c.delta, rounds=c.rounds, dim=dim, clip=clip,
                                  bits=trust.bits, survivors=trust.survivors, colluders=trust.colluders,
                                  wrap=trust.wrap))  # fmt: skip
        except LawError as exc:
            return unplanned(f"group {i + 1}: {exc}")
    least = min(law.share_sigma2 for law in laws)
    groups = tuple(
        SecaggGroup(
            law=law,
            noise_multiplier=law.noise_multiplier,
            epsilon_third_parties=eps,
            server_noise_multiplier=law.server_multiplier(least, groups=len(laws)),
            epsilon_server=epsilon_server(noise_multiplier=law.server_multiplier(least, groups=len(laws)),
                                          participations=k, delta=c.delta, tau_d=group_tau_d(size, model_dim=dim)),
            effective_noise_multiplier=math.sqrt(expected_variance(law, size=size, q=q)) / clip,
        )
        for law, eps, size, q, clip in zip(laws, m.epsilon, m.size, m.q, m.clips(c.clip))
    )  # fmt: skip
    lam = lambda_exact(m.weight, [g.effective_noise_multiplier for g in groups], m.k_ratio, m.clips(c.clip))
    return SecaggRow(name=m.name, groups=groups, lambda_secagg=lam, lambda_server=m.lambda_exact)
