"""One group's noise law under secure aggregation as a record (:class:`GroupLaw`): the numbers a client sizes its share
from and checks a round against, without the probability computations that derive them (:mod:`.law`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hdp_planner.distributed.encoding import Encoding


@dataclass(frozen=True, kw_only=True)
class GroupLaw:
    """Group m's law: grid (``encoding.gamma``), share σ²_s, threshold t, released shares N; ``noise_multiplier``
    the calibrated z against third parties; ``event_rate`` the δ each round's law-breaking events cost; ``release``
    the probability that a round releases with F of its sampled clients surviving."""

    encoding: Encoding
    share_sigma2: int
    threshold: int
    shares: int
    colluders: int
    noise_multiplier: float
    event_rate: float
    release: float
    wrap_bound: float

    @property
    def third_party_multiplier(self) -> float:
        """z met against third parties and colluders: √((N − k)·σ²_s)/Δ₂ ≥ the calibrated z."""
        return math.sqrt((self.shares - self.colluders) * self.share_sigma2) / self.encoding.norm_bound

    def server_multiplier(self, least_share: int, *, groups: int = 1) -> float:
        """z against the server: √(⌈(t − k)/M⌉·σ²_least)/Δ₂. A run holds at least t − k honest shares, possibly of M
        groups mixed by a malicious server; one group has ⌈(t − k)/M⌉ of them, of σ² ≥ σ²_least (the smallest share
        of any group), and the others' shares are at worst known to the server (trust-model page)."""
        honest = math.ceil((self.threshold - self.colluders) / groups)
        return math.sqrt(honest * least_share) / self.encoding.norm_bound

    def run_threshold(self, clients: int) -> int:
        """SecAgg+'s reconstruction threshold for a run of ``clients``: max(t, ⌊c/2⌋ + 1), a strict majority (Flower's
        SecAgg+ has no consistency round) and never below the plan's t."""
        return max(self.threshold, clients // 2 + 1)

    def delta_accounted(self, delta: float, *, rounds: int) -> float:
        """δ left for the accountant after ``rounds`` rounds: δ minus the law-breaking events' cost."""
        return delta - rounds * self.event_rate
