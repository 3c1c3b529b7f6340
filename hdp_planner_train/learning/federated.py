"""A dataset split among clients: :func:`load_federated` loads a dataset (:mod:`.datasets`, :mod:`.shakespeare`)
and partitions its training set (:mod:`.partitions`; Shakespeare's partition is natural, one client per role)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp_planner_train.learning.datasets import (
    DATASETS,
    DEFAULTS,
    DataError,
    load_cifar10,
    load_digits_split,
    load_fmnist,
    load_svhn,
)
from hdp_planner_train.learning.partitions import (
    dirichlet_partition,
    group_class_partition,
    iid_partition,
    mixed_partition,
    pathological_partition,
)
from hdp_planner_train.learning.shakespeare import VOCAB, load_shakespeare


@dataclass(frozen=True, kw_only=True)
class FederatedData:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    clients: list[np.ndarray]  # indices into the training set, one array per client

    @property
    def n_clients(self) -> int:
        return len(self.clients)


def load_federated(
    name: str,
    data_dir: str | None = None,
    *,
    clients: int | None = None,
    dirichlet: float | None = None,
    seed: int = 0,
    shards: int | None = None,
    iid_share: float | None = None,
    group_classes: tuple[tuple[int, ...], tuple[tuple[int, ...], ...]] | None = None,
) -> FederatedData:
    """Load ``name`` and split its training set among clients (IID unless ``dirichlet`` or ``shards`` S classes per
    client; natural for shakespeare). ``group_classes`` = (group sizes, classes of each group): group-skewed."""
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if shards is not None and dirichlet is not None:
        raise DataError("--shards and --dirichlet are two different partitions: give one of them")
    if iid_share is not None and (dirichlet is not None or shards is not None):
        raise DataError("--iid-share is a partition of its own: give it without --dirichlet and --shards")
    if group_classes is not None and (dirichlet is not None or shards is not None or iid_share is not None):
        raise DataError("--group-classes is a partition of its own: give it without --dirichlet, --shards, --iid-share")
    rng = np.random.default_rng([seed, 7919])
    if name == "shakespeare":
        if shards is not None:
            raise DataError("--shards: shakespeare has its natural partition (one client per speaking role)")
        if iid_share is not None or group_classes is not None:
            raise DataError("--iid-share, --group-classes: shakespeare has its natural partition (one client per role)")
        roles = DEFAULTS["shakespeare"]["clients"] if clients is None else clients
        xtr, ytr, xte, yte, natural = load_shakespeare(data_dir, roles)  # type: ignore[arg-type]
        return FederatedData(
            name=name, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, num_classes=len(VOCAB), clients=natural
        )
    loader = {"fmnist": load_fmnist, "cifar10": load_cifar10, "svhn": load_svhn}.get(name)
    xtr, ytr, xte, yte = loader(data_dir) if loader else load_digits_split()
    n = int(clients if clients is not None else DEFAULTS[name]["clients"])  # type: ignore[arg-type]
    if not 1 <= n <= len(ytr):
        raise DataError(f"{name} has {len(ytr)} training samples: cannot split among {n} clients")
    if group_classes is not None:
        sizes, classes = group_classes
        if sum(sizes) != n:
            raise DataError(f"--group-classes: the plan's groups hold {sum(sizes)} clients, not {n}")
        parts = group_class_partition(ytr, sizes, classes, rng)
    elif dirichlet is not None:
        if not dirichlet > 0:
            raise DataError(f"--dirichlet must be positive, got {dirichlet}")
        parts = dirichlet_partition(ytr, n, dirichlet, rng)
    elif shards is not None:
        parts = pathological_partition(ytr, n, shards, rng)
    elif iid_share is not None:
        parts = mixed_partition(ytr, n, iid_share, rng)
    else:
        parts = iid_partition(len(ytr), n, rng)
    return FederatedData(name=name, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte, num_classes=10, clients=parts)
