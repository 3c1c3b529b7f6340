"""Privacy accounting for one group: the Poisson-subsampled Gaussian mechanism, composed over rounds.

The mechanism is described by a :class:`GaussianRounds` event (what happens), and accounted by a named
accountant (how it is measured), as in dp-accounting:

- ``rdp``: Rényi DP, numerically identical to dp-accounting's ``RdpAccountant`` (default orders);
- ``pld``: privacy loss distributions (dp-accounting's ``PLDAccountant``; calibration at a discretization chosen
  from ε, the default 1e-4 unless ε is small);
- ``closed-form``: GDPFed Theorem 1, σ² ≥ 7q²T(ε + 2 log(1/δ))/ε². It is a calibration rule, not an
  accountant: the ε a closed-form σ spends is measured with ``rdp``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hdp_planner.accounting import pld, rdp

Accountant = Literal["rdp", "pld", "closed-form"]
ArrayOrFloat = float | np.ndarray
ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld", "closed-form")


@dataclass(frozen=True)
class GaussianRounds:
    """``rounds`` compositions of a Gaussian mechanism (noise multiplier σ) on a Poisson sample of rate q."""

    noise_multiplier: float
    q: float
    rounds: int

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise ValueError(f"noise multiplier must be positive and finite, got {self.noise_multiplier}")
        check_ratio("q", self.q)
        check_rounds(self.rounds)

    def dp_event(self):
        """The same mechanism as a dp-accounting event (the reference description)."""
        return dp_event(self.noise_multiplier, self.q, self.rounds)


def dp_event(noise_multiplier: float, q: float, rounds: int):
    """``rounds`` Poisson(q)-sampled Gaussian(σ) steps as a dp-accounting event, unvalidated (dp-accounting's
    own calibration probes σ = 0); :class:`GaussianRounds` is the validated description."""
    import dp_accounting as dpa

    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(noise_multiplier)), rounds)


def check_epsilon(epsilon: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive number, got {epsilon}")


def check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and 0 < delta <= 1):  # δ = 1 (one client): vacuous, met by any σ
        raise ValueError(f"delta must lie in (0, 1], got {delta}")


def check_ratio(name: str, q: float) -> None:
    if not (isinstance(q, (int, float)) and 0 < q <= 1 + rdp.Q_ROUNDING):  # float rounding of 1 is 1
        raise ValueError(f"{name} must lie in (0, 1], got {q}")


def check_rounds(rounds: int) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds}")


def check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ValueError(f"unknown accountant {accountant!r}; choose one of {', '.join(ACCOUNTANTS)}")


def closed_form_sigma2(epsilon: ArrayOrFloat, delta: float, q: ArrayOrFloat, rounds: int) -> ArrayOrFloat:
    """GDPFed Theorem 1: the smallest σ² with σ² ≥ 7q²T(ε + 2 log(1/δ))/ε² (elementwise for arrays ε, q)."""
    return 7.0 * q * q * rounds * (epsilon + 2.0 * math.log(1.0 / delta)) / (epsilon * epsilon)


def epsilon_spent(event: GaussianRounds, delta: float, accountant: Accountant = "rdp") -> float:
    """ε of ``event`` at ``delta``; ``closed-form`` σ are measured with the exact RDP accountant. 0 where
    1 − (1 − q)^T ≤ δ: the mechanism is then (0, δ)-DP whatever σ (:func:`rdp.never_sampled_bound`)."""
    check_delta(delta)
    check_accountant(accountant)
    if rdp.never_sampled_bound(min(event.q, 1.0), event.rounds) <= delta:
        return 0.0
    if accountant == "pld":
        return pld.pld_epsilon(event.noise_multiplier, event.q, event.rounds, delta)
    return rdp.rdp_epsilon(event.noise_multiplier, event.q, event.rounds, delta)


def calibrate_sigma(epsilon: float, delta: float, q: float, rounds: int, accountant: Accountant = "rdp") -> float:
    """Smallest noise multiplier σ (a standard deviation) such that T rounds at rate q meet (ε, δ).

    ``rdp`` and ``pld`` never return a σ whose ε exceeds ``epsilon``; ``closed-form`` is Theorem 1.
    """
    check_epsilon(epsilon)
    check_delta(delta)
    check_ratio("q", q)
    check_rounds(rounds)
    check_accountant(accountant)
    if accountant == "closed-form":
        return math.sqrt(closed_form_sigma2(epsilon, delta, q, rounds))
    if accountant == "pld":
        return pld.calibrate_sigma_pld(epsilon, delta, q, rounds)
    return float(rdp_sigmas([epsilon], delta, [q], rounds)[0][0])


def rdp_sigmas(
    epsilons: Sequence[float], delta: float, q: Sequence[float], rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """RDP calibration of many groups and the ε each σ spends; a group with 1 − (1 − q)^T ≤ δ is (0, δ)-DP whatever
    σ (:func:`rdp.never_sampled_bound`, proved in the calibration docs): σ = ``SIGMA_MIN`` and ε 0, no search."""
    eps, qs = np.asarray(epsilons, dtype=np.float64), np.asarray(q, dtype=np.float64)
    idle = np.array([rdp.never_sampled_bound(min(qm, 1.0), rounds) <= delta for qm in qs], dtype=bool)
    sigma, spent = np.full(eps.shape, rdp.SIGMA_MIN), np.zeros(eps.shape)
    if not idle.all():
        sigma[~idle], spent[~idle] = rdp.calibrate_sigmas_rdp(eps[~idle], delta, qs[~idle], rounds)
    return sigma, spent


def calibrate_sigmas(
    epsilons: Sequence[float], delta: float, q: Sequence[float], rounds: int, accountant: Accountant = "rdp"
) -> np.ndarray:
    """:func:`calibrate_sigma` for many groups (ε_m, q_m) sharing δ and T, each with the same guarantee; ``rdp``
    solves them together, every accountant evaluation vectorised over the groups (``rdp.calibrate_sigmas_rdp``)."""
    for e, qm in zip(epsilons, q, strict=True):
        check_epsilon(e)
        check_ratio("q", qm)
    check_delta(delta)
    check_rounds(rounds)
    check_accountant(accountant)
    if accountant == "closed-form":
        return np.sqrt([closed_form_sigma2(e, delta, qm, rounds) for e, qm in zip(epsilons, q)])
    if accountant == "pld":
        return np.array([pld.calibrate_sigma_pld(e, delta, qm, rounds) for e, qm in zip(epsilons, q)])
    return rdp_sigmas(epsilons, delta, q, rounds)[0]


def epsilons_spent(
    noise_multipliers: Sequence[float], q: Sequence[float], rounds: int, delta: float, accountant: Accountant = "rdp"
) -> np.ndarray:
    """:func:`epsilon_spent` of ``rounds`` rounds for many groups (σ_m, q_m); ``rdp`` in one vectorised evaluation."""
    check_delta(delta)
    check_accountant(accountant)
    events = [GaussianRounds(float(s), float(qm), rounds) for s, qm in zip(noise_multipliers, q, strict=True)]
    if accountant == "pld":
        return np.array([pld.pld_epsilon(ev.noise_multiplier, ev.q, rounds, delta) for ev in events])
    eps = rdp.rdp_epsilons([ev.noise_multiplier for ev in events], [ev.q for ev in events], rounds, delta)
    idle = [rdp.never_sampled_bound(min(ev.q, 1.0), rounds) <= delta for ev in events]
    return np.where(idle, 0.0, eps)


class CalibrationMemo:
    """Calibrated σ per (ε, δ, q, T, accountant) and the ε that σ spends, memoized: a plan calibrates the same
    groups for several methods, and Problem 1's solver revisits them. The groups not yet known are calibrated
    together (:func:`calibrate_sigmas`), with their ε as the RDP calibration evaluated it (PLD: measured, a memo
    hit in :mod:`hdp_planner.accounting.pld`). Results do not depend on the memo; it is emptied when it holds
    ``limit`` σ."""

    def __init__(self, limit: int = 65536):
        self.limit = limit
        self._sigma: dict[tuple[float, float, float, int, str], float] = {}
        self._spent: dict[tuple[float, float, int, float, str], float] = {}

    def sigmas(
        self, epsilons: Sequence[float], delta: float, q: Sequence[float], rounds: int, accountant: Accountant
    ) -> list[float]:
        keys = [(float(e), float(delta), float(qm), rounds, accountant) for e, qm in zip(epsilons, q, strict=True)]
        missing = list(dict.fromkeys(k for k in keys if k not in self._sigma))
        if missing:
            if len(self._sigma) + len(missing) > self.limit:
                self.clear()
            eps, qs = [k[0] for k in missing], [k[2] for k in missing]
            if accountant == "rdp":  # the calibration evaluated ε at each σ it returns (0 where (0, δ)-DP anyway)
                sigma, spent = rdp_sigmas(eps, delta, qs, rounds)
            else:
                sigma = calibrate_sigmas(eps, delta, qs, rounds, accountant)
                spent = epsilons_spent(sigma, qs, rounds, delta, accountant) if accountant == "pld" else None
            self._sigma.update(zip(missing, sigma.tolist()))
            if spent is not None:  # a closed-form σ is measured with rdp, at whatever σ is used
                self._spent.update(
                    ((s, qm, rounds, float(delta), accountant), e)
                    for s, qm, e in zip(sigma.tolist(), qs, spent.tolist())
                )
        return [self._sigma[k] for k in keys]

    def spent(self, noise_multiplier: float, q: float, rounds: int, delta: float, accountant: Accountant) -> float:
        key = (float(noise_multiplier), float(q), rounds, float(delta), accountant)
        if key not in self._spent:
            if len(self._spent) >= self.limit:
                self._spent.clear()
            self._spent[key] = epsilon_spent(GaussianRounds(*key[:3]), delta, accountant)
        return self._spent[key]

    def clear(self) -> None:
        self._sigma.clear()
        self._spent.clear()


CALIBRATIONS = CalibrationMemo()
"""The memo :mod:`hdp_planner.planning.plan` calibrates through."""


def calibrate_q(epsilon: float, delta: float, noise_multiplier: float, rounds: int) -> float:
    """Largest sampling ratio q ≤ 1 at which σ = ``noise_multiplier`` meets (ε, δ) over T rounds: by RDP, or
    q = 1 − (1 − δ)^(1/T), where 1 − (1 − q)^T = δ and the mechanism is (0, δ)-DP whatever σ, if that is larger
    (at small σ the RDP conversion's floor can exceed ε at every q ≥ 1e-12)."""
    check_epsilon(epsilon)
    check_delta(delta)
    check_rounds(rounds)
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
        raise ValueError(f"noise multiplier must be positive and finite, got {noise_multiplier}")
    idle = 1.0 if delta >= 1 else -math.expm1(math.log1p(-delta) / rounds) * (1 - 1e-9)  # rounding: ≤ δ
    try:
        return max(
            rdp.calibrate_q_rdp(epsilon=epsilon, delta=delta, noise_multiplier=noise_multiplier, rounds=rounds), idle
        )
    except ValueError:  # inputs are valid: no q ≥ 1e-12 meets ε by RDP
        return idle


@contextmanager
def quiet_dp_accounting() -> Iterator[None]:
    """Silence dp-accounting's "failed to converge … Excluding this order" warnings for a block."""
    loggers = [logging.getLogger(), logging.getLogger("absl")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def reference_epsilon(event: GaussianRounds, delta: float, accountant: Accountant = "rdp") -> float:
    """ε of ``event`` straight from dp-accounting (the slow reference our accountants are tested against)."""
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    acc = PLDAccountant() if accountant == "pld" else RdpAccountant()
    with quiet_dp_accounting():
        return float(acc.compose(event.dp_event()).get_epsilon(delta))


def reference_kl_refuted(event: GaussianRounds, delta: float) -> bool:
    """Whether dp-accounting's RDP verdict ε = 0 for ``event`` is float noise: for every order to which it gives
    ε = 0, the true composed RDP is above the KL threshold −log(1 − δ²). For orders α ∈ (1, 2] that is
    :func:`~hdp_planner.accounting.rdp.low_order_rdp_bounds`' lower bound; above 2, order 2's exact RDP, since Rényi
    divergence does not decrease with its order (van Erven and Harremoës 2014, Theorem 3)."""
    from dp_accounting.rdp import RdpAccountant

    sigma, q, rounds = event.noise_multiplier, event.q, event.rounds
    lower = rounds * rdp.low_order_rdp_bounds(np.array(q), np.array(sigma))[0]
    with quiet_dp_accounting():
        zero = [
            i
            for i, a in enumerate(rdp.DEFAULT_RDP_ORDERS)
            if RdpAccountant(orders=[a]).compose(event.dp_event()).get_epsilon(delta) == 0
        ]
    threshold = -math.log1p(-(delta**2))
    return bool(zero) and all(lower[min(i, lower.size - 1)] > threshold for i in zero)
