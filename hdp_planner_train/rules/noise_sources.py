"""Where a round's Gaussian draws come from: a :class:`NoiseSource`, either :class:`SecureNoise` (the OS's CSPRNG,
for models that are released) or :class:`SeededNoise` (reproducible from the run's seed: simulations only), and the
noise in one group's sum (:func:`group_noise`: the joined clients' shares, or the server's draw when none joined)."""

from __future__ import annotations

import math
from typing import Literal, Protocol

import numpy as np
import torch

from hdp_planner.rules.noise import noise_share_std, secure_normal
from hdp_planner_train.rules.sampling import round_seed

NoiseKind = Literal["secure", "seeded"]


class NoiseSource(Protocol):
    """Where every Gaussian draw of a round comes from (the noise shares and PFA's start vectors)."""

    kind: NoiseKind

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        """A tensor of ``shape`` with independent N(0, std²) entries on ``device`` in ``dtype``."""
        ...

    def share_sum(self, d: int, *, shares: int, std: float, device, dtype) -> torch.Tensor:
        """The sum of ``shares`` independent N(0, std²·I_d) shares (the clients' noise shares of a group)."""
        ...


class SeededNoise:
    """Reproducible noise for simulations: torch generators seeded from ``round_seed(seed, rnd, 2)``, one per device.

    Anyone holding the seed regenerates every draw and can subtract it from the released model:
    a model trained with it must never be released."""

    kind: NoiseKind = "seeded"

    def __init__(self, seed: int, rnd: int) -> None:
        self.seed, self.rnd = seed, rnd
        self._generators: dict[str, torch.Generator] = {}

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        device = torch.device(device)
        gen = self._generators.get(device.type)  # one stream per device type, as one generator per round before
        if gen is None:
            gen = self._generators[device.type] = torch.Generator(device=device).manual_seed(
                round_seed(self.seed, rnd=self.rnd, stream=2)
            )
        return torch.randn(shape, generator=gen, device=device, dtype=dtype) * std

    def share_sum(self, d: int, *, shares: int, std: float, device, dtype) -> torch.Tensor:
        """One draw per share, in client order: the same stream in every engine and on resume."""
        total = torch.zeros(d, device=device, dtype=dtype)
        for _ in range(shares):
            total += self.normal(d, std, device, dtype)
        return total


class SecureNoise:
    """Noise from the OS's cryptographically secure generator (:func:`hdp_planner.rules.noise.secure_normal`, float64),
    converted to ``dtype`` on ``device``: nothing recorded with the run regenerates it."""

    kind: NoiseKind = "secure"

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        size = (shape,) if isinstance(shape, int) else tuple(shape)
        draws = secure_normal(int(np.prod(size))) * std
        return torch.from_numpy(draws.reshape(size)).to(device=device, dtype=dtype)

    def share_sum(self, d: int, *, shares: int, std: float, device, dtype) -> torch.Tensor:
        """The sum's own law, N(0, shares·std²·I_d), in one draw (the simulation holds every share anyway)."""
        return self.normal(d, std * math.sqrt(shares), device, dtype)


def noise_source(kind: NoiseKind, *, seed: int, rnd: int) -> NoiseSource:
    """The noise of round ``rnd``: :class:`SecureNoise` or :class:`SeededNoise` (seed, rnd)."""
    if kind == "secure":
        return SecureNoise()
    if kind == "seeded":
        return SeededNoise(seed, rnd)
    raise ValueError(f"noise source must be secure or seeded, got {kind!r}")


def group_noise(
    d: int, *, joined: int, clip: float, noise_multiplier: float, source: NoiseSource, device, dtype
) -> torch.Tensor:
    """The noise in a group's sum: ``joined`` client shares of std C·σ/√c each, or the server's N(0, C²σ²)."""
    return source.share_sum(
        d,
        shares=max(joined, 1),
        std=noise_share_std(clip, noise_multiplier=noise_multiplier, joined=joined),
        device=device,
        dtype=dtype,
    )
