"""The offline datasets (numpy only; nothing is downloaded), each loaded as its train and test arrays.

- ``fmnist``: the four Fashion-MNIST IDX files (``.gz`` or not), default ``/usr/share/datasets/fashion-mnist/``
  (Debian package ``dataset-fashion-mnist``);
- ``digits``: scikit-learn's 8×8 digits (1,797 real digits, the file ``load_digits`` reads, read here without importing
  scikit-learn; a fixed 80/20 train/test split);
- ``cifar10``: torchvision's on-disk format, ``cifar-10-batches-py/`` (``data_batch_1..5``, ``test_batch``);
- ``svhn``: torchvision's ``train_32x32.mat`` and ``test_32x32.mat``;
- ``shakespeare``: :mod:`.shakespeare` (one client per speaking role).
"""

from __future__ import annotations

import gzip
import importlib.util
import pickle
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


def digits_file() -> Path:
    """scikit-learn's copy of the digits, ``sklearn/datasets/data/digits.csv.gz`` (one row per image: 64 pixels in
    0..16, then its label), found without importing scikit-learn (which a node's training process would pay for)."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is None or not path.is_file():
        raise DataError("the digits dataset comes with scikit-learn: pip install scikit-learn")
    return path


def load_digits_split() -> tuple[np.ndarray, ...]:
    with gzip.open(digits_file(), "rt") as fh:
        data = np.loadtxt(fh, delimiter=",")
    x, y = data[:, :-1], data[:, -1].astype(int)
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
