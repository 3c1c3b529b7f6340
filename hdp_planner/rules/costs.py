"""What one group's release of one round costs its members (:class:`GroupRound`), as the plan, the ledger and a node's
own count record it; the accountants (:mod:`hdp_planner.accounting`) measure it, and this module imports none of them
(a node reads the costs back without loading an accountant)."""

from __future__ import annotations

from dataclasses import dataclass


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
