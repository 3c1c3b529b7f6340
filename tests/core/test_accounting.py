"""calibrate_sigma / epsilon_spent against dp-accounting itself, on many configurations."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import pytest

from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.accounting.accountants import accountant_names, get_accountant, register_accountant
from hdp_planner.accounting.calibration import (
    CalibrationMemo,
    calibrate_sigmas,
    closed_form_sigma2,
    epsilons_spent,
    reference_epsilon,
)

SETTINGS = [  # (epsilon, delta, q, rounds)
    (0.5, 6000**-1.1, 0.02, 50),
    (1.5, 6000**-1.1, 0.02, 50),
    (3.0, 6000**-1.1, 0.0342, 50),
    (2.0, 600**-1.1, 0.1, 100),
    (12.0, 600**-1.1, 0.1677, 100),
    (0.5, 714**-1.1, 0.1, 50),
    (0.1, 1e-9, 1e-3, 1000),
    (8.0, 1e-5, 0.5, 10),
    (1.0, 1e-5, 1.0, 1),
    (4.0, 1e-3, 0.01, 5000),
]


@pytest.mark.parametrize(("epsilon", "delta", "q", "rounds"), SETTINGS)
def test_rdp_calibration_meets_budget_by_dp_accounting(epsilon, delta, q, rounds):
    sigma = calibrate_sigma(epsilon=epsilon, delta=delta, q=q, rounds=rounds)
    assert reference_epsilon(GaussianRounds(noise_multiplier=sigma, q=q, rounds=rounds), delta=delta) <= epsilon * (
        1 + 1e-12
    )
    # and is tight: 0.1% less noise would overspend
    assert reference_epsilon(GaussianRounds(noise_multiplier=sigma * 0.999, q=q, rounds=rounds), delta=delta) > epsilon


@pytest.mark.parametrize(("epsilon", "delta", "q", "rounds"), SETTINGS[:6])
def test_epsilon_spent_equals_dp_accounting(epsilon, delta, q, rounds):
    event = GaussianRounds(noise_multiplier=1.3, q=q, rounds=rounds)
    assert epsilon_spent(event, delta=delta) == pytest.approx(reference_epsilon(event, delta=delta), rel=1e-9)


@pytest.mark.parametrize(("epsilon", "delta", "q", "rounds"), [s for s in SETTINGS if s[2] < 1])
def test_calibrate_q_meets_the_budget_and_inverts_calibrate_sigma(epsilon, delta, q, rounds):
    """The q found for the calibrated σ spends at most ε by dp-accounting, 1e-4 more would overspend, and it is the
    q that σ was calibrated for, to the 2e-7 of both searches' brackets (σ is the least noise that q needs)."""
    sigma = calibrate_sigma(epsilon=epsilon, delta=delta, q=q, rounds=rounds)
    found = calibrate_q(epsilon=epsilon, delta=delta, noise_multiplier=sigma, rounds=rounds)
    spent = reference_epsilon(GaussianRounds(noise_multiplier=sigma, q=found, rounds=rounds), delta=delta)
    assert spent <= epsilon * (1 + 1e-12)
    above = GaussianRounds(noise_multiplier=sigma, q=found * (1 + 1e-4), rounds=rounds)
    assert reference_epsilon(above, delta=delta) > epsilon
    assert found == pytest.approx(q, rel=1e-6)


def test_closed_form_is_theorem_1_and_looser_than_rdp():
    delta = 6000**-1.1
    s2 = closed_form_sigma2(epsilon=0.5, delta=delta, q=0.02, rounds=50)
    assert s2 == pytest.approx(7 * 0.02**2 * 50 * (0.5 + 2 * math.log(1 / delta)) / 0.25)
    assert calibrate_sigma(epsilon=0.5, delta=delta, q=0.02, rounds=50, accountant="closed-form") ** 2 == pytest.approx(
        s2
    )
    assert (
        s2 > 4 * calibrate_sigma(epsilon=0.5, delta=delta, q=0.02, rounds=50) ** 2
    )  # Theorem 1 against the accountant: 11.0 vs 2.25


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1e-5, 0.1, 10), "epsilon"),
        ((float("nan"), 1e-5, 0.1, 10), "epsilon"),
        ((1.0, 0.0, 0.1, 10), "delta"),
        ((1.0, 1.5, 0.1, 10), "delta"),  # δ = 1 (one client) is vacuous, not invalid
        ((1.0, 1e-5, 0.0, 10), "q"),
        ((1.0, 1e-5, 1.5, 10), "q"),
        ((1.0, 1e-5, 0.1, 0), "rounds"),
    ],
)
def test_invalid_inputs_raise(args, message):
    with pytest.raises(ValueError, match=message):
        calibrate_sigma(**dict(zip(("epsilon", "delta", "q", "rounds"), args)))


def test_unknown_accountant_raises():
    with pytest.raises(ValueError, match="accountant"):
        calibrate_sigma(epsilon=1.0, delta=1e-5, q=0.1, rounds=10, accountant="moments")


@pytest.mark.parametrize("accountant", ["rdp", "closed-form", "pld"])
def test_batched_calibration_and_spending(accountant):
    """calibrate_sigmas / epsilons_spent are calibrate_sigma / epsilon_spent per group."""
    eps, q, delta, rounds = [0.5, 3.0], [0.1, 0.4], 1e-5, 10
    sigmas = calibrate_sigmas(epsilons=eps, delta=delta, q=q, rounds=rounds, accountant=accountant)
    assert sigmas.tolist() == pytest.approx(
        [calibrate_sigma(epsilon=e, delta=delta, q=x, rounds=rounds, accountant=accountant) for e, x in zip(eps, q)]
    )
    measure = "rdp" if accountant == "closed-form" else accountant
    spent = epsilons_spent(noise_multipliers=sigmas, q=q, rounds=rounds, delta=delta, accountant=measure)
    assert spent.tolist() == pytest.approx(
        [
            epsilon_spent(GaussianRounds(noise_multiplier=s, q=x, rounds=rounds), delta=delta, accountant=measure)
            for s, x in zip(sigmas, q)
        ],
        rel=1e-12,
    )
    with pytest.raises(ValueError):
        calibrate_sigmas(epsilons=[1.0, 2.0], delta=delta, q=[0.1], rounds=rounds, accountant=accountant)


def test_memo_calibrates_only_new_groups_and_records_their_spending(monkeypatch):
    from hdp_planner.accounting import rdp

    calls = []
    real = rdp.calibrate_sigmas_rdp
    monkeypatch.setattr(rdp, "calibrate_sigmas_rdp", lambda **kw: calls.append(list(kw["epsilons"])) or real(**kw))
    memo = CalibrationMemo(limit=3)
    first = memo.sigmas(epsilons=[0.5, 1.5], delta=1e-5, q=[0.02, 0.02], rounds=50, accountant="rdp")
    again = memo.sigmas(epsilons=[1.5, 0.5, 3.0], delta=1e-5, q=[0.02, 0.02, 0.02], rounds=50, accountant="rdp")
    assert calls == [[0.5, 1.5], [3.0]] and again[:2] == first[::-1]
    spent = memo.spent(noise_multiplier=first[0], q=0.02, rounds=50, delta=1e-5, accountant="rdp")
    assert spent == pytest.approx(
        epsilon_spent(GaussianRounds(noise_multiplier=first[0], q=0.02, rounds=50), delta=1e-5), rel=1e-13
    )
    assert spent <= 0.5
    memo.sigmas(epsilons=[4.0], delta=1e-5, q=[0.02], rounds=50, accountant="rdp")  # over the limit: starts afresh
    assert len(memo) == 1
    with pytest.raises(TypeError, match="positional"):  # δ and q cannot be swapped unnoticed
        memo.sigmas([0.5], 0.02, [1e-5], 50, "rdp")


# ------------------------------------------------------------------------- one protocol, one registry, keywords


def test_numerical_arguments_are_keyword_only():
    """``calibrate_sigma(0.5, 0.02, 1e-5, 50)`` (q and δ swapped) used to return 0.238 instead of 1.665."""
    with pytest.raises(TypeError, match="positional"):
        calibrate_sigma(0.5, 0.02, 1e-5, 50)  # type: ignore[misc]
    assert calibrate_sigma(epsilon=0.5, q=0.02, delta=1e-5, rounds=50) == pytest.approx(1.665, abs=1e-3)


@pytest.mark.parametrize("fn", ["calibrate_sigma", "calibrate_sigma_rdp", "calibrate_sigma_pld"])
def test_every_calibration_validates_rounds_alike(fn):
    from hdp_planner.accounting import calibration, pld, rdp

    calibrate = {"calibrate_sigma": calibration.calibrate_sigma, "calibrate_sigma_rdp": rdp.calibrate_sigma_rdp}.get(
        fn, pld.calibrate_sigma_pld
    )
    base = calibrate(epsilon=1.5, delta=1e-5, q=0.05, rounds=50)
    assert calibrate(epsilon=1.5, delta=1e-5, q=0.05, rounds=np.int64(50)) == base
    for bad in (50.0, True, 0, "50"):
        with pytest.raises(ValueError, match="rounds must be a positive integer"):
            calibrate(epsilon=1.5, delta=1e-5, q=0.05, rounds=bad)


def test_the_registry_names_its_accountants_and_refuses_others():
    assert accountant_names() == ("rdp", "pld", "ddg", "closed-form")
    assert get_accountant("closed-form").rule and get_accountant("closed-form").spending == "rdp"
    assert get_accountant("pld").refines and not get_accountant("rdp").refines
    with pytest.raises(ValueError, match="unknown accountant 'moments'; choose one of rdp, pld, ddg, closed-form"):
        get_accountant("moments")
    with pytest.raises(ValueError, match="already registered"):
        register_accountant(get_accountant("rdp"))


@dataclasses.dataclass(frozen=True)
class _Doubled:
    """A deliberately conservative accountant: RDP's σ, doubled (measured by RDP)."""

    name: ClassVar[str] = "doubled"
    label: ClassVar[str] = "2 × RDP"
    rule: ClassVar[bool] = False
    refines: ClassVar[bool] = False
    spending: ClassVar[str] = "doubled"

    def epsilons(self, noise_multipliers, q, *, rounds, delta):
        return get_accountant("rdp").epsilons(noise_multipliers, q, rounds=rounds, delta=delta)

    def calibrate_sigmas(self, epsilons, *, delta, q, rounds):
        sigma, _ = get_accountant("rdp").calibrate_sigmas(epsilons, delta=delta, q=q, rounds=rounds)
        return 2 * sigma, None

    def compose(self, events, *, delta):
        return get_accountant("rdp").compose(events, delta=delta)

    def reference(self):
        return get_accountant("rdp").reference()


def test_a_new_accountant_is_one_class_and_one_registration(monkeypatch):
    from hdp_planner import plan
    from hdp_planner.accounting import accountants

    monkeypatch.setitem(accountants.REGISTRY, "doubled", _Doubled())
    rdp_sigma = calibrate_sigma(epsilon=1.5, delta=1e-5, q=0.05, rounds=50)
    sigma = calibrate_sigma(epsilon=1.5, delta=1e-5, q=0.05, rounds=50, accountant="doubled")
    assert sigma == pytest.approx(2 * rdp_sigma)
    p = plan([0.5, 1.5, 3.0], n=6000, accountant="doubled")
    gdpfed = p.method("GDPFed")
    for e, s, q in zip(gdpfed.epsilon, gdpfed.noise_multiplier, gdpfed.q):
        assert s == pytest.approx(2 * calibrate_sigma(epsilon=e, delta=p.config.delta, q=q, rounds=50), rel=1e-9)
    assert all(spent < e for spent, e in zip(gdpfed.epsilon_spent, gdpfed.epsilon))
