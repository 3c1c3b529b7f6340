"""A round's group sums under secure aggregation in the simulator: the core's exact integer pipeline
(:mod:`hdp_planner.distributed`) run on the clients' clipped updates, masks left out (they cancel exactly, so the
sums are the ones secure aggregation would return).

Per group: the round's public parameters from the announced count c (:func:`~hdp_planner.distributed.rounds.
round_noise`), dropouts drawn at the simulated rate, nothing released when fewer than t = ⌈F·c⌉ clients survive (or
fewer than k + 1 of them are honest), else each survivor's integer message, their sum modulo 2^b, decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from hdp_planner.distributed.encoding import decode, encode, modular_sum, rotation_signs
from hdp_planner.distributed.randomness import Bits, SecureBits, SeededBits
from hdp_planner.distributed.rounds import round_noise
from hdp_planner.rules.noise import SecureRandom


@dataclass(frozen=True)
class SecaggSpec:
    """The plan's trust object as the simulator executes it, and the simulated dropout rate."""

    bits: int
    survivors: float
    colluders: int
    model_dim: int
    dropout: float = 0.0


def public_seed(rnd: int, group: int) -> int:
    """The round's public rotation seed for ``group`` (not secret: it only flattens the vectors)."""
    return int(np.random.SeedSequence([rnd, group, 0x5EC]).generate_state(1)[0])


def group_sum(
    rows: torch.Tensor, *, clip: float, noise_multiplier: float, spec: SecaggSpec, rnd: int, group: int,
    bits: Bits, dropouts: np.random.Generator | SecureRandom,
) -> tuple[torch.Tensor, torch.Tensor] | None:  # fmt: skip
    """(decoded noisy sum, its error against the survivors' clipped sum) of one group, or None (nothing released)."""
    c, d = rows.shape
    noise = round_noise(dim=d, clip=clip, bits=spec.bits, noise_multiplier=noise_multiplier, sampled=c,
                        survivors=spec.survivors, colluders=spec.colluders)  # fmt: skip
    if noise is None:
        return None
    alive = dropouts.random(c) >= spec.dropout
    if int(alive.sum()) < noise.survivors:
        return None
    signs = rotation_signs(public_seed(rnd, group), noise.encoding.padded)
    updates = rows[torch.as_tensor(alive, device=rows.device)].double().cpu().numpy()
    messages = np.stack([encode(u, encoding=noise.encoding, signs=signs, share_sigma2=noise.share_sigma2, bits=bits)
                         for u in updates])  # fmt: skip
    decoded = decode(modular_sum(messages, noise.encoding.modulus), encoding=noise.encoding, signs=signs)
    y = torch.as_tensor(decoded, dtype=rows.dtype, device=rows.device)
    return y, y - rows[torch.as_tensor(alive, device=rows.device)].sum(0)


def round_sources(kind: str, seed: int | None, rnd: int, group: int) -> tuple[Bits, np.random.Generator | SecureRandom]:
    """The noise shares' and rounding's bits, and the dropouts' draws: seeded from (seed, round, group) in a
    simulation, the OS's CSPRNG otherwise."""
    if kind == "seeded":
        state = np.random.SeedSequence([int(seed or 0), rnd, group, 0x5EC])
        share, drop = state.spawn(2)
        return SeededBits(share), np.random.default_rng(drop)
    return SecureBits(), SecureRandom()
