"""One method's row of a plan: its per-group parameters (q_m, σ_m, k_m, ω_m, ε spent), the noise Λ they put in the
global update, and its rules beyond GDPFed's (per-group clips, one pooled draw, PFA's projection, a σ schedule)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def weight_shares(
    weight: Sequence[float], expected_clients: Sequence[float], clips: Sequence[float]
) -> tuple[float, ...]:
    """α_m = ω_m r_m C_m / Σ_j ω_j r_j C_j: each group's share of an update that weighs its sum by ω_m, with r_m
    expected contributors clipped at C_m."""
    terms = [w * r * c for w, r, c in zip(weight, expected_clients, clips)]
    total = sum(terms)
    return tuple(t / total for t in terms)


@dataclass(frozen=True, kw_only=True)
class Phase:
    """``rounds`` consecutive rounds in which group m adds noise multiplier ``noise_multiplier[m]``."""

    rounds: int
    noise_multiplier: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Projection:
    """PFA's projection (Liu et al., VLDB 2021): group ``projected``'s noisy sum is replaced by its orthogonal
    projection onto the top-``dim`` principal subspace of group ``public``'s last ``window`` noisy sums, found by
    ``subspace`` (lanczos | randomized SVD). Groups are 0-based; ``model_dim`` is d, the number of parameters."""

    public: int
    projected: int
    dim: int
    window: int
    subspace: str
    model_dim: int


@dataclass(frozen=True, kw_only=True)
class MethodNoise:
    """One method's per-group parameters (a row of the plan) and the noise Λ they put in the global update.

    Args:
        name: The row's name (``GDPFed+``, ``DP-FedAvg``, …).
        epsilon: ε_m per group (DP-FedAvg: one group).
        size: |G_m| per group.
        q: The sampling rate q_m per group.
        noise_multiplier: σ_m per group (a schedule's last phase).
        k_ratio: k_m/d per group (1: no Top-k).
        weight: The aggregation weight ω_m per group.
        epsilon_spent: ε_m the accountant measures for the row.
        lam: Λ in the plan's convention.
        lambda_exact: Λ, the per-coordinate noise of the applied update.
        clip: The baselines' per-group clipping thresholds (None: the plan's C).
        pooled: One pooled noise draw for all groups (a baseline's).
        projection: PFA's projection (None: none).
        schedule: A per-round σ schedule whose last phase's σ is ``noise_multiplier`` (None: ``noise_multiplier``
            in every round).
    """

    name: str
    epsilon: tuple[float, ...]
    size: tuple[int, ...]
    q: tuple[float, ...]
    noise_multiplier: tuple[float, ...]
    k_ratio: tuple[float, ...]
    weight: tuple[float, ...]
    epsilon_spent: tuple[float, ...]
    lam: float
    lambda_exact: float
    clip: tuple[float, ...] | None = None
    pooled: bool = False
    projection: Projection | None = None
    schedule: tuple[Phase, ...] | None = None

    @property
    def expected_clients(self) -> tuple[float, ...]:
        """r_m = q_m·|G_m|, the expected clients of each group in a round."""
        return tuple(q * s for q, s in zip(self.q, self.size))

    @property
    def sigma2(self) -> tuple[float, ...]:
        """σ_m² per group."""
        return tuple(s * s for s in self.noise_multiplier)

    def clips(self, default: float) -> tuple[float, ...]:
        """C_m per group: the method's own thresholds, or ``default`` (the plan's C) for every group."""
        return self.clip if self.clip is not None else tuple(default for _ in self.size)

    def weight_share(self, default_clip: float) -> tuple[float, ...]:
        """α_m = ω_m r_m C_m / Σ_j ω_j r_j C_j: group m's share of the update's weight (at clipped norm C_m).

        GDPFed's weights give α_m = r_m²/Σr² (B.2), one pool with one C gives r_m/Σr, per-group clips r_mC_m/Σr_jC_j.
        """
        return weight_shares(self.weight, self.expected_clients, self.clips(default_clip))

    def rms_noise_multiplier(self, rounds: int) -> tuple[float, ...]:
        """√(mean over the rounds of σ_m²) per group: what a schedule's noise costs Λ on average."""
        if self.schedule is None:
            return self.noise_multiplier
        return tuple(
            math.sqrt(sum(ph.rounds * ph.noise_multiplier[m] ** 2 for ph in self.schedule) / rounds)
            for m in range(len(self.size))
        )
