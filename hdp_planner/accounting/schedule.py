"""Privacy of rounds whose noise changes over time (the time-adaptive baseline, Kiani et al., ICLR 2025).

A schedule is a list of phases (rounds, σ) of the Poisson-subsampled Gaussian at one rate q. Rényi DP composes
additively, so the schedule's RDP at every order α is Σ_phases rounds·RDP_α(q, σ) (Mironov 2017, Prop. 1),
converted to (ε, δ) once, at the end: what dp-accounting's ``RdpAccountant`` does for the ``ComposedDpEvent`` of
the phases (tested to 1e-9), at its default orders, with the per-order curve of one round from
:func:`hdp_planner.accounting.rdp.rdp_curve`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hdp_planner.accounting.calibration import quiet_dp_accounting
from hdp_planner.accounting.rdp import DEFAULT_RDP_ORDERS, SIGMA_MAX, SIGMA_MIN, calibrate_sigma_rdp, rdp_curve
from hdp_planner.accounting.search import smallest_meeting
from hdp_planner.accounting.validation import (
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_ratio,
    check_rounds,
)


def schedule_epsilon(phases: Sequence[tuple[int, float]], *, q: float, delta: float) -> float:
    """ε at ``delta`` after the phases ``(rounds, σ)`` in turn, each round Poisson-sampled at rate ``q`` (RDP)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    q, delta = check_ratio(q), check_delta(delta)
    total = np.zeros(len(DEFAULT_RDP_ORDERS))
    for rounds, sigma in phases:
        if rounds:
            check_rounds(rounds)
            total = total + rounds * rdp_curve(noise_multiplier=check_noise_multiplier(sigma), q=q)
    if not total.any():
        return 0.0
    with quiet_dp_accounting():
        return float(compute_epsilon(DEFAULT_RDP_ORDERS, total, delta)[0])


def truncate(phases: Sequence[tuple[int, float]], rounds: int) -> list[tuple[int, float]]:
    """The first ``rounds`` rounds of a schedule (for the ε spent part-way through training)."""
    out, left = [], rounds
    for length, sigma in phases:
        take = min(length, left)
        if take > 0:
            out.append((take, sigma))
        left -= take
    return out


def calibrate_schedule(
    *, epsilon: float, delta: float, q: float, rounds: int, saving_rounds: int, saving_noise: float
) -> tuple[float, float]:
    """(σ_save, σ_spend): the smallest σ_spend such that ``saving_rounds`` rounds at σ_save = ``saving_noise``·σ_spend,
    then the remaining rounds at σ_spend, spend at most ``epsilon`` over all ``rounds`` (RDP, exact composition), to a
    relative 1e-9 (:func:`~hdp_planner.accounting.search.smallest_meeting` on log σ_spend)."""
    check_epsilon(epsilon)
    check_rounds(rounds)
    if not (isinstance(saving_rounds, int) and 0 <= saving_rounds < rounds):
        raise ValueError(f"saving rounds must be an integer in [0, T) = [0, {rounds}), got {saving_rounds}")
    if not (math.isfinite(saving_noise) and saving_noise >= 1):
        raise ValueError(f"saving noise ratio must be ≥ 1 (more noise while saving), got {saving_noise}")

    def gap(x: float) -> float:  # log ε − log target at σ_spend = e^x, non-increasing in x
        s = math.exp(x)
        e = schedule_epsilon([(saving_rounds, saving_noise * s), (rounds - saving_rounds, s)], q=q, delta=delta)
        return math.log(e / epsilon) if e > 0 else -math.inf

    # start from the constant-σ answer, scaled as Σ_t 1/σ_t² (the small-q RDP of a Gaussian) would be
    x0 = math.log(calibrate_sigma_rdp(epsilon=epsilon, delta=delta, q=q, rounds=rounds))
    x0 += 0.5 * math.log((saving_rounds / saving_noise**2 + rounds - saving_rounds) / rounds)
    found = smallest_meeting(gap, lo=math.log(SIGMA_MIN), hi=math.log(SIGMA_MAX), start=x0, xtol=1e-9, step=0.05)
    if not math.isfinite(found.x):
        raise ValueError(
            f"epsilon={epsilon} is not reachable by the time-adaptive schedule with noise_multiplier ≤ "
            f"{SIGMA_MAX:g} (delta={delta}, q={q}, rounds={rounds})"
        )
    sigma = math.exp(found.x)
    return saving_noise * sigma, sigma
