"""Privacy accounting for one group: the Poisson-subsampled Gaussian mechanism, composed over rounds.

The mechanism is described by a :class:`GaussianRounds` event (what happens) and measured by a registered
accountant (how), as in dp-accounting: ``rdp``, ``pld``, or the ``closed-form`` calibration rule
(:mod:`hdp_planner.accounting.accountants`). Every numerical argument is keyword-only and checked once
(:mod:`hdp_planner.accounting.validation`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np

from hdp_planner.accounting import rdp
from hdp_planner.accounting.accountants import accountant_names, closed_form_sigma2, get_accountant
from hdp_planner.accounting.events import dp_event
from hdp_planner.accounting.validation import (
    check_delta,
    check_epsilon,
    check_groups,
    check_noise_multiplier,
    check_ratio,
    check_rounds,
)

Accountant = Literal["rdp", "pld", "ddg", "closed-form"]
"""The name of a registered accountant (:func:`~hdp_planner.accounting.accountants.get_accountant`)."""

__all__ = [
    "CALIBRATIONS",
    "Accountant",
    "CalibrationMemo",
    "GaussianRounds",
    "accountant_names",
    "calibrate_q",
    "calibrate_sigma",
    "calibrate_sigmas",
    "closed_form_sigma2",
    "dp_event",
    "epsilon_spent",
    "epsilons_spent",
    "quiet_dp_accounting",
    "reference_epsilon",
    "reference_kl_refuted",
]


@dataclass(frozen=True, kw_only=True)
class GaussianRounds:
    """``rounds`` compositions of a Gaussian mechanism (noise multiplier σ) on a Poisson sample of rate q.

    Args:
        noise_multiplier: σ, the noise's standard deviation over the sensitivity.
        q: The Poisson sampling rate, in (0, 1].
        rounds: T, the rounds composed.

    Raises:
        ValueError: A value out of range.
    """

    noise_multiplier: float
    q: float
    rounds: int

    def __post_init__(self) -> None:
        check_noise_multiplier(self.noise_multiplier)
        check_ratio(self.q)
        check_rounds(self.rounds)

    def dp_event(self):
        """The same mechanism as a dp-accounting event (the reference description)."""
        return dp_event(self.noise_multiplier, q=self.q, rounds=self.rounds)


def epsilon_spent(event: GaussianRounds, *, delta: float, accountant: Accountant = "rdp") -> float:
    """ε of ``event`` at ``delta``, measured by ``accountant``'s spending accountant (a rule's σ by ``rdp``).

    Args:
        event: The rounds measured.
        delta: δ.
        accountant: A registered accountant's name.

    Returns:
        ε spent; 0 where 1 − (1 − q)^T ≤ δ: the mechanism is then (0, δ)-DP whatever σ
        (:func:`rdp.never_sampled_bound`).
    """
    spent = epsilons_spent(
        noise_multipliers=[event.noise_multiplier], q=[event.q], rounds=event.rounds, delta=delta, accountant=accountant
    )
    return float(spent[0])


def calibrate_sigma(*, epsilon: float, delta: float, q: float, rounds: int, accountant: Accountant = "rdp") -> float:
    """Smallest noise multiplier σ (a standard deviation) such that T rounds at rate q meet (ε, δ).

    ``rdp`` and ``pld`` never return a σ whose ε exceeds ``epsilon``; ``closed-form`` is Theorem 1.

    Args:
        epsilon: The budget ε.
        delta: δ.
        q: The Poisson sampling rate, in (0, 1].
        rounds: T, the rounds composed.
        accountant: A registered accountant's name.

    Returns:
        σ.
    """
    return float(calibrate_sigmas(epsilons=[epsilon], delta=delta, q=[q], rounds=rounds, accountant=accountant)[0])


def calibrate_sigmas(
    *, epsilons: Sequence[float], delta: float, q: Sequence[float], rounds: int, accountant: Accountant = "rdp"
) -> np.ndarray:
    """:func:`calibrate_sigma` for many groups (ε_m, q_m) sharing δ and T, each with the same guarantee; ``rdp``
    solves them together, every accountant evaluation vectorised over the groups (``rdp.calibrate_sigmas_rdp``)."""
    acc = get_accountant(accountant)
    eps, qs = check_groups(epsilons, q)
    return acc.calibrate_sigmas(epsilons=eps, delta=check_delta(delta), q=qs, rounds=check_rounds(rounds))[0]


def epsilons_spent(
    *, noise_multipliers: Sequence[float], q: Sequence[float], rounds: int, delta: float, accountant: Accountant = "rdp"
) -> np.ndarray:
    """:func:`epsilon_spent` of ``rounds`` rounds for many groups (σ_m, q_m); ``rdp`` in one vectorised evaluation."""
    acc = get_accountant(accountant)
    events = [
        GaussianRounds(noise_multiplier=float(s), q=float(qm), rounds=rounds)
        for s, qm in zip(noise_multipliers, q, strict=True)
    ]
    sigma = np.array([ev.noise_multiplier for ev in events])
    qs = np.array([min(ev.q, 1.0) for ev in events])
    return acc.epsilons(sigma, qs, rounds=check_rounds(rounds), delta=check_delta(delta))


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

    def __len__(self) -> int:
        """The calibrated σ held."""
        return len(self._sigma)

    def sigmas(
        self, *, epsilons: Sequence[float], delta: float, q: Sequence[float], rounds: int, accountant: Accountant
    ) -> list[float]:
        """σ per group (ε_m, q_m), as :func:`calibrate_sigmas`; keyword-only, as every numerical argument here."""
        keys = [(float(e), float(delta), float(qm), rounds, accountant) for e, qm in zip(epsilons, q, strict=True)]
        missing = list(dict.fromkeys(k for k in keys if k not in self._sigma))
        if missing:
            if len(self._sigma) + len(missing) > self.limit:
                self.clear()
            acc = get_accountant(accountant)
            eps, qs = check_groups([k[0] for k in missing], [k[2] for k in missing])
            delta, rounds = check_delta(delta), check_rounds(rounds)
            sigma, spent = acc.calibrate_sigmas(epsilons=eps, delta=delta, q=qs, rounds=rounds)
            if spent is None and not acc.rule:  # measured now; a rule's σ is measured at whatever σ is used
                spent = acc.epsilons(sigma, qs, rounds=rounds, delta=delta)
            self._sigma.update(zip(missing, sigma.tolist()))
            if spent is not None:
                self._spent.update(
                    ((s, qm, rounds, float(delta), accountant), e)
                    for s, qm, e in zip(sigma.tolist(), qs.tolist(), spent.tolist())
                )
        return [self._sigma[k] for k in keys]

    def spent(self, *, noise_multiplier: float, q: float, rounds: int, delta: float, accountant: Accountant) -> float:
        """ε that ``rounds`` rounds at (σ, q) spend at ``delta``, as :func:`epsilon_spent`."""
        key = (float(noise_multiplier), float(q), rounds, float(delta), accountant)
        if key not in self._spent:
            if len(self._spent) >= self.limit:
                self._spent.clear()
            self._spent[key] = epsilon_spent(
                GaussianRounds(noise_multiplier=key[0], q=key[1], rounds=rounds), delta=delta, accountant=accountant
            )
        return self._spent[key]

    def clear(self) -> None:
        self._sigma.clear()
        self._spent.clear()


CALIBRATIONS = CalibrationMemo()
"""The memo :mod:`hdp_planner.planning.plan` calibrates through."""


def calibrate_q(*, epsilon: float, delta: float, noise_multiplier: float, rounds: int) -> float:
    """Largest sampling ratio q ≤ 1 at which σ = ``noise_multiplier`` meets (ε, δ) over T rounds.

    By RDP, or q = 1 − (1 − δ)^(1/T), where 1 − (1 − q)^T = δ and the mechanism is (0, δ)-DP whatever σ, if that
    is larger (at small σ the RDP conversion's floor can exceed ε at every q ≥ 1e-12).

    Args:
        epsilon: The budget ε.
        delta: δ.
        noise_multiplier: σ.
        rounds: T, the rounds composed.

    Returns:
        q.
    """
    epsilon, delta, rounds = check_epsilon(epsilon), check_delta(delta), check_rounds(rounds)
    noise_multiplier = check_noise_multiplier(noise_multiplier)
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


def reference_epsilon(event: GaussianRounds, *, delta: float, accountant: Accountant = "rdp") -> float:
    """ε of ``event`` straight from dp-accounting (the slow reference our accountants are tested against)."""
    with quiet_dp_accounting():
        return float(get_accountant(accountant).reference().compose(event.dp_event()).get_epsilon(delta))


def reference_kl_refuted(event: GaussianRounds, *, delta: float) -> bool:
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
