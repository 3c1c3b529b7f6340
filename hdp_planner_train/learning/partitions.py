"""Federated partitions of a training set: IID (equal shares of a random permutation), Dirichlet(α) over labels,
pathological (N clients, S classes each: :func:`pathological_partition`), the selection paper's IID/label-sorted mix
(:func:`mixed_partition`), group-skewed labels (each privacy group its own classes: :func:`group_class_partition`).
Each returns one array of training-set indices per client."""

from __future__ import annotations

import numpy as np

from hdp_planner_train.learning.datasets import DataError


def iid_partition(n_samples: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(c) for c in np.array_split(rng.permutation(n_samples), n_clients)]


def dirichlet_partition(labels: np.ndarray, n_clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Per class, split its samples among clients in Dirichlet(α) proportions; no client is left empty."""
    buckets: list[list[int]] = [[] for _ in range(n_clients)]
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = (np.cumsum(rng.dirichlet(np.full(n_clients, alpha))) * len(idx)).astype(int)[:-1]
        for i, part in enumerate(np.split(idx, cuts)):
            buckets[i].extend(part.tolist())
    for i in range(n_clients):  # give every empty client one sample from the largest client
        if not buckets[i]:
            big = max(range(n_clients), key=lambda j: len(buckets[j]))
            buckets[i].append(buckets[big].pop())
    return [np.sort(np.asarray(b, dtype=np.int64)) for b in buckets]


def pathological_partition(
    labels: np.ndarray, n_clients: int, classes_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """The (N, S) pathological non-IID split (McMahan et al. 2017; DP²-FedSAM §5): N·S label-sorted shards, S per
    client, every client holding exactly S distinct classes and every sample used once.

    A global sort-and-cut can put two shards of one class on a client (or one shard across two classes), so the
    shards are cut inside classes: each client draws S distinct classes among the least drawn so far (ties
    broken at random, so class counts differ by at most one and class pairs vary), then every class's shuffled
    samples are cut into as many near-equal shards as clients drew it, one shard per client.
    """
    classes = np.unique(labels)
    n, s = int(n_clients), int(classes_per_client)
    if not 1 <= s <= len(classes):
        raise DataError(f"--shards S must lie between 1 and the {len(classes)} classes, got {s}")
    if n * s < len(classes):
        raise DataError(f"{n} clients × {s} classes cannot cover all {len(classes)} classes: raise --shards or n")
    count = np.zeros(len(classes), dtype=np.int64)
    chosen = np.empty((n, s), dtype=np.int64)  # class positions per client
    for i in rng.permutation(n):
        perm = rng.permutation(len(classes))
        take = perm[np.argsort(count[perm], kind="stable")[:s]]
        chosen[i] = take
        count[take] += 1
    buckets: list[list[np.ndarray]] = [[] for _ in range(n)]
    for k, c in enumerate(classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        owners = np.flatnonzero((chosen == k).any(axis=1))
        if len(idx) < len(owners):
            raise DataError(f"class {c} has {len(idx)} samples for {len(owners)} shards: use fewer clients or --shards")
        for owner, shard in zip(owners, np.array_split(idx, len(owners))):
            buckets[owner].append(shard)
    return [np.sort(np.concatenate(b)).astype(np.int64) for b in buckets]


def mixed_split(
    labels: np.ndarray, n_clients: int, iid_share: float, rng: np.random.Generator, shards_per_client: int = 2
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The selection paper's non-IID mix (§VI-A, after McMahan et al. 2017): a share ``iid_share`` (s/100) of the data,
    drawn at random, is dealt IID in equal parts; the rest is sorted by label, cut into ``shards_per_client``·N
    near-equal contiguous shards, and every client gets that many shards at random. Returns (IID part, label-sorted
    part) of every client's indices; every sample is used exactly once."""
    if not (isinstance(iid_share, (int, float)) and 0 <= iid_share <= 1):
        raise DataError(f"--iid-share must be a fraction in [0, 1] (0.2 = 20% IID), got {iid_share}")
    n = len(labels)
    if not 1 <= n_clients <= n:
        raise DataError(f"cannot split {n} samples among {n_clients} clients")
    perm = rng.permutation(n)
    cut = round(iid_share * n)
    iid = np.array_split(perm[:cut], n_clients)
    rest = perm[cut:]
    rest = rest[np.argsort(labels[rest], kind="stable")]
    shards = np.array_split(rest, n_clients * shards_per_client)
    order = rng.permutation(len(shards)).reshape(n_clients, shards_per_client)
    out = [(np.sort(iid[i]), np.sort(np.concatenate([shards[j] for j in order[i]]))) for i in range(n_clients)]
    if any(len(a) + len(b) == 0 for a, b in out):
        raise DataError(f"--iid-share {iid_share}: some of the {n_clients} clients get no sample; use fewer clients")
    return out


def mixed_partition(labels: np.ndarray, n_clients: int, iid_share: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Client indices of :func:`mixed_split`: a share s of every client's data IID, the rest label-sorted shards."""
    return [np.sort(np.concatenate(parts)).astype(np.int64) for parts in mixed_split(labels, n_clients, iid_share, rng)]


def parse_group_classes(text: str, groups: int, num_classes: int) -> tuple[tuple[int, ...], ...]:
    """``--group-classes`` "0,1,2,3/4,5,6/7,8,9": the classes of each privacy group, '/' between groups; each
    class in at most one group."""
    try:
        parts = tuple(tuple(int(c) for c in part.split(",")) for part in text.split("/"))
    except ValueError:
        raise DataError(
            f"--group-classes must look like 0,1,2,3/4,5,6/7,8,9 (a list per group), got {text!r}"
        ) from None
    flat = [c for part in parts for c in part]
    if len(parts) != groups:
        raise DataError(f"--group-classes gives {len(parts)} class lists for the plan's {groups} groups")
    if any(not 0 <= c < num_classes for c in flat) or len(set(flat)) != len(flat):
        raise DataError(f"--group-classes: classes must be distinct, in 0..{num_classes - 1}, got {text!r}")
    return parts


def group_class_partition(
    labels: np.ndarray, sizes: tuple[int, ...], classes: tuple[tuple[int, ...], ...], rng: np.random.Generator
) -> list[np.ndarray]:
    """Group-skewed labels: the clients of privacy group m (the plan's order: the first |G_1| clients, then the
    next |G_2|, …) share, IID, the training samples of group m's classes only."""
    out: list[np.ndarray] = []
    for size, cls in zip(sizes, classes):
        idx = rng.permutation(np.flatnonzero(np.isin(labels, cls)))
        if len(idx) < size:
            raise DataError(f"classes {cls} have {len(idx)} samples for {size} clients: use fewer clients")
        out.extend(np.sort(part).astype(np.int64) for part in np.array_split(idx, size))
    return out
