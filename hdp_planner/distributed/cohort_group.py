"""One group's round with its participation hidden from the server, as a record (:class:`CohortGroup`): the numbers a
cohort member checks the server's announcement against and flips its coin with (chosen by
:mod:`hdp_planner.trust.cohort_rows`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class CohortGroup:
    """One group's hidden-participation round: ``cohort`` m public members, each contributing with probability
    ``coin`` p, at most ``memberships`` K cohorts per client, reconstruction threshold ``threshold`` t, noise
    multiplier z of the honest shares, the ε that z spends against the server, and the decoded noise's effective
    multiplier (√(per-coordinate error variance of the sum)/C_m: every member's share, rounding, wrap-around).
    ``expected_contributors`` is r = m·p, the expected number of heads (GDPFed's r_m)."""

    cohort: int
    coin: float
    expected_contributors: float
    memberships: int
    threshold: int
    noise_multiplier: float
    epsilon_server: float
    effective_noise_multiplier: float
