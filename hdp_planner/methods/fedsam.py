"""DP²-FedSAM's noise (the DP²-FedSAM paper): **client-level (ε, δ)-DP with one ε for every client**.

Neighbouring datasets add or remove all records of one client (Definition 1). Each round samples clients
at rate r, every sampled client clips its update to C and adds N(0, C²σ²/(rN)) so that the sum over the rN
sampled clients carries N(0, C²σ²) at sensitivity C (Algorithm 2, Lemma 6): σ is the noise multiplier of a
subsampled Gaussian mechanism composed over T rounds.

- **Closed form** (Theorem 2, eq. 26): σ² ≥ 7r²T(ε + 2 log(1/δ))/ε², derived from Lemma 4's RDP bound
  3.5r²α/σ², which Lemma 4 states only for σ² ≥ 0.7 and α ≤ 1 + (2/3)σ² log(1/(rα(1 + σ²))), at
  α = 1 + 2 log(1/δ)/ε, and for ε < 2 log(1/δ). It is GDPFed Theorem 1's bound
  (:func:`hdp_planner.accounting.calibration.closed_form_sigma2`).
- **Exact**: :func:`hdp_planner.accounting.calibration.calibrate_sigma` (RDP) for Poisson sampling of clients at rate r,
  add/remove-one-client neighbours, T rounds. The paper samples a fixed number rN of clients without
  replacement (Algorithm 2, line 2); the exact σ holds for Poisson sampling, which a trainer must use.

The paper's settings (Section 5.1): r = 0.05, T = 200, δ = 1/N, N = 500 (FEMNIST, CIFAR-10 (500, 5)) or
1000 (CIFAR-10), ε ∈ {1, 2} (Tables 2-3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hdp_planner.accounting.calibration import GaussianRounds, calibrate_sigma, closed_form_sigma2, epsilon_spent
from hdp_planner.methods.method import Method, PersonalTraits

PRIVACY_MODEL = "client-level (ε, δ)-DP, one ε for all clients (add/remove all records of one client)"
ORDER_CONDITION = "Lemma 4's α bound"
"""α = 1 + 2 log(1/δ)/ε ≤ 1 + (2/3)σ² log(1/(rα(1 + σ²))), needed by Lemma 4's 3.5r²α/σ²."""
PAPER_RATE = 0.05
PAPER_ROUNDS = 200


@dataclass(frozen=True, kw_only=True)
class FedSamSetting:
    """One of the paper's settings: N clients (δ = 1/N) at budget ε."""

    name: str
    clients: int
    epsilon: float

    @property
    def delta(self) -> float:
        return 1.0 / self.clients


PAPER_SETTINGS: tuple[FedSamSetting, ...] = (
    FedSamSetting(name="FEMNIST, CIFAR-10 (500,5)", clients=500, epsilon=1.0),
    FedSamSetting(name="FEMNIST", clients=500, epsilon=2.0),
    FedSamSetting(name="CIFAR-10 (1000,2|5)", clients=1000, epsilon=1.0),
    FedSamSetting(name="CIFAR-10 (1000,2)", clients=1000, epsilon=2.0),
)


@dataclass(frozen=True, kw_only=True)
class FedSamNoise:
    """The exact and the closed-form noise multiplier for (ε, δ) after T rounds at client sampling rate r."""

    epsilon: float
    delta: float
    sample_rate: float
    rounds: int
    exact_sigma: float
    closed_form_sigma: float
    closed_form_epsilon: float
    """The ε that the exact accountant measures for the closed-form σ."""

    @property
    def ratio(self) -> float:
        """How many times larger the closed-form σ is than the exact one (σ² differs by its square)."""
        return self.closed_form_sigma / self.exact_sigma

    @property
    def order(self) -> float:
        """Theorem 2's RDP order α = 1 + 2 log(1/δ)/ε."""
        return 1.0 + 2.0 * math.log(1.0 / self.delta) / self.epsilon

    @property
    def unmet_conditions(self) -> tuple[str, ...]:
        """Which of Theorem 2's and Lemma 4's conditions fail at the closed-form σ (empty: all hold)."""
        s2, a, r = self.closed_form_sigma**2, self.order, self.sample_rate
        failed = []
        if not self.epsilon < 2.0 * math.log(1.0 / self.delta):
            failed.append("ε < 2 log(1/δ)")
        if s2 < 0.7:
            failed.append("σ² ≥ 0.7")
        if not a <= 1.0 + (2.0 / 3.0) * s2 * math.log(1.0 / (r * a * (1.0 + s2))):
            failed.append(ORDER_CONDITION)
        return tuple(failed)


def fedsam_noise(
    epsilon: float, *, delta: float, sample_rate: float = PAPER_RATE, rounds: int = PAPER_ROUNDS
) -> FedSamNoise:
    """Exact RDP σ and Theorem 2's closed-form σ for client-level (ε, δ)-DP, and the closed form's true ε."""
    exact = calibrate_sigma(epsilon=epsilon, delta=delta, q=sample_rate, rounds=rounds)
    closed = math.sqrt(closed_form_sigma2(epsilon=epsilon, delta=delta, q=sample_rate, rounds=rounds))
    spent = epsilon_spent(GaussianRounds(noise_multiplier=closed, q=sample_rate, rounds=rounds), delta=delta)
    return FedSamNoise(
        epsilon=epsilon,
        delta=delta,
        sample_rate=sample_rate,
        rounds=rounds,
        exact_sigma=exact,
        closed_form_sigma=closed,
        closed_form_epsilon=spent,
    )


METHODS = tuple(  # the trainer's personal family, on the plan's DP-FedAvg noise row (one ε for every client)
    Method(key=key, row="DP-FedAvg", family="personal", personal=traits)
    for key, traits in (
        ("dp2-fedsam", PersonalTraits(head=True, sam=True)),
        ("dp-fedsam", PersonalTraits(sam=True)),
        ("centaur", PersonalTraits(head=True)),
        ("dp-fedavg-ft", PersonalTraits(fine_tune=True)),
    )
)
