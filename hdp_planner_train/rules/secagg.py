"""A round's group sums under secure aggregation: the core's exact integer pipeline (:mod:`hdp_planner.distributed`)
as the simulator and the Flower runtime both execute it.

Per group: the round's public parameters from the announced count c (:func:`round_plan`: the grid, each share's σ²,
the guaranteed survivors t = ⌈F·c⌉, the public rotation), each survivor's integer message (:func:`client_message`),
their sum modulo 2^b (secure aggregation on Flower; a plain modular sum in the simulator, where the masks, which
cancel exactly, are left out), decoded (:func:`release`). Nothing is released when fewer than t clients survive or
fewer than k + 1 of them are honest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from hdp_planner.distributed.encoding import decode, encode, modular_sum, rotation_signs
from hdp_planner.distributed.randomness import Bits, SecureBits, SeededBits
from hdp_planner.distributed.rounds import RoundNoise, guaranteed, round_noise
from hdp_planner.planfile.trust import trust_from_dict, verify_trust
from hdp_planner.rules.noise import SecureRandom


@dataclass(frozen=True)
class SecaggSpec:
    """The plan's trust object as the simulator executes it, and the simulated dropout rate."""

    bits: int
    survivors: float
    colluders: int
    model_dim: int
    dropout: float = 0.0
    planned_lambda: float | None = None  # the row's Λ under secagg (the trust object's ``lambda_secagg``)


def public_seed(rnd: int, group: int) -> int:
    """The round's public rotation seed for ``group`` (not secret: it only flattens the vectors)."""
    return int(np.random.SeedSequence([rnd, group, 0x5EC]).generate_state(1)[0])


@dataclass(frozen=True)
class RoundPlan:
    """A group's public parameters for one round: the noise (grid, share σ², t) and the rotation's signs."""

    noise: RoundNoise
    signs: np.ndarray


def round_plan(
    *, dim: int, clip: float, noise_multiplier: float, spec: SecaggSpec, sampled: int, rnd: int, group: int
) -> RoundPlan | None:
    """The round's public parameters of ``group`` with ``sampled`` clients announced (None: the group cannot release
    this round), computed alike by every client and the server."""
    noise = round_noise(dim=dim, clip=clip, bits=spec.bits, noise_multiplier=noise_multiplier, sampled=sampled,
                        survivors=spec.survivors, colluders=spec.colluders)  # fmt: skip
    if noise is None:
        return None
    return RoundPlan(noise, rotation_signs(public_seed(rnd, group), noise.encoding.padded))


def required_threshold(sampled: int, survivors: float, colluders: int) -> int:
    """Secure aggregation's reconstruction threshold for ``sampled`` clients: t = ⌈F·c⌉, at least k + 1 (k colluders
    cannot unmask an honest client) and at least 2 (Flower's SecAgg+ minimum)."""
    t, _ = guaranteed(sampled, survivors, colluders)
    return max(t, colluders + 1, 2)


def client_message(update: np.ndarray, plan: RoundPlan, bits: Bits) -> np.ndarray:
    """A client's contribution: its update clipped, encoded and noised (:func:`~hdp_planner.distributed.encoding.
    encode`), an integer vector modulo 2^b of the padded dimension."""
    r = plan.noise
    return encode(update, encoding=r.encoding, signs=plan.signs, share_sigma2=r.share_sigma2, bits=bits)


def release(total: np.ndarray, plan: RoundPlan) -> np.ndarray:
    """The group's noisy sum in update units from the survivors' messages summed modulo 2^b."""
    return decode(total, encoding=plan.noise.encoding, signs=plan.signs)


def planned_groups(doc: dict, plan, spec, method: str, dropout: float = 0.0):
    """``spec`` (a :class:`~hdp_planner_train.rules.aggregate.GroupSpec`) under the plan document's verified
    ``secagg`` trust object: each group's z from the trust object's row of ``method``, bits, survivors, colluders.
    Raises ValueError (one line) when the plan does not trust secure aggregation or the row has no distributed form."""
    trust = trust_from_dict(doc)
    if trust.kind != "secagg":
        raise ValueError("--trust secagg needs a plan solved with --trust secagg; this plan trusts the server")
    problems = verify_trust(plan, doc)
    if problems:
        raise ValueError(f"the plan fails verification: {problems[0]}")
    entry = doc["trust"]["rows"].get(method)
    if entry is None or not spec.private:
        raise ValueError(f"{spec.method} has no distributed form under --trust secagg")
    secagg = SecaggSpec(trust.bits, trust.survivors, trust.colluders, int(trust.model_dim or 0), dropout,
                        entry.get("lambda_secagg"))  # fmt: skip
    return dataclasses.replace(spec, noise_multiplier=tuple(entry["noise_multiplier"]), secagg=secagg)


def group_sum(
    rows: torch.Tensor, *, clip: float, noise_multiplier: float, spec: SecaggSpec, rnd: int, group: int,
    bits: Bits, dropouts: np.random.Generator | SecureRandom,
) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """(decoded noisy sum, its error against the survivors' clipped sum) of one group, or None (nothing released)."""
    c, d = rows.shape
    plan = round_plan(dim=d, clip=clip, noise_multiplier=noise_multiplier, spec=spec, sampled=c, rnd=rnd, group=group)
    if plan is None:
        return None
    alive = dropouts.random(c) >= spec.dropout
    if int(alive.sum()) < plan.noise.survivors:
        return None
    updates = rows[torch.as_tensor(alive, device=rows.device)].double().cpu().numpy()
    messages = np.stack([client_message(u, plan, bits) for u in updates])
    y = torch.as_tensor(release(modular_sum(messages, plan.noise.encoding.modulus), plan), dtype=rows.dtype,
                        device=rows.device)  # fmt: skip
    return y, y - rows[torch.as_tensor(alive, device=rows.device)].sum(0)


def round_sources(kind: str, seed: int | None, rnd: int, group: int) -> tuple[Bits, np.random.Generator | SecureRandom]:
    """The noise shares' and rounding's bits, and the dropouts' draws: seeded from (seed, round, group) in a
    simulation, the OS's CSPRNG otherwise."""
    if kind == "seeded":
        state = np.random.SeedSequence([int(seed or 0), rnd, group, 0x5EC])
        share, drop = state.spawn(2)
        return SeededBits(share), np.random.default_rng(drop)
    return SecureBits(), SecureRandom()
