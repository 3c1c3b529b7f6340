"""Running a round with public cohorts and private coins: the member's coin is heads exactly below its rate, the
server names its cohort among the least used members, and a member admits a cohort only under its cap and at the
planned size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hdp_planner.distributed.coins import admits, choose_cohort, flip
from hdp_planner.distributed.randomness import SeededBits


class Words:
    """A bits source that returns these 64-bit words first (little-endian), then zeros."""

    def __init__(self, *words: int) -> None:
        self.data = b"".join(w.to_bytes(8, "little") for w in words)

    def bytes(self, size: int) -> bytes:
        out, self.data = self.data[:size], self.data[size:]
        return out + bytes(size - len(out))


def test_a_coin_is_heads_exactly_below_its_rate_on_53_bits():
    """Heads iff the member's uniform integer below 2^53 is below ⌊p·2^53⌋: never above the planned rate."""
    half = 1 << 52
    assert flip(0.5, Words(half - 1)) and not flip(0.5, Words(half))
    assert flip(0.5, Words((1 << 63) + half - 1))  # only the low 53 bits are read
    assert not flip(0.0, Words(0)) and flip(1.0, Words((1 << 53) - 1))
    third = math.floor((1 << 53) / 3)
    assert flip(1 / 3, Words(third - 1)) and not flip(1 / 3, Words(third))
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError) as caught:
            flip(bad, SeededBits(0))
        assert str(caught.value) == f"a coin's probability must lie in [0, 1], got {bad}"


def test_the_server_names_a_cohort_among_the_least_used_members():
    used = np.array([2, 0, 1, 0, 2, 1])
    rng = np.random.default_rng(0)
    assert choose_cohort(used, 2, rng).tolist() == [1, 3]
    assert choose_cohort(used, 6, rng).tolist() == [0, 1, 2, 3, 4, 5]
    picks = [tuple(choose_cohort(used, 3, rng)) for _ in range(200)]
    assert all({1, 3} <= set(p) and set(p) - {1, 3} <= {2, 5} for p in picks)
    assert {tuple(sorted(set(p) - {1, 3})) for p in picks} == {(2,), (5,)}  # the tie broken at random
    for cohort in (0, 7):
        with pytest.raises(ValueError) as caught:
            choose_cohort(used, cohort, rng)
        assert str(caught.value) == f"a cohort of {cohort} from a group of 6"


def test_a_member_admits_a_cohort_only_under_its_cap_and_at_the_planned_size():
    assert admits(used=2, memberships=3, announced=10, cohort=10)
    assert not admits(used=3, memberships=3, announced=10, cohort=10)
    assert not admits(used=0, memberships=3, announced=9, cohort=10)
    assert not admits(used=0, memberships=3, announced=11, cohort=10)
