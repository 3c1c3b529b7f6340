"""Data: the digits, read without importing scikit-learn; Shakespeare's 714-role natural split (LEAF-style, built from
the plays' texts)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

from hdp_planner_train.learning.datasets import DataError, load_digits_split
from hdp_planner_train.learning.federated import load_federated
from hdp_planner_train.learning.shakespeare import (
    SEQ_LEN,
    TEST_PER_ROLE,
    _encode,
    load_shakespeare,
    parse_roles,
    select_roles,
)

# ------------------------------------------------------------------ the digits


def test_the_digits_are_scikit_learns_read_without_importing_it():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    x, y = sklearn_datasets.load_digits(return_X_y=True)
    xtr, ytr, xte, yte = load_digits_split()
    perm = np.random.default_rng(0).permutation(len(y))
    assert np.array_equal(np.concatenate([ytr, yte]), y[perm])
    assert np.array_equal(
        np.concatenate([xtr, xte]).reshape(len(y), 64), ((x / 16.0 - 0.3) / 0.4)[perm].astype(np.float32)
    )
    code = "import sys; from hdp_planner_train.learning.datasets import load_digits_split; load_digits_split(); " \
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))"  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


# ------------------------------------------------------------------ Shakespeare's 714 roles


def test_select_roles_keeps_most_text_ties_in_given_order():
    names = ["a:X", "a:Y", "b:X", "b:Z", "c:W"]
    lengths = [300, 500, 500, 200, 900]
    assert select_roles(names, lengths, 3) == [1, 2, 4]  # in the given order, not by length
    assert select_roles(names, lengths, 2) == [1, 4]  # the tie at 500 goes to the earlier play
    assert select_roles(names, lengths, None) == [0, 1, 2, 3, 4]
    with pytest.raises(DataError, match="--clients between 1 and 5"):
        select_roles(names, lengths, 6)


def _speech(rng, n_chars):
    words = ["".join(rng.choice(list("abcdefgh"), size=rng.integers(2, 7))) for _ in range(n_chars // 4)]
    return " ".join(words)[:n_chars]


def _write_play(folder, name, speeches):
    lines = ["ACT I. SCENE 1.", ""]
    for role, text in speeches:
        lines += [f"{role}.", text, ""]
    (folder / f"{name}_gut.txt").write_text("\n".join(lines))


def test_shakespeare_natural_split_is_deterministic_and_test_windows_are_unseen(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "texts"
    folder.mkdir()
    sizes = {"alpha": [("Ham", 900), ("Ghost", 400), ("Guard", 100)], "beta": [("Iago", 1200), ("Ham", 400)]}
    for play, roles in sizes.items():
        _write_play(folder, play, [(r, _speech(rng, n)) for r, n in roles])
    (folder / "alpha_gut_f.txt").write_text("Ham.\nthe First Folio copy is skipped\n")
    xtr, ytr, xte, yte, parts = load_shakespeare(str(folder), clients=3, max_samples=50)
    # Guard (100 chars) is too short; of the four left, Iago, alpha's Ham and the first 400-char role in file
    # order (alpha's Ghost, not beta's Ham) are kept, in file-then-role order: alpha:GHOST, alpha:HAM, beta:IAGO
    speeches = parse_roles((folder / "alpha_gut.txt").read_text(), "alpha_gut")
    for k, role in enumerate(("alpha_gut:GHOST", "alpha_gut:HAM")):
        codes = _encode(speeches[role])
        assert np.array_equal(xtr[parts[k][0]], codes[:SEQ_LEN]) and len(parts[k]) == 50
    # test windows start SEQ_LEN after the last training start (no shared character): Ghost's 320 windows leave
    # none (20% < SEQ_LEN), Ham's 820 leave 10 from window 656 + 80, Iago's 10
    codes = _encode(speeches["alpha_gut:HAM"])
    cut = int(0.8 * (len(codes) - SEQ_LEN))
    assert len(yte) == 2 * TEST_PER_ROLE and np.array_equal(xte[0], codes[cut + SEQ_LEN : cut + 2 * SEQ_LEN])
    assert yte[0] == codes[cut + 2 * SEQ_LEN]
    again = load_shakespeare(str(folder), clients=3, max_samples=50)
    assert all(np.array_equal(a, b) for a, b in zip((xtr, ytr, xte, yte), again[:4]))
    assert len(load_shakespeare(str(folder), clients=None)[4]) == 4  # every role with ≥ 160 characters
    with pytest.raises(DataError, match="--clients"):
        load_federated("shakespeare", str(folder))  # the paper's 714 roles are not in these 5 speeches
    assert load_federated("shakespeare", str(folder), clients=4).n_clients == 4
