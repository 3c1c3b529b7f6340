"""What happens, apart from how it is measured (as dp-accounting keeps events apart from accountants): an event is
T rounds of the Gaussian mechanism, noise multiplier σ, on a Poisson sample of rate q. The accountants
(:mod:`.accountants`) measure events and compositions of them; :func:`dp_event` describes one to dp-accounting, the
reference they are tested against."""

from __future__ import annotations

__all__ = ["Event", "dp_event"]

Event = tuple[float, float, int]
"""(σ, q, T): T rounds of the mechanism at noise multiplier σ on a Poisson sample of rate q."""


def dp_event(noise_multiplier: float, *, q: float, rounds: int):
    """``rounds`` Poisson(q)-sampled Gaussian(σ) steps as a dp-accounting event, unvalidated (dp-accounting's
    own calibration probes σ = 0); :class:`~hdp_planner.accounting.calibration.GaussianRounds` is the validated
    description."""
    import dp_accounting as dpa

    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(noise_multiplier)), rounds)
