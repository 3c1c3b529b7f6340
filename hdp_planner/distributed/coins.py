"""Running a round with public cohorts and private coins (:mod:`.cohorts`), written once for the simulator and Flower.

The server's side is :func:`choose_cohort` (who is named); the client's side is :func:`admits` (the membership cap
K it enforces itself) and :func:`flip` (its private coin). A member's coin enters its message in one place only:
the conditionally rounded update is multiplied by the coin (1 heads, 0 tails) before the noise share is added
(:func:`~.encoding.integer_message`), so heads and tails run the same code on vectors of the same size, and both
train before it. The proof that this hides the coin from the server is on the documentation's hidden-participation
page.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from hdp_planner.distributed.randomness import Bits, below

COIN_BITS = 53
"""A coin compares a uniform integer below 2^53 with ⌊p·2^53⌋: heads with probability ⌊p·2^53⌋/2^53 ≤ p (never
above the planned rate, which only lowers the ε against the server)."""


class Uniforms(Protocol):
    """``random(size)``: uniform floats on [0, 1) (a numpy Generator, or the OS's CSPRNG)."""

    def random(self, size: int) -> np.ndarray: ...


def flip(coin: float, bits: Bits) -> bool:
    """One member's private coin: heads with probability ``coin`` (at most), from ``bits`` (the OS's CSPRNG in a
    deployment; never from a seed the server gives)."""
    if not 0 <= coin <= 1:
        raise ValueError(f"a coin's probability must lie in [0, 1], got {coin}")
    return int(below(bits, 1 << COIN_BITS, 1)[0]) < math.floor(coin * (1 << COIN_BITS))


def choose_cohort(used: np.ndarray, cohort: int, rng: Uniforms) -> np.ndarray:
    """The honest server's cohort of a group: ``cohort`` local indices drawn uniformly at random among the clients
    with the fewest memberships ``used`` so far (then the next fewest, and so on). This random rotation keeps every
    client's count within one of every other's, so T rounds of m members give each at most ⌈T·m/|G|⌉ = K and no
    round ever lacks members with memberships left. The guarantee does not rest on this choice (the clients
    enforce K, :func:`admits`)."""
    used = np.asarray(used)
    if not 1 <= cohort <= used.size:
        raise ValueError(f"a cohort of {cohort} from a group of {used.size}")
    order = np.lexsort((rng.random(used.size), used))
    return np.sort(order[:cohort])


def admits(*, used: int, memberships: int, announced: int, cohort: int) -> bool:
    """A client's check before it joins a cohort: fewer than K ``memberships`` ``used`` so far, and the announced
    cohort size equal to the plan's (a smaller cohort would hold fewer honest noise shares)."""
    return used < memberships and announced == cohort
