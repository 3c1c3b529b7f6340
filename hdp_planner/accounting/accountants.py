"""The accountants, behind one protocol and one registry (as Opacus looks its accountants up by name).

An accountant measures a :class:`~hdp_planner.accounting.calibration.GaussianRounds` event (ε at δ) and calibrates
σ for it, for many groups (σ_m, q_m) sharing δ and T at once, and composes rounds of several kinds (events
(σ, q, T), as dp-accounting keeps events apart from accountants). Four are registered:

- ``rdp``: Rényi DP, dp-accounting's ``RdpAccountant`` reproduced in vectorised numpy (:mod:`.rdp`);
- ``pld``: privacy loss distributions, dp-accounting's ``PLDAccountant`` (:mod:`.pld`): tighter, slower;
- ``ddg``: the distributed discrete Gaussian under secure aggregation (:mod:`.ddg`): σ is read as its effective
  noise multiplier z, Poisson subsampling amplified by the binomial expansion, which bounds both directions for every
  symmetric mechanism (at τ·d' = 0, the continuous Gaussian's limit, a valid bound for the Gaussian rows too);
- ``closed-form``: GDPFed Theorem 1, σ² ≥ 7q²T(ε + 2 log(1/δ))/ε². A calibration *rule*, not an accountant: what its σ
  spends is measured with ``rdp``.

Callers never compare names: they ask an accountant what it is (:attr:`~PrivacyAccountant.rule`,
:attr:`~PrivacyAccountant.refines`) and call it. A new accountant is one class and one :func:`register_accountant`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from hdp_planner.accounting import ddg, pld, rdp
from hdp_planner.accounting.events import Event, dp_event

__all__ = [
    "REGISTRY",
    "ClosedFormRule",
    "DistributedAccountant",
    "Event",
    "PldAccountant",
    "PrivacyAccountant",
    "RdpAccountant",
    "accountant_names",
    "closed_form_sigma2",
    "get_accountant",
    "register_accountant",
]

ArrayOrFloat = float | np.ndarray


class PrivacyAccountant(Protocol):
    """What the planner needs of an accountant: one class with these attributes and methods, registered once.

    ``epsilons`` and ``calibrate_sigmas`` take validated inputs (the public functions of
    :mod:`hdp_planner.accounting.calibration` validate).
    """

    name: ClassVar[str]
    """The name a plan stores and ``--accountant`` takes."""
    label: ClassVar[str]
    """For figures and tables."""
    rule: ClassVar[bool]
    """A closed-form calibration rule, not an accountant: its σ is measured by :attr:`spending`, never planned below
    that accountant's own σ, and Problem 1 models σ²(q) with the rule itself."""
    refines: ClassVar[bool]
    """Tighter and slower than RDP: searches over q run with RDP, then this accountant re-solves σ at the result."""
    spending: ClassVar[str]
    """The accountant that measures what this one's σ spends (its own name, unless a rule)."""

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        """ε at ``delta`` of ``rounds`` rounds of each (σ_m, q_m).

        Args:
            noise_multipliers: σ_m per group.
            q: The Poisson sampling rate q_m per group.
            rounds: T, the rounds composed.
            delta: δ.

        Returns:
            ε_m per group.
        """
        ...

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The smallest σ_m meeting each (ε_m, δ) at q_m over ``rounds`` rounds.

        Args:
            epsilons: ε_m per group.
            delta: δ.
            q: The Poisson sampling rate q_m per group.
            rounds: T, the rounds composed.

        Returns:
            σ_m per group, and the ε each spends where the calibration measured it (None otherwise).
        """
        ...

    def compose(self, events: Sequence[Event], *, delta: float) -> float:
        """ε at ``delta`` of all ``events`` in turn (rounds of several kinds, one client's whole history).

        Args:
            events: (σ, q, T) events, composed in turn.
            delta: δ.

        Returns:
            ε of the composition.
        """
        ...

    def reference(self) -> object:
        """dp-accounting's counterpart.

        Returns:
            The slow reference this accountant is tested against.
        """
        ...


REGISTRY: dict[str, PrivacyAccountant] = {}
"""Accountants by name; add one with :func:`register_accountant`."""


def register_accountant(accountant: PrivacyAccountant) -> PrivacyAccountant:
    """Make ``accountant`` available by its name (``--accountant NAME``, ``PlanConfig(accountant=NAME)``).

    Args:
        accountant: An object following :class:`PrivacyAccountant` (usable as a class decorator's result too).

    Returns:
        ``accountant`` itself.

    Raises:
        ValueError: An accountant of that name is already registered.
    """
    if accountant.name in REGISTRY:
        raise ValueError(f"an accountant named {accountant.name!r} is already registered")
    REGISTRY[accountant.name] = accountant
    return accountant


def get_accountant(name: str) -> PrivacyAccountant:
    """The registered accountant called ``name``.

    Args:
        name: A registered name (:func:`accountant_names`).

    Returns:
        The accountant.

    Raises:
        ValueError: No accountant has that name; the message names the choices.
    """
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown accountant {name!r}; choose one of {', '.join(REGISTRY)}") from None


def accountant_names() -> tuple[str, ...]:
    """The registered accountants' names.

    Returns:
        Every name :func:`get_accountant` accepts, in registration order.
    """
    return tuple(REGISTRY)


def _idle(q: np.ndarray, rounds: int, delta: float) -> np.ndarray:
    """Groups with 1 − (1 − q)^T ≤ δ: (0, δ)-DP whatever σ (:func:`rdp.never_sampled_bound`, proved in the
    calibration docs)."""
    return np.array([rdp.never_sampled_bound(min(float(qm), 1.0), rounds=rounds) <= delta for qm in q], dtype=bool)


def _never_sampled(events: Sequence[Event], delta: float) -> bool:
    """Whether a client is in none of the events' samples but with probability ≤ δ: 1 − Π(1 − q)^T ≤ δ, then the
    composition is (0, δ)-DP whatever its noise (the proof of :func:`_idle`, with independent samples)."""
    log_never = sum(rounds * math.log1p(-min(q, 1.0)) if q < 1 else -math.inf for _, q, rounds in events)
    return -math.expm1(log_never) <= delta


@dataclass(frozen=True, kw_only=True)
class RdpAccountant:
    name: ClassVar[str] = "rdp"
    label: ClassVar[str] = "RDP"
    rule: ClassVar[bool] = False
    refines: ClassVar[bool] = False
    spending: ClassVar[str] = "rdp"

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        eps = rdp.rdp_epsilons(noise_multipliers=noise_multipliers, q=q, rounds=rounds, delta=delta)
        return np.where(_idle(q, rounds, delta), 0.0, eps)

    def compose(self, events: Sequence[Event], *, delta: float) -> float:
        """Rényi DP adds up over rounds (Mironov 2017, Prop. 1): Σ T·RDP_α(q, σ) at the default orders
        (:func:`rdp.rdp_curve`), converted once as dp-accounting's ``RdpAccountant`` does; 0 where no client is
        sampled but with probability ≤ δ, or where the closed-form bound of orders 1.1 … 2 certifies it."""
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        live = [(s, q, t) for s, q, t in events if q > 0]
        if not live or _never_sampled(live, delta) or rdp.kl_certifies_zero(live, delta):
            return 0.0
        total = sum(t * rdp.rdp_curve(noise_multiplier=s, q=q) for s, q, t in live)
        return float(compute_epsilon(rdp.DEFAULT_RDP_ORDERS, total, delta)[0])

    def reference(self) -> object:
        from dp_accounting.rdp import RdpAccountant as Reference

        return Reference()

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Solved together (:func:`rdp.calibrate_sigmas_rdp`); idle groups get σ = ``SIGMA_MIN`` and ε 0, no search."""
        eps, qs = np.asarray(epsilons, dtype=np.float64), np.asarray(q, dtype=np.float64)
        idle = _idle(qs, rounds, delta)
        sigma, spent = np.full(eps.shape, rdp.SIGMA_MIN), np.zeros(eps.shape)
        if not idle.all():
            sigma[~idle], spent[~idle] = rdp.calibrate_sigmas_rdp(
                epsilons=eps[~idle], delta=delta, q=qs[~idle], rounds=rounds
            )
        return sigma, spent


@dataclass(frozen=True, kw_only=True)
class PldAccountant:
    name: ClassVar[str] = "pld"
    label: ClassVar[str] = "PLD"
    rule: ClassVar[bool] = False
    refines: ClassVar[bool] = True
    spending: ClassVar[str] = "pld"

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        return np.array(
            [
                pld.pld_epsilon(noise_multiplier=float(s), q=float(qm), rounds=rounds, delta=delta)
                for s, qm in zip(noise_multipliers, q, strict=True)
            ]
        )

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, None]:
        """One search per group, each at the discretization chosen from its ε (the ε spent is measured apart)."""
        sigma = np.array(
            [
                pld.calibrate_sigma_pld(epsilon=float(e), delta=delta, q=float(qm), rounds=rounds)
                for e, qm in zip(epsilons, q, strict=True)
            ]
        )
        return sigma, None

    def compose(self, events: Sequence[Event], *, delta: float) -> float:
        """dp-accounting's ``PLDAccountant`` (default discretization) over the events in turn; 0 where no client is
        sampled but with probability ≤ δ."""
        live = [(s, q, t) for s, q, t in events if q > 0]
        if not live or _never_sampled(live, delta):
            return 0.0
        accountant = self.reference()
        for s, q, t in live:
            accountant.compose(dp_event(s, q=q, rounds=t))
        return float(accountant.get_epsilon(delta))

    def reference(self) -> object:
        from dp_accounting.pld import PLDAccountant as Reference

        return Reference()


@dataclass(frozen=True, kw_only=True)
class DistributedAccountant:
    """The distributed discrete Gaussian sum against third parties (:mod:`.ddg`): σ is the effective noise
    multiplier z, each release's RDP α/(2z²) + ``tau_d`` (Kairouz, Liu and Steinke 2021, Proposition 14)
    amplified by Poisson subsampling (the binomial expansion, both directions: :func:`ddg.poisson_subsampled_rdp`).
    The registered instance has ``tau_d`` = 0: the continuous Gaussian's RDP, through a bound valid for every
    symmetric mechanism, the Gaussian included, so its ε is never below ``rdp``'s at the same orders."""

    name: ClassVar[str] = "ddg"
    label: ClassVar[str] = "DDG"
    rule: ClassVar[bool] = False
    refines: ClassVar[bool] = False
    spending: ClassVar[str] = "ddg"
    tau_d: float = 0.0
    """τ·d' of Proposition 14 for the shares' variance and count (:func:`ddg.tau` times the padded dimension)."""

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        return self._measure([(float(s), float(qm), rounds) for s, qm in zip(noise_multipliers, q, strict=True)], delta)

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One search per group (:func:`ddg.calibrate_noise_multiplier`); idle groups get σ = ``SIGMA_MIN``."""
        qs = np.asarray(q, dtype=np.float64)
        idle = _idle(qs, rounds, delta)
        sigma = np.array(
            [
                rdp.SIGMA_MIN
                if skip
                else ddg.calibrate_noise_multiplier(
                    epsilon=float(e), delta=delta, q=float(qm), rounds=rounds, tau_d=self.tau_d
                )
                for e, qm, skip in zip(epsilons, qs, idle, strict=True)
            ]
        )
        return sigma, self.epsilons(sigma, qs, rounds=rounds, delta=delta)

    def compose(self, events: Sequence[Event], *, delta: float) -> float:
        """Σ T·RDP of each event's amplified release (:func:`ddg.amplified_release_rdp`), converted once."""
        return float(self._measure(events, delta, together=True)[0])

    def _measure(self, events: Sequence[Event], delta: float, together: bool = False) -> np.ndarray:
        """ε of each event alone, or (``together``) of their composition; 0 where no client is sampled but with
        probability ≤ δ."""
        groups = [list(events)] if together else [[event] for event in events]
        out = np.zeros(len(groups))
        for i, group in enumerate(groups):
            live = [(s, q, t) for s, q, t in group if q > 0]
            if not live or _never_sampled(live, delta):
                continue
            out[i] = ddg.epsilon_of(
                lambda orders, live=live: sum(t * self._curve(orders, s, q) for s, q, t in live), delta
            )
        return out

    def _curve(self, orders: np.ndarray, noise_multiplier: float, q: float) -> np.ndarray:
        """One amplified release's RDP at ``orders`` (:func:`ddg.amplified_release_rdp`)."""
        return ddg.amplified_release_rdp(orders, noise_multiplier=noise_multiplier, tau_d=self.tau_d, q=q)

    def reference(self) -> object:
        """dp-accounting's RDP accountant at this accountant's orders: the exact RDP of the sampled Gaussian there."""
        from dp_accounting.rdp import RdpAccountant as Reference

        return Reference(orders=[float(a) for a in ddg.ORDERS])


def closed_form_sigma2(*, epsilon: ArrayOrFloat, delta: float, q: ArrayOrFloat, rounds: int) -> ArrayOrFloat:
    """GDPFed Theorem 1: the smallest σ² with σ² ≥ 7q²T(ε + 2 log(1/δ))/ε² (elementwise for arrays ε, q)."""
    return 7.0 * q * q * rounds * (epsilon + 2.0 * math.log(1.0 / delta)) / (epsilon * epsilon)


@dataclass(frozen=True, kw_only=True)
class ClosedFormRule:
    name: ClassVar[str] = "closed-form"
    label: ClassVar[str] = "closed form"
    rule: ClassVar[bool] = True
    refines: ClassVar[bool] = False
    spending: ClassVar[str] = "rdp"

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        return get_accountant(self.spending).epsilons(noise_multipliers, q, rounds=rounds, delta=delta)

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, None]:
        eps, qs = np.asarray(epsilons, dtype=np.float64), np.asarray(q, dtype=np.float64)
        return np.sqrt(closed_form_sigma2(epsilon=eps, delta=delta, q=qs, rounds=rounds)), None

    def compose(self, events: Sequence[Event], *, delta: float) -> float:
        return get_accountant(self.spending).compose(events, delta=delta)

    def reference(self) -> object:
        return get_accountant(self.spending).reference()


for _accountant in (RdpAccountant(), PldAccountant(), DistributedAccountant(), ClosedFormRule()):
    register_accountant(_accountant)
