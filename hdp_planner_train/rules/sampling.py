"""Who joins a round: each group Poisson-samples its clients with rate q_m (:func:`sample_round`), from a numpy
Generator seeded from (seed, round) so that both engines and a resumed run sample identically, or from the OS's
CSPRNG; and the round's seeds (:func:`round_seed`: one stream each for sampling, local batches and noise)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hdp_planner.rules.noise import SecureRandom, poisson_sample

if TYPE_CHECKING:
    from hdp_planner_train.rules.specs import GroupSpec


def round_seed(seed: int, *, rnd: int, stream: int) -> int:
    """A 63-bit seed for (run seed, round, stream): streams 0 sampling, 1 batches, 2 noise."""
    return int(np.random.SeedSequence([seed, rnd, stream]).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def sample_round(
    spec: GroupSpec, *, seed: int, rnd: int, secure: bool = False, extra: Sequence[int] | None = None
) -> list[np.ndarray]:
    """Global ids of the clients joining round ``rnd``, per group (Poisson sampling with q_m): from
    ``round_seed(seed, rnd, 0)``, or with ``secure`` from the OS's CSPRNG, so that no recorded seed regenerates
    who took part. ``extra`` e_m (the audit's canaries): group m's population is its size_m clients followed by
    e_m canaries, all sampled alike; ids from offset_m + size_m on are canaries
    (:meth:`hdp_planner_train.audit.canaries.CanaryAuditor.take` takes them out)."""
    rng = SecureRandom() if secure else np.random.default_rng(round_seed(seed, rnd=rnd, stream=0))
    extra = extra or (0,) * len(spec.sizes)
    return [
        off + poisson_sample(rng, size=size + e, q=q)
        for off, size, e, q in zip(spec.offsets, spec.sizes, extra, spec.q)
    ]


def round_rows(sampled: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a round as :func:`~.aggregate.aggregate` takes them: the joined ids of every group in group order
    (:func:`sample_round`'s output concatenated) and each row's 0-based group."""
    ids = np.concatenate(sampled) if sampled else np.zeros(0, np.int64)
    return ids, np.repeat(np.arange(len(sampled), dtype=np.int64), [len(s) for s in sampled])
