"""What every registered accountant promises, run over the registry itself: an accountant added with
``register_accountant`` is held to the same laws without a line here.

Laws: ε never below dp-accounting's where both measure the same mechanism, nor below the sampled Gaussian's true ε
in either direction (adding or removing a client); ε does not fall as q or T grow, nor rise
as σ grows; a calibrated σ meets its target, and a slightly smaller one does not; rounds of several kinds compose
to at least each part; the ledger, composing rounds recorded as planned by an accountant, never reports less than
that accountant's spending accountant. The draws keep each accountant to seconds (the PLD accountant builds a
distribution per point, and dp-accounting measures the distributed accountant's 1,558 orders slowly: fewer draws);
``HYPOTHESIS_PROFILE=explore`` draws new ones each run.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner.accounting.accountants import accountant_names, get_accountant
from hdp_planner.accounting.calibration import dp_event, quiet_dp_accounting
from hdp_planner.ledger.composition import GroupRound, compose

NAMES = accountant_names()
DRAWS = {"pld": 2}
"""Draws per property where an accountant is slow (default 10)."""
REFERENCE_DRAWS = {"pld": 2, "ddg": 2}
"""Draws where dp-accounting is slow to measure (its RDP at ddg's 1,502 orders: seconds)."""
MINIMAL = {"rdp": 1e-6, "pld": 3e-3, "ddg": 1e-7}
"""How far below a calibrated σ the target must already be missed (relative); 1e-2 for an accountant not listed."""

sigmas = st.floats(0.7, 4.0)
rates = st.floats(0.005, 0.2)
rounds_ = st.integers(1, 20)
deltas = st.sampled_from([1e-3, 1e-5, 1e-7])
budgets = st.floats(0.3, 8.0)


def law(name, draws=DRAWS):
    """The hypothesis settings of one accountant's property."""
    return settings(max_examples=draws.get(name, 10), deadline=None)


def eps(name, sigma, q, rounds, delta):
    return float(get_accountant(name).epsilons(np.array([sigma]), np.array([q]), rounds=rounds, delta=delta)[0])


def run(name, body, draws=DRAWS):
    """Run a property for one accountant with that accountant's number of draws."""
    law(name, draws)(body)()


@pytest.mark.parametrize("name", NAMES)
def test_registered_under_its_own_name_and_measured_by_a_registered_one(name):
    acc = get_accountant(name)
    assert acc.name == name and acc.spending in NAMES and get_accountant(acc.spending).spending == acc.spending
    assert not get_accountant(acc.spending).rule


@pytest.mark.parametrize("name", NAMES)
def test_never_below_dp_accounting(name):
    acc = get_accountant(name)

    @given(sigma=sigmas, q=rates, rounds=rounds_, delta=deltas)
    def body(sigma, q, rounds, delta):
        with quiet_dp_accounting():
            reference = float(acc.reference().compose(dp_event(sigma, q=q, rounds=rounds)).get_epsilon(delta))
        assert eps(name, sigma, q, rounds, delta) >= reference * (1 - 1e-9) - 1e-12

    run(name, body, REFERENCE_DRAWS)


@pytest.mark.parametrize("name", NAMES)
def test_never_below_the_sampled_gaussians_privacy_adding_or_removing_a_client(name):
    """The sampled Gaussian's true ε, both directions (a client added to the sample, and one removed), is at least
    dp-accounting's optimistic PLD estimate (every discretization and truncation error towards less ε): an accountant
    that bounds one direction only, or rounds the wrong way, falls below it."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    @given(sigma=sigmas, q=rates, rounds=rounds_, delta=deltas)
    def body(sigma, q, rounds, delta):
        lower = pld.from_gaussian_mechanism(sigma, pessimistic_estimate=False, sampling_prob=q,
                                            value_discretization_interval=1e-3)  # fmt: skip
        assert eps(name, sigma, q, rounds, delta) >= lower.self_compose(rounds).get_epsilon_for_delta(delta) - 1e-12

    run(name, body, {"pld": 2, "ddg": 4})


@pytest.mark.parametrize("name", NAMES)
def test_monotone_in_sigma_q_and_rounds(name):
    @given(sigma=sigmas, q=rates, rounds=rounds_, delta=deltas, more=st.floats(1.01, 2.0), extra=st.integers(1, 10))
    def body(sigma, q, rounds, delta, more, extra):
        base = eps(name, sigma, q, rounds, delta)
        tol = 1e-9 * base + 1e-12
        assert eps(name, sigma * more, q, rounds, delta) <= base + tol
        assert eps(name, sigma, min(q * more, 1.0), rounds, delta) >= base - tol
        assert eps(name, sigma, q, rounds + extra, delta) >= base - tol

    run(name, body)


@pytest.mark.parametrize("name", NAMES)
def test_calibration_meets_its_target_and_is_nearly_minimal(name):
    acc = get_accountant(name)
    spending = acc.spending

    @given(epsilon=budgets, q=rates, rounds=rounds_, delta=deltas)
    def body(epsilon, q, rounds, delta):
        sigma = float(acc.calibrate_sigmas(np.array([epsilon]), delta=delta, q=np.array([q]), rounds=rounds)[0][0])
        if acc.rule:  # a rule's σ is never planned below its spending accountant's
            exact = get_accountant(spending)
            sigma = max(
                sigma, float(exact.calibrate_sigmas([epsilon], delta=delta, q=np.array([q]), rounds=rounds)[0][0])
            )
        assert eps(spending, sigma, q, rounds, delta) <= epsilon
        smaller = sigma * (1 - MINIMAL.get(name, 1e-2))
        if not acc.rule and smaller > 1e-3:  # the range's floor: σ = 10⁻³ may already meet the target
            assert eps(spending, smaller, q, rounds, delta) > epsilon

    run(name, body)


@pytest.mark.parametrize("name", NAMES)
def test_groups_calibrated_together_each_meet_their_target_as_alone(name):
    """A plan calibrates its groups in one call: each group's σ is the one it gets alone, and the ε the calibration
    reports spent (where it measures it) is the accountant's own ε at that σ."""
    acc = get_accountant(name)

    @given(groups=st.lists(st.tuples(budgets, rates), min_size=2, max_size=3), rounds=rounds_, delta=deltas)
    def body(groups, rounds, delta):
        eps_, q = np.array([e for e, _ in groups]), np.array([x for _, x in groups])
        sigma, spent = acc.calibrate_sigmas(eps_, delta=delta, q=q, rounds=rounds)
        for m, (e, qm) in enumerate(groups):
            alone = acc.calibrate_sigmas(np.array([e]), delta=delta, q=np.array([qm]), rounds=rounds)[0][0]
            assert sigma[m] == pytest.approx(alone, rel=1e-6)
        if spent is not None:
            assert spent == pytest.approx(acc.epsilons(sigma, q, rounds=rounds, delta=delta), rel=1e-9)
            assert np.all(spent <= eps_)

    run(name, body, {"pld": 1, "ddg": 3})


@pytest.mark.parametrize("name", NAMES)
def test_composition_of_mixed_rounds_is_never_below_either_part(name):
    acc = get_accountant(name)

    @given(first=st.tuples(sigmas, rates, rounds_), second=st.tuples(sigmas, rates, rounds_), delta=deltas)
    def body(first, second, delta):
        alone = [acc.compose([event], delta=delta) for event in (first, second)]
        both = acc.compose([first, second], delta=delta)
        assert both >= max(alone) * (1 - 1e-9) - 1e-12
        assert alone[0] == pytest.approx(eps(name, *first, delta), rel=1e-6, abs=1e-12)

    run(name, body)


def recorded(name, sigma, q):
    """One round as the ledger records a round planned by ``name``: the sampled Gaussian, tagged with the spending
    accountant, or, for an accountant of the distributed discrete Gaussian (one with τ·d'), that release."""
    acc = get_accountant(name)
    return GroupRound(q=q, noise_multiplier=sigma, tau_d=getattr(acc, "tau_d", None), accountant=acc.spending)


@pytest.mark.parametrize("name", NAMES)
def test_the_ledger_never_reports_less_than_the_spending_accountant(name):
    """What the ledger composes (one kind of round, and two kinds mixed) is at least what the accountant that
    measures the plan's σ says they spend: the ledger never lets a client spend beyond the plan's own accounting."""
    spending = get_accountant(get_accountant(name).spending)

    @given(first=st.tuples(sigmas, rates, rounds_), second=st.tuples(sigmas, rates, rounds_), delta=deltas)
    def body(first, second, delta):
        (s1, q1, t1), (s2, q2, t2) = first, second
        alone = compose({recorded(name, s1, q1): t1}, delta)
        assert alone >= eps(spending.name, s1, q1, t1, delta) * (1 - 1e-9) - 1e-12
        mixed = {recorded(name, s1, q1): t1}
        mixed[recorded(name, s2, q2)] = mixed.get(recorded(name, s2, q2), 0) + t2  # the same kind twice: one count
        assert compose(mixed, delta) >= spending.compose([first, second], delta=delta) * (1 - 1e-9) - 1e-12

    run(name, body)


@pytest.mark.parametrize("name", NAMES)
def test_no_client_sampled_spends_nothing(name):
    """1 − Π(1 − q)^T ≤ δ: (0, δ)-DP whatever σ, alone and composed."""
    acc = get_accountant(name)
    assert eps(name, 0.01, 1e-7, 10, 1e-5) == 0.0
    assert acc.compose([(0.01, 1e-7, 10), (0.02, 2e-7, 5)], delta=1e-5) == 0.0
    assert math.isfinite(acc.compose([(1.0, 0.05, 3)], delta=1e-5)) and acc.compose([], delta=1e-5) == 0.0
