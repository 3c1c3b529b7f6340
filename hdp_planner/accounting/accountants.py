"""The accountants, behind one protocol and one registry (as Opacus looks its accountants up by name).

An accountant measures a :class:`~hdp_planner.accounting.calibration.GaussianRounds` event (ε at δ) and calibrates
σ for it, for many groups (σ_m, q_m) sharing δ and T at once. Three are registered:

- ``rdp``: Rényi DP, dp-accounting's ``RdpAccountant`` reproduced in vectorised numpy (:mod:`.rdp`);
- ``pld``: privacy loss distributions, dp-accounting's ``PLDAccountant`` (:mod:`.pld`): tighter, slower;
- ``closed-form``: GDPFed Theorem 1, σ² ≥ 7q²T(ε + 2 log(1/δ))/ε². A calibration *rule*, not an accountant: what its σ
  spends is measured with ``rdp``.

Callers never compare names: they ask an accountant what it is (:attr:`~PrivacyAccountant.rule`,
:attr:`~PrivacyAccountant.refines`) and call it. A new accountant is one class and one :func:`register_accountant`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from hdp_planner.accounting import pld, rdp

__all__ = [
    "REGISTRY",
    "ClosedFormRule",
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
    """What the planner needs of an accountant. ``epsilons`` and ``calibrate_sigmas`` take validated inputs
    (the public functions of :mod:`hdp_planner.accounting.calibration` validate)."""

    name: ClassVar[str]
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
        """ε at ``delta`` of ``rounds`` rounds of each (σ_m, q_m)."""
        ...

    def calibrate_sigmas(
        self, epsilons: np.ndarray, *, delta: float, q: np.ndarray, rounds: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The smallest σ_m meeting each (ε_m, δ) at q_m over ``rounds`` rounds, and the ε each spends where the
        calibration measured it (None otherwise)."""
        ...

    def reference(self) -> object:
        """dp-accounting's counterpart (the slow reference this accountant is tested against)."""
        ...


REGISTRY: dict[str, PrivacyAccountant] = {}
"""Accountants by name; add one with :func:`register_accountant`."""


def register_accountant(accountant: PrivacyAccountant) -> PrivacyAccountant:
    """Make ``accountant`` available by its name (``--accountant NAME``, ``PlanConfig(accountant=NAME)``)."""
    if accountant.name in REGISTRY:
        raise ValueError(f"an accountant named {accountant.name!r} is already registered")
    REGISTRY[accountant.name] = accountant
    return accountant


def get_accountant(name: str) -> PrivacyAccountant:
    """The registered accountant called ``name``; ValueError naming the choices otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown accountant {name!r}; choose one of {', '.join(REGISTRY)}") from None


def accountant_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def _idle(q: np.ndarray, rounds: int, delta: float) -> np.ndarray:
    """Groups with 1 − (1 − q)^T ≤ δ: (0, δ)-DP whatever σ (:func:`rdp.never_sampled_bound`, proved in the
    calibration docs)."""
    return np.array([rdp.never_sampled_bound(min(float(qm), 1.0), rounds) <= delta for qm in q], dtype=bool)


@dataclass(frozen=True)
class RdpAccountant:
    name: ClassVar[str] = "rdp"
    label: ClassVar[str] = "RDP"
    rule: ClassVar[bool] = False
    refines: ClassVar[bool] = False
    spending: ClassVar[str] = "rdp"

    def epsilons(self, noise_multipliers: np.ndarray, q: np.ndarray, *, rounds: int, delta: float) -> np.ndarray:
        eps = rdp.rdp_epsilons(noise_multipliers=noise_multipliers, q=q, rounds=rounds, delta=delta)
        return np.where(_idle(q, rounds, delta), 0.0, eps)

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


@dataclass(frozen=True)
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

    def reference(self) -> object:
        from dp_accounting.pld import PLDAccountant as Reference

        return Reference()


def closed_form_sigma2(*, epsilon: ArrayOrFloat, delta: float, q: ArrayOrFloat, rounds: int) -> ArrayOrFloat:
    """GDPFed Theorem 1: the smallest σ² with σ² ≥ 7q²T(ε + 2 log(1/δ))/ε² (elementwise for arrays ε, q)."""
    return 7.0 * q * q * rounds * (epsilon + 2.0 * math.log(1.0 / delta)) / (epsilon * epsilon)


@dataclass(frozen=True)
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

    def reference(self) -> object:
        return get_accountant(self.spending).reference()


for _accountant in (RdpAccountant(), PldAccountant(), ClosedFormRule()):
    register_accountant(_accountant)
