"""Planning under a trust model: a plan's rows recalibrated for a server that is not trusted with updates.

Under ``server`` the plan is as solved: the server sees individual updates and adds each group's noise. Under
``secagg`` updates travel under secure aggregation and carry distributed discrete Gaussian shares
(:mod:`.encoding`); each group's noise multiplier z_m is calibrated so that the shares the server cannot remove
(the honest guaranteed survivors', :mod:`.rounds`) meet the group's ε against third parties (:mod:`.accounting`),
and its ε against the server (no amplification, at most K participations) is reported beside it. The price of
distrust of a row is its Λ under ``secagg`` over its Λ under ``server``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from hdp_planner.distributed.accounting import calibrate_noise_multiplier, epsilon_server
from hdp_planner.distributed.rounds import WRAP_PROBABILITY, expected_variance, group_tau_d
from hdp_planner.planning.plan import MethodNoise, Plan
from hdp_planner.rules.noise import lambda_exact

TrustKind = Literal["server", "secagg"]
TRUST_KINDS: tuple[str, ...] = ("server", "secagg")


@dataclass(frozen=True)
class TrustModel:
    """Who is trusted with what. ``survivors`` F: the fraction of a group's sampled clients that secure aggregation
    waits for (it releases nothing below it); ``colluders`` k: clients that may share their noise with the server;
    ``participations`` K: the rounds a client takes part in at most (None: every round, T); ``model_dim`` d."""

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
        if not 0 < self.survivors <= 1:
            raise ValueError(f"survivors F must lie in (0, 1], got {self.survivors}")
        if isinstance(self.colluders, bool) or not isinstance(self.colluders, int) or self.colluders < 0:
            raise ValueError(f"colluders must be a non-negative integer, got {self.colluders}")
        k = self.participations
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"participations K must be a positive integer, got {k}")
        if self.kind == "secagg" and (self.model_dim is None or self.model_dim < 1):
            raise ValueError("--trust secagg needs --model-dim (the model's parameter count d)")
        if not 0 < self.wrap < 1:
            raise ValueError(f"wrap-around probability must lie in (0, 1), got {self.wrap}")


@dataclass(frozen=True)
class SecaggGroup:
    """One group under ``secagg``: z_m, its ε against third parties (the budget) and against the server, and the
    decoded noise's effective multiplier (√(E[error variance per coordinate])/C_m: shares of every survivor,
    rounding, wrap-around)."""

    noise_multiplier: float
    epsilon_third_parties: float
    epsilon_server: float
    effective_noise_multiplier: float


@dataclass(frozen=True)
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
    """Recalibrate one row for ``secagg``; pooled draws and σ schedules are not distributed (left as notes)."""
    c = plan.config
    if m.pooled or m.schedule is not None or all(s == 0 for s in m.noise_multiplier):
        why = "one pooled draw" if m.pooled else "a σ schedule" if m.schedule is not None else "no noise"
        return SecaggRow(m.name, None, None, m.lambda_exact, f"not planned under secagg ({why})")
    dim = int(trust.model_dim or 0)
    rounds = c.rounds
    k = trust.participations or rounds
    groups = []
    for eps, size, q, clip in zip(m.epsilon, m.size, m.q, m.clips(c.clip)):
        tau_d = group_tau_d(size, dim)
        z = calibrate_noise_multiplier(epsilon=eps, delta=c.delta, q=q, rounds=rounds, tau_d=tau_d)
        variance = expected_variance(dim=dim, clip=clip, bits=trust.bits, noise_multiplier=z, size=size, q=q,
                                     survivors=trust.survivors, colluders=trust.colluders, wrap=trust.wrap)  # fmt: skip
        groups.append(SecaggGroup(
            noise_multiplier=z,
            epsilon_third_parties=eps,
            epsilon_server=epsilon_server(noise_multiplier=z, participations=k, delta=c.delta, tau_d=tau_d),
            effective_noise_multiplier=math.sqrt(variance) / clip,
        ))  # fmt: skip
    lam = lambda_exact(m.weight, [g.effective_noise_multiplier for g in groups], m.k_ratio, m.clips(c.clip))
    return SecaggRow(m.name, tuple(groups), lam, m.lambda_exact)
