"""A round's group sums under secure aggregation: the core's exact integer pipeline (:mod:`hdp_planner.distributed`)
as the simulator and the Flower runtime both execute it.

Per group: the plan's fixed noise law (:mod:`hdp_planner.distributed.law`: the grid, each share's σ², the threshold t
and the released shares N, read from the verified plan, never from a count the server announces) and the round's
public rotation (:func:`round_plan`), each survivor's integer message (:func:`client_message`), their sum modulo 2^b
(secure aggregation on Flower; a plain modular sum in the simulator, where the masks, which cancel exactly, are left
out), topped up by the server to N shares and decoded (:func:`release`). Nothing is released when fewer than the
run's threshold max(t, ⌊c/2⌋ + 1) of the c sampled clients survive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.distributed.encoding import decode, encode, modular_sum, rotation_signs, top_up
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.randomness import Bits, SecureBits, SeededBits
from hdp_planner.rules.noise import SecureRandom

if TYPE_CHECKING:
    from hdp_planner.planning.trust import SecureRun


@dataclass(frozen=True, kw_only=True)
class SecaggSpec:
    """The plan's trust model as the simulator executes it (each group's law), and the simulated dropout rate."""

    bits: int
    survivors: float
    colluders: int
    model_dim: int
    laws: tuple[GroupLaw, ...]
    dropout: float = 0.0
    planned_lambda: float | None = None  # the row's Λ under the trust model (secure aggregation's, or its cohorts')
    cohorts: tuple[CohortGroup, ...] | None = None  # hidden participation: each group's cohort (:mod:`.cohort`)

    @classmethod
    def of(cls, run: SecureRun, dropout: float = 0.0) -> SecaggSpec:
        """How a row runs under secure aggregation (:meth:`~hdp_planner.planning.plan.Trust.secure_run`), with a
        simulated ``dropout`` rate."""
        p = run.parameters
        return cls(bits=p.bits, survivors=p.survivors, colluders=p.colluders, model_dim=p.dim, laws=run.laws,
                   dropout=dropout, planned_lambda=run.planned_lambda, cohorts=run.cohorts)  # fmt: skip


def public_seed(rnd: int, *, group: int) -> int:
    """The round's public rotation seed for ``group`` (not secret: it only flattens the vectors)."""
    return int(np.random.SeedSequence([rnd, group, 0x5EC]).generate_state(1)[0])


@dataclass(frozen=True, kw_only=True)
class RoundPlan:
    """A group's public parameters for one round: its law (fixed for the run) and the rotation's signs."""

    law: GroupLaw
    signs: np.ndarray


@functools.lru_cache(maxsize=64)  # every client of a simulation and the server ask for the same round
def round_plan(spec: SecaggSpec, *, rnd: int, group: int) -> RoundPlan:
    """The round's public parameters of ``group``, computed alike by every client and the server from the plan
    (the signs read-only: one copy serves every caller of the round)."""
    law = spec.laws[group]
    signs = rotation_signs(public_seed(rnd, group=group), padded=law.encoding.padded)
    signs.setflags(write=False)
    return RoundPlan(law=law, signs=signs)


def client_message(update: np.ndarray, plan: RoundPlan, bits: Bits, coin: int = 1) -> np.ndarray:
    """A client's contribution: its update clipped, encoded, times its ``coin`` (a cohort member's, 1 or 0) and
    noised with the law's share (:func:`~hdp_planner.distributed.encoding.encode`), an integer vector modulo 2^b of
    the padded dimension."""
    law = plan.law
    return encode(update, encoding=law.encoding, signs=plan.signs, share_sigma2=law.share_sigma2, bits=bits,
                  coin=coin)  # fmt: skip


def release(total: np.ndarray, plan: RoundPlan, survivors: int, bits: Bits) -> np.ndarray:
    """The group's noisy sum in update units from the ``survivors``' messages summed modulo 2^b, topped up by the
    server to the law's N shares (the released noise does not depend on how many clients took part)."""
    law = plan.law
    full = top_up(total, missing=max(0, law.shares - survivors), share_sigma2=law.share_sigma2,
                  modulus=law.encoding.modulus, bits=bits)  # fmt: skip
    return decode(full, encoding=law.encoding, signs=plan.signs)


@dataclass(frozen=True, kw_only=True)
class Withheld:
    """A group's round that released nothing under secure aggregation, and why: its sum never reaches the model.
    The reason names how many clients were sampled or survived, which depends on who took part: a run records it
    only where it records who took part (a simulation's diagnostics)."""

    group: int
    reason: str


def too_few_sampled(group: int, *, sampled: int, threshold: int) -> Withheld:
    """The group's round withheld before any message: ``sampled`` clients, below its threshold t_m."""
    return Withheld(group=group, reason=f"{sampled} sampled, below the threshold t = {threshold}")


def group_sum(
    rows: torch.Tensor, *, spec: SecaggSpec, rnd: int, group: int, bits: Bits,
    dropouts: np.random.Generator | SecureRandom, coins: np.ndarray | None = None,
    survived: Callable[[np.ndarray], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | Withheld:  # fmt: skip
    """(released noisy sum, its error against the survivors' clipped contributions) of one group, or
    :class:`Withheld` (nothing released: fewer sampled than the threshold, or fewer survived than the run's
    threshold). ``coins``: each row's private coin (1 or 0) in a cohort round; a member drops out whatever its coin.
    ``survived`` (the audit's) is told which rows survived to the sum, as the server sees them (who sent a masked
    vector)."""
    c = rows.shape[0]
    plan = round_plan(spec, rnd=rnd, group=group)
    if c < plan.law.threshold:
        return too_few_sampled(group, sampled=c, threshold=plan.law.threshold)
    alive = dropouts.random(c) >= spec.dropout
    if survived is not None:
        survived(alive)
    survivors = int(alive.sum())
    if survivors < plan.law.run_threshold(c):
        return Withheld(group=group, reason=f"{survivors} of {c} survived, below the run's threshold "
                                            f"{plan.law.run_threshold(c)}")  # fmt: skip
    coins = np.ones(c, dtype=np.int64) if coins is None else np.asarray(coins, dtype=np.int64)
    kept = torch.as_tensor(alive, device=rows.device)
    updates = rows[kept].double().cpu().numpy()
    messages = np.stack([client_message(u, plan, bits, int(b)) for u, b in zip(updates, coins[alive])])
    total = modular_sum(messages, plan.law.encoding.modulus)
    y = torch.as_tensor(release(total, plan, survivors, bits), dtype=rows.dtype, device=rows.device)
    contributed = torch.as_tensor(coins[alive], dtype=rows.dtype, device=rows.device)
    return y, y - (rows[kept] * contributed[:, None]).sum(0)


def round_sources(
    kind: str, *, seed: int | None, rnd: int, group: int
) -> tuple[Bits, np.random.Generator | SecureRandom]:
    """The noise shares' and rounding's bits, and the dropouts' draws: seeded from (seed, round, group) in a
    simulation, the OS's CSPRNG otherwise."""
    if kind == "seeded":
        state = np.random.SeedSequence([int(seed or 0), rnd, group, 0x5EC])
        share, drop = state.spawn(2)
        return SeededBits(share), np.random.default_rng(drop)
    return SecureBits(), SecureRandom()
