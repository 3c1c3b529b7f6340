"""What happens, apart from how it is measured (as dp-accounting keeps events apart from accountants): an event is
T rounds of the Gaussian mechanism, noise multiplier σ, on a Poisson sample of rate q. The accountants
(:mod:`.accountants`) measure events and compositions of them; :func:`dp_event` describes one to dp-accounting, the
reference they are tested against."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Event", "GroupRound", "dp_event"]

Event = tuple[float, float, int]
"""(σ, q, T): T rounds of the mechanism at noise multiplier σ on a Poisson sample of rate q."""


def dp_event(noise_multiplier: float, *, q: float, rounds: int):
    """``rounds`` Poisson(q)-sampled Gaussian(σ) steps as a dp-accounting event, unvalidated (dp-accounting's
    own calibration probes σ = 0); :class:`~hdp_planner.accounting.calibration.GaussianRounds` is the validated
    description."""
    import dp_accounting as dpa

    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(noise_multiplier)), rounds)


@dataclass(frozen=True, kw_only=True)
class GroupRound:
    """What one group's release of one round costs its members: a Poisson(q)-sampled Gaussian of multiplier σ, or,
    with ``tau_d``, a distributed discrete Gaussian sum of multiplier z and Proposition 14's τ·d'. ``accountant``:
    the registered accountant that planned it (its spending accountant). ``delta_cost``: the δ the round spends
    outside any accountant, the law-breaking events of a distributed round (:attr:`~hdp_planner.distributed.law.
    GroupLaw.event_rate`: the release is (ε, δ')-DP by the accountant and those events add their probability)."""

    q: float
    noise_multiplier: float
    tau_d: float | None = None
    accountant: str = "rdp"
    delta_cost: float = 0.0
