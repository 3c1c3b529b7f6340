"""Calibration at the edges: small ε (PLD discretization), tiny q (the KL branch), budgets met by any σ
(1 − (1 − q)^T ≤ δ), vacuous δ = 1 and q = 1 up to float rounding. References: dp-accounting's own calibration."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import time

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.accounting.calibration import GaussianRounds as Rounds
from hdp_planner.accounting.calibration import dp_event, reference_kl_refuted
from hdp_planner.accounting.pld import (
    ROUNDOFF_SHARE,
    discretization,
    grid_interval,
    never_sampled_bound,
    pld_epsilon,
    roundoff_mass,
)
from hdp_planner.accounting.rdp import SIGMA_MIN, calibrate_sigma_rdp, kl_certifies_zero, low_order_rdp_bounds

EDGES = {
    "eps": st.floats(-2.5, math.log10(50)).map(lambda x: 10**x),
    "delta": st.floats(-12.0, -3.0).map(lambda x: 10**x),
    "q": st.floats(-7.0, 0.0).map(lambda x: 10**x),
    "rounds": st.integers(1, 100_000),
}
"""The budgets the calibration must handle: ε 0.003-50, δ 1e-12-1e-3, q 1e-7-1, T 1-1e5 (log-uniform)."""


def _quiet() -> None:
    logging.getLogger().setLevel(logging.ERROR)  # dp-accounting's "failed to converge … Excluding this order"


def pld_eps(sigma: float, q: float, rounds: int, delta: float, v: float) -> float:
    """dp-accounting's PLDAccountant at discretization v, called directly."""
    from dp_accounting.pld import PLDAccountant

    return float(
        PLDAccountant(value_discretization_interval=v).compose(dp_event(sigma, q=q, rounds=rounds)).get_epsilon(delta)
    )


def rdp_eps(sigma: float, q: float, rounds: int, delta: float) -> float:
    from dp_accounting.rdp import RdpAccountant

    _quiet()
    return float(RdpAccountant().compose(dp_event(sigma, q=q, rounds=rounds)).get_epsilon(delta))


def reference_sigma(
    eps: float, delta: float, q: float, rounds: int, v: float | None = None, bracket: tuple[float, float] | None = None
) -> float:
    """dp-accounting's calibrate_dp_mechanism: RDP, or PLD at discretization v; searching from [0, 1] as
    dp-accounting does by default, or inside ``bracket`` (which must hold the root: else ValueError)."""
    import dp_accounting as dpa
    from dp_accounting.mechanism_calibration import ExplicitBracketInterval
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    _quiet()
    make = RdpAccountant if v is None else (lambda: PLDAccountant(value_discretization_interval=v))
    interval = None if bracket is None else ExplicitBracketInterval(*bracket)
    return float(dpa.calibrate_dp_mechanism(make, lambda s: dp_event(s, q=q, rounds=rounds), eps, delta, interval))


# ------------------------------------------------------------------------------------------------ small ε, PLD


@pytest.mark.parametrize(
    ("eps", "rdp_sigma"),
    [pytest.param(0.01, 88.8, marks=pytest.mark.slow), (0.05, 20.6)],  # reference: 50 s, 0.3 s
)
def test_pld_at_small_epsilon_is_below_rdp_and_matches_dp_accounting(eps, rdp_sigma):
    """The issue's table (δ = 1e-5, q = 0.01, T = 1000): PLD gave 589.3 and 40.3, above RDP's σ."""
    delta, q, rounds = 1e-5, 0.01, 1000
    sigma, sigma_rdp = (
        calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="pld"),
        calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="rdp"),
    )
    assert sigma_rdp == pytest.approx(rdp_sigma, rel=5e-3)
    v = discretization(eps, delta=delta, rounds=rounds)
    assert v < 1e-4  # chosen from ε: finer than the default where ε is small
    assert pld_eps(sigma, q, rounds, delta, v) <= eps  # never below what the budget needs
    assert sigma < sigma_rdp
    fine = reference_sigma(eps, delta, q, rounds, v / 2)
    assert sigma == pytest.approx(fine, rel=0.01)


def test_discretization_is_the_default_on_the_papers_settings():
    for eps in (0.5, 1.5, 3.0):
        assert discretization(eps, delta=6000**-1.1, rounds=50) == 1e-4
    assert discretization(0.01, delta=1e-5, rounds=1000) < discretization(0.1, delta=1e-5, rounds=1000) < 1e-4
    assert discretization(0.1, delta=1e-5, rounds=100_000) < discretization(0.1, delta=1e-5, rounds=1000)


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(**EDGES)
def test_pld_sweep_against_dp_accounting_at_a_fine_discretization(eps, delta, q, rounds):
    try:
        sigma_rdp = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    except ValueError:
        return  # beyond σ = 1e12: refused by RDP, and so by PLD
    sigma = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="pld")
    assert sigma <= sigma_rdp
    if never_sampled_bound(q, rounds=rounds) <= delta:
        assert sigma == SIGMA_MIN
        return
    v = discretization(eps, delta=delta, rounds=rounds)
    if roundoff_mass(noise_multiplier=sigma / 1.01, q=q, rounds=rounds, discretization=v) > ROUNDOFF_SHARE * delta:
        return  # δ(ε) carries the FFT's round-off here (dp-accounting's too): ours allows for it, the reference not
    if sigma < sigma_rdp:
        assert pld_eps(sigma, q, rounds, delta, v) <= eps
    # the finer reference's root lies in [σ/1.01, σ·1.01] (ValueError from its search otherwise); searching
    # only there keeps it off the small σ whose grids at a fine discretization are huge
    fine = reference_sigma(eps, delta, q, rounds, v / 2, (sigma / 1.01, sigma * 1.01))
    assert fine == pytest.approx(sigma, rel=0.01)


# ----------------------------------------------------------------------------------------------- tiny q, RDP


@pytest.mark.parametrize(
    ("eps", "delta", "q", "rounds"),
    [(0.003, 1e-4, 1e-5, 50), (0.03, 1e-9, 1e-7, 50), (0.01, 1e-4, 1e-3, 1), (0.003, 1e-4, 1e-3, 1000)],
)
def test_rdp_at_tiny_q_matches_dp_accounting(eps, delta, q, rounds):
    """These raised "did not converge" or "not reachable" (dp-accounting reaches ε = 0 by its KL branch)."""
    sigma = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert sigma == pytest.approx(reference_sigma(eps, delta, q, rounds), rel=0.01)
    assert rdp_eps(sigma, q, rounds, delta) <= eps or kl_certifies_zero([(sigma, q, rounds)], delta)


def test_rdp_where_the_kl_branch_decides_matches_dp_accounting():
    """At δ² ≈ 1e-12·T the KL branch decides; the closed-form bound of order 1.1 gives dp-accounting's answer."""
    eps, delta, q, rounds = 0.01, 1e-6, 1e-7, 50
    sigma, ref = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds), reference_sigma(eps, delta, q, rounds)
    assert sigma == pytest.approx(ref, rel=1e-6)
    assert kl_certifies_zero([(sigma, q, rounds)], delta)


@pytest.mark.parametrize(("eps", "delta", "q", "rounds"), [(0.003, 1e-9, 1e-5, 1000), (0.003, 1e-9, 1e-7, 1000)])
def test_rdp_above_dp_accounting_only_where_its_kl_verdict_is_float_noise(eps, delta, q, rounds):
    """There dp-accounting's ε = 0 comes from orders whose true RDP is provably above the threshold δ² (its sums
    round to less); ours stays at the smallest σ the closed-form bound certifies."""
    sigma, ref = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds), reference_sigma(eps, delta, q, rounds)
    assert sigma > 1.05 * ref
    assert rdp_eps(ref, q, rounds, delta) == 0.0
    assert reference_kl_refuted(Rounds(noise_multiplier=ref, q=q, rounds=rounds), delta=delta)
    assert kl_certifies_zero([(sigma, q, rounds)], delta)
    assert not kl_certifies_zero([(sigma * (1 - 1e-5), q, rounds)], delta)


def test_rdp_below_dp_accounting_where_its_fractional_orders_overestimate():
    """dp-accounting sums the fractional orders' series in absolute value, an over-estimate (here 330x at order 1.1);
    the closed-form bound certifies ε = 0 at a σ 26% smaller."""
    eps, delta, q, rounds = 0.003, 1e-6, 1e-3, 50
    sigma, ref = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds), reference_sigma(eps, delta, q, rounds)
    assert sigma < 0.75 * ref
    assert kl_certifies_zero([(sigma, q, rounds)], delta)


def _rdp_mpmath(q: float, sigma: float, order: float) -> float:
    """The sampled Gaussian's RDP, log E_{N(0,σ²)}[(1 − q + qL)^α]/(α − 1), by 40-digit quadrature."""
    with mp.workdps(40):
        qm, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(order)
        f = lambda u: mp.npdf(u) * (1 - qm + qm * mp.exp((2 * u * s - 1) / (2 * s**2))) ** a  # noqa: E731
        return float(mp.log(mp.quad(f, [-mp.inf, -10, 0, 10, mp.inf])) / (a - 1))


@settings(max_examples=8, deadline=None)
@given(q=st.floats(-7.0, -0.3).map(lambda x: 10**x), sigma=st.floats(-0.5, 5.0).map(lambda x: 10**x))
def test_low_order_rdp_bounds_bracket_the_exact_rdp(q, sigma):
    lower, upper = low_order_rdp_bounds(np.array(q), np.array(sigma))
    for k, order in ((0, 1.1), (4, 1.5), (9, 2.0)):
        exact = _rdp_mpmath(q, sigma, order)
        assert lower[k] <= exact * (1 + 1e-9) and exact <= upper[k] * (1 + 1e-9)


@settings(max_examples=4, deadline=None)
@given(**EDGES)
def test_rdp_sigma_meets_the_budget_or_is_refused_in_one_line(eps, delta, q, rounds):
    try:
        sigma = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    except ValueError as exc:
        assert "not reachable" in str(exc) and "\n" not in str(exc)
        return
    assert rdp_eps(sigma, q, rounds, delta) <= eps or kl_certifies_zero([(sigma, q, rounds)], delta)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(**EDGES)
def test_rdp_sweep_against_calibrate_dp_mechanism(eps, delta, q, rounds):
    """Within 1% of dp-accounting, except below it where the closed-form bound certifies ε = 0 (its fractional
    orders over-estimate) and above it where its own ε = 0 is refuted (float noise)."""
    try:
        ref = reference_sigma(eps, delta, q, rounds)
    except Exception:  # dp-accounting's bracket search stops at 2^30
        return
    sigma = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    assert sigma >= ref * 0.99 or kl_certifies_zero([(sigma, q, rounds)], delta)
    assert sigma <= ref * 1.01 or reference_kl_refuted(Rounds(noise_multiplier=ref, q=q, rounds=rounds), delta=delta)


# ---------------------------------------------------------------------------- budgets that any σ meets


def test_never_sampled_bound():
    assert never_sampled_bound(1.0, rounds=3) == 1.0
    assert never_sampled_bound(1e-9, rounds=1000) == pytest.approx(1e-6, rel=1e-6)
    assert never_sampled_bound(0.5, rounds=2) == pytest.approx(0.75)


@settings(max_examples=50, deadline=None)
@given(
    q=st.floats(-9.0, -3.0).map(lambda x: 10**x),
    rounds=st.integers(1, 100_000),
    eps=st.floats(0.003, 50.0),
    delta=st.floats(-12.0, -1.0).map(lambda x: 10**x),
)
def test_both_accountants_answer_at_once_where_any_sigma_meets_the_budget(q, rounds, eps, delta):
    if never_sampled_bound(q, rounds=rounds) > delta:
        return
    t = time.process_time()  # the work done, not the wall clock of a shared machine
    assert calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="pld") == SIGMA_MIN
    assert calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="rdp") == SIGMA_MIN
    assert pld_epsilon(noise_multiplier=SIGMA_MIN, q=q, rounds=rounds, delta=delta) == 0.0
    assert (
        epsilon_spent(GaussianRounds(noise_multiplier=SIGMA_MIN, q=q, rounds=rounds), delta=delta, accountant="pld")
        == 0.0
    )
    assert (
        epsilon_spent(GaussianRounds(noise_multiplier=SIGMA_MIN, q=q, rounds=rounds), delta=delta, accountant="rdp")
        == 0.0
    )
    assert time.process_time() - t < 0.05


def test_pld_where_any_sigma_meets_the_budget_is_a_true_bound():
    """Where 1 − (1 − q)^T ≤ δ, dp-accounting's own PLD says ε = 0 too, at any σ it can build."""
    q, rounds, delta = 1e-5, 3, 1e-4
    assert never_sampled_bound(q, rounds=rounds) <= delta
    for sigma in (0.5, 2.0, 20.0):
        assert pld_eps(sigma, q, rounds, delta, 1e-3) == 0.0


_CAPPED = """
import resource, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from hdp_planner import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
t = time.perf_counter()
for eps, delta, q, rounds in [(1.0, 1e-4, 1.6e-5, 3), (0.5, 1e-5, 8e-9, 50), (0.003, 1e-4, 1e-7, 1000)]:
    for accountant in ("pld", "rdp"):
        s = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant=accountant)
        mechanism = GaussianRounds(noise_multiplier=s, q=q, rounds=rounds)
        assert epsilon_spent(mechanism, delta=delta, accountant=accountant) <= eps
print(f"{time.perf_counter() - t:.3f}")
"""


def test_degenerate_cases_run_fast_under_a_memory_cap():
    """The starved rows that ran to MemoryError (IDP-FedAvg-Sample at q = 1.6e-5, T = 3; a group at q = 8e-9):
    answered in well under a second inside 1 GiB of address space."""
    out = subprocess.run([sys.executable, "-c", _CAPPED], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout) < 2.0


# -------------------------------------------------------------------------------------- wrong refusals


def test_q_one_up_to_float_rounding_is_one():
    q = 1.0000000000000004  # e.g. Σ r_m / n: float rounding of 1
    assert q > 1
    for accountant in ("rdp", "pld", "closed-form"):
        sigma = calibrate_sigma(epsilon=1.0, delta=1e-5, q=q, rounds=10, accountant=accountant)
        assert sigma == pytest.approx(
            calibrate_sigma(epsilon=1.0, delta=1e-5, q=1.0, rounds=10, accountant=accountant), rel=1e-12
        )
    with pytest.raises(ValueError, match="q"):
        calibrate_sigma(epsilon=1.0, delta=1e-5, q=1.001, rounds=10)


def test_delta_one_is_met_by_any_sigma():
    """One client in total: δ = 1/n^1.1 = 1, a vacuous budget."""
    assert calibrate_sigma(epsilon=0.5, delta=1.0, q=0.3, rounds=50, accountant="pld") == SIGMA_MIN
    assert calibrate_sigma(epsilon=0.5, delta=1.0, q=0.3, rounds=50, accountant="rdp") == SIGMA_MIN
    for accountant in ("rdp", "pld"):
        assert (
            epsilon_spent(GaussianRounds(noise_multiplier=1.0, q=0.3, rounds=50), delta=1.0, accountant=accountant)
            == 0.0
        )
    assert calibrate_q(epsilon=0.5, delta=1.0, noise_multiplier=1.0, rounds=50) == 1.0


def test_calibrate_q_where_rdp_has_no_answer_falls_back_to_the_never_sampled_bound():
    """ε = 0.995 at δ = 1.54e-9 and σ = 0.3: RDP gives ε ≥ 3.8 at every q ≥ 1e-12 (this aborted whole plans);
    below q = 1 − (1 − δ)^(1/T) the mechanism is (0, δ)-DP whatever σ."""
    eps, delta, sigma, rounds = 0.995, 1.54e-9, 0.3, 1000
    q = calibrate_q(epsilon=eps, delta=delta, noise_multiplier=sigma, rounds=rounds)
    assert q == pytest.approx(delta / rounds, rel=1e-6)
    assert never_sampled_bound(q, rounds=rounds) <= delta
    assert calibrate_q(epsilon=eps, delta=delta, noise_multiplier=5.0, rounds=50) > 0.1  # RDP's answer where it has one


def test_time_adaptive_schedule_crosses_the_kl_branch():
    """`solve --eps 0.1,0.5,5 --n 100000 -T 3 --q 0.0001 --methods all` ended in an OverflowError: the secant on
    the schedule's ε stepped across the jump to ε = 0; the bracketing fallback finishes."""
    from hdp_planner.accounting.schedule import calibrate_schedule, schedule_epsilon

    delta, q = 100_000**-1.1, 1e-4
    save, spend = calibrate_schedule(epsilon=0.1, delta=delta, q=q, rounds=3, saving_rounds=1, saving_noise=2.0)
    assert save == 2 * spend
    assert 0.099 < schedule_epsilon([(1, save), (2, spend)], q=q, delta=delta) <= 0.1


@pytest.mark.slow
def test_pld_with_huge_grids_stays_bounded():
    """ε = 0.0042, δ = 4.5e-7, q = 2.8e-7, T = 49,683: the root (σ ≈ 0.49) needs per-round grids of ~10⁷ points at
    the fine interval, composed 49,683 times (minutes each); there the grid is built on the finest coarser interval
    whose composition fits the limit (a valid, looser bound), found in seconds, far below RDP's σ (103). dp-accounting
    at an interval 4 times finer than ours puts its own calibration within 1% below ours (the calibration docs)."""
    eps, delta, q, rounds = 0.004246, 4.5e-07, 2.8e-07, 49683
    t = time.perf_counter()
    sigma = calibrate_sigma(epsilon=eps, delta=delta, q=q, rounds=rounds, accountant="pld")
    assert time.perf_counter() - t < 60
    assert 0.49 < sigma < 0.50
    v = grid_interval(sigma, q=q, rounds=rounds, discretization=discretization(eps, delta=delta, rounds=rounds))
    assert v is not None and v > discretization(eps, delta=delta, rounds=rounds)  # coarser than the fine interval
    assert pld_eps(sigma, q, rounds, delta, v) <= eps  # dp-accounting's own PLD on that grid


def test_a_grid_too_fine_for_the_limit_is_built_coarser():
    """Where MAX_WORK/√T binds (128 times the fine interval here), the grid is refined while its T-fold composition is
    measured to fit MAX_COMPOSED; a smaller σ (wider losses) needs a coarser grid."""
    from hdp_planner.accounting.pld import COARSER_STEPS, MAX_POINTS, MAX_WORK

    v = discretization(0.0039, delta=1.4e-10, rounds=83888)
    assert grid_interval(2.0, q=4.6e-7, rounds=83888, discretization=v) == v  # fits: the fine interval itself
    coarser = grid_interval(0.71, q=4.6e-7, rounds=83888, discretization=v)
    assert coarser is not None and v < coarser <= v * 2**COARSER_STEPS
    assert coarser < 128 * v  # refined below the first interval within MAX_WORK/√T
    assert (
        grid_interval(0.8, q=4.6e-7, rounds=83888, discretization=v)
        < coarser
        < grid_interval(0.6, q=4.6e-7, rounds=83888, discretization=v)
    )
    assert (
        grid_interval(0.05, q=0.5, rounds=83888, discretization=1e-9) is None
    )  # beyond every allowed interval: ε is reported as ∞
    assert min(MAX_POINTS, MAX_WORK / 83888**0.5) < 1e5


def test_pld_refuses_a_delta_below_its_fft_round_off():
    """At δ = 1.1e-12, q = 2.8e-7, T = 11,951 the composed distribution's FFT round-off (its negative mass, about
    5e-11) exceeds δ: two FFTs of the same length gave ε 0.031 and 0.095 at σ = 0.587, where RDP needs σ = 5.8. PLD
    reports ε = ∞ there, so the calibration keeps RDP's σ; at δ = 1e-6 the same composition is resolved, at δ less
    twice the round-off."""
    q, rounds = 2.8e-7, 11951
    v = discretization(0.0323, delta=1.1e-12, rounds=rounds)
    assert roundoff_mass(noise_multiplier=0.587, q=q, rounds=rounds, discretization=v) > 1.1e-12
    assert pld_epsilon(noise_multiplier=0.587, q=q, rounds=rounds, delta=1.1e-12) == math.inf
    assert math.isfinite(pld_epsilon(noise_multiplier=0.587, q=q, rounds=rounds, delta=1e-6))
    sigma = calibrate_sigma(epsilon=0.0323, delta=1.1e-12, q=q, rounds=rounds, accountant="pld")
    assert sigma == calibrate_sigma_rdp(epsilon=0.0323, delta=1.1e-12, q=q, rounds=rounds)
