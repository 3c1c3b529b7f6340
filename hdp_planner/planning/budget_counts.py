"""The budget histogram: the distinct budgets of n clients (ascending) and how many clients hold each.

Grouping (:mod:`hdp_planner.planning.budget_grouping`) needs only this histogram, so its time and memory depend on
the number of distinct budgets, not on n; the histogram itself is streamed over the clients a chunk at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hdp_planner.planning.budget_files import BudgetError

HISTOGRAM_CHUNK = 1 << 18
"""Clients counted at a time by :func:`budget_histogram`."""
HASH_LIMIT = 4096
"""Most distinct budgets :func:`budget_histogram` counts by hashing; beyond, it sorts every chunk."""


@dataclass(frozen=True, kw_only=True)
class _BudgetIndex:
    """A perfect hash of known distinct budgets: slot = (bits · mult) >> shift on each float's 64 bits
    (multiply-shift), ``table[slot]`` the budget's position, -1 where no budget hashes."""

    keys: np.ndarray  # the budgets' bits (uint64), ascending in value
    mult: np.uint64
    shift: np.uint64
    table: np.ndarray

    @classmethod
    def build(cls, values: np.ndarray) -> _BudgetIndex | None:
        """An index of ``values`` (distinct, positive), or None above :data:`HASH_LIMIT` values."""
        if len(values) > HASH_LIMIT:
            return None
        keys = values.view(np.uint64)
        bits = max(8, 2 * max(1, len(values) - 1).bit_length() + 1)  # table ≥ 2K²: a random mult rarely collides
        shift = np.uint64(64 - bits)
        for mult in np.random.default_rng(len(values)).integers(1, 2**63, 64, dtype=np.uint64) | np.uint64(1):
            slots = (keys * mult) >> shift
            if len(np.unique(slots)) == len(keys):
                table = np.full(1 << bits, -1, dtype=np.int32)
                table[slots] = np.arange(len(keys), dtype=np.int32)
                return cls(keys=keys, mult=mult, shift=shift, table=table)
        return None

    def count(self, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the budgets of ``part`` not in the index, how many of each indexed budget ``part`` holds)."""
        if not len(self.keys):
            return part, np.zeros(0, dtype=np.int64)
        bits = part.view(np.uint64)
        where = self.table[(bits * self.mult) >> self.shift]
        known = (self.keys[where] == bits) & (where >= 0)
        if known.all():
            return part[:0], np.bincount(where, minlength=len(self.keys))
        return part[~known], np.bincount(where[known], minlength=len(self.keys))


def _run_lengths(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of ``part`` (ascending) and their counts, by one sort."""
    part = np.sort(part)
    first = np.flatnonzero(np.concatenate(([True], part[1:] != part[:-1])))
    return part[first], np.diff(np.append(first, len(part)))


def _merge(values: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One histogram from several (distinct values, counts) pieces."""
    distinct, where = np.unique(np.concatenate(values), return_inverse=True)
    return distinct, np.bincount(where, weights=np.concatenate(counts), minlength=len(distinct)).astype(np.int64)


def budget_histogram(eps: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct budgets (ascending) and how many clients hold each, streamed over ``eps`` in chunks of
    ``HISTOGRAM_CHUNK`` clients: besides the input, memory is O(chunk + distinct budgets), flat in n.

    Budgets already seen are counted through a perfect hash of their bits (:class:`_BudgetIndex`: a few integer
    operations per client instead of a sort); new ones are sorted in and the index rebuilt. Above
    :data:`HASH_LIMIT` distinct budgets every chunk is sorted and the pieces merged at the end.
    Raises :class:`BudgetError` if there is no budget or one is not a positive finite number.
    """
    eps = np.ascontiguousarray(eps, dtype=float)
    if eps.ndim != 1 or len(eps) == 0:
        raise BudgetError("no client budgets given")
    values, counts = np.zeros(0), np.zeros(0, dtype=np.int64)
    index = _BudgetIndex.build(values)
    pieces: list[tuple[np.ndarray, np.ndarray]] = []  # sorted chunks, once there are too many budgets to hash
    for start in range(0, len(eps), HISTOGRAM_CHUNK):
        part = eps[start : start + HISTOGRAM_CHUNK]
        if not (part.min() > 0 and np.isfinite(part.max())):  # a NaN makes both tests fail
            raise BudgetError("every client budget ε must be a positive finite number")
        if index is None:
            pieces.append(_run_lengths(part))
            continue
        part, found = index.count(part)
        counts = counts + found
        if len(part):
            new_values, new_counts = _run_lengths(part)
            values, counts = _merge((values, new_values), (counts, new_counts))
            index = _BudgetIndex.build(values)
    if pieces:
        values, counts = _merge((values, *(v for v, _ in pieces)), (counts, *(c for _, c in pieces)))
    return values, counts
