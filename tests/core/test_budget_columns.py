"""Budgets read as columns: the same clients, budgets and digest as the row-by-row reader, for every kind of file."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner.planning import budget_columns
from hdp_planner.planning.budget_columns import BudgetColumns, read_plain_csv
from hdp_planner.planning.budgets import BudgetError, budgets_digest, load_budget_columns, load_budgets_with_delta

FILES = {
    "prefix": "client_id,epsilon\nclient-10,0.5\nclient-2,1.5\nclient-1,3\nclient-33,0.50\n",
    "long ids": "client_id,epsilon\n" + "".join(f"org-{i % 3}/user-{i:05d},{0.1 * (i % 7) + 0.2}\n" for i in range(50)),
    "one id is the prefix": "client_id,epsilon\nab,1\nabc,2\nabd,1e-3\n",
    "crlf and spaces": "client_id , epsilon\r\na,  0.5\r\nb,1.5 \r\n",
    "no final newline": "client_id,epsilon\n7,2.5\n8,2.5",
    "delta": "client_id,epsilon,delta\nx,1,1e-5\ny,2,1e-6\n",
    "quoted": 'client_id,epsilon\n"a,1",0.5\nb,1\n',
    "unicode": "client_id,epsilon\nzoë,0.5\nzoe,1\n",
    "bom": "\ufeffclient_id,epsilon\na,0.5\n",
    "blank line": "client_id,epsilon\na,0.5\n\nb,1\n",
    "other column order": "epsilon,client_id\n0.5,a\n1,b\n",
    "underscore number": "client_id,epsilon\na,1_0\nb,2\n",
    "form feed": "client_id,epsilon\n\x0ca,0.5\nb,1\n",
}


@pytest.mark.parametrize("name", FILES)
def test_columns_match_the_row_by_row_reader(tmp_path, monkeypatch, name):
    monkeypatch.setattr(budget_columns, "BLOCK_BYTES", 64)  # several blocks, lines cut at block ends
    path = tmp_path / "budgets.csv"
    path.write_bytes(FILES[name].encode())
    ids, eps, delta = load_budgets_with_delta(path)
    columns = load_budget_columns(path)
    assert columns.id_list() == ids and np.array_equal(columns.epsilon, eps)
    assert columns.digest() == budgets_digest(ids, eps)
    assert (columns.delta is None) == (delta is None) and (delta is None or columns.delta.min() == delta)


def test_plain_files_take_the_columnar_path(tmp_path):
    plain = ("prefix", "long ids", "one id is the prefix", "crlf and spaces", "no final newline", "delta")
    for name in (*plain, "underscore number"):  # numpy reads 1_0 as float() does
        path = tmp_path / f"{name}.csv"
        path.write_text(FILES[name], newline="")
        assert read_plain_csv(path) is not None, name
    for name in ("quoted", "unicode", "bom", "blank line", "other column order", "form feed"):
        path = tmp_path / f"{name}.csv"
        path.write_bytes(FILES[name].encode())
        assert read_plain_csv(path) is None, name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("client_id,epsilon\na,1\nb,2\na,3\n", "duplicate client_id 'a'"),
        ("client_id,epsilon\na,1\nb,-2\n", "client 'b' has budget ε = -2.0"),
        ("client_id,epsilon\na,1\nb,nan\n", "client 'b' has budget ε = nan"),
        ("client_id,epsilon,delta\na,1,0.5\nb,2,1.5\n", "every delta must lie in (0, 1)"),
    ],
)
def test_a_bad_plain_file_gets_the_row_by_row_message(tmp_path, text, message):
    path = tmp_path / "budgets.csv"
    path.write_text(text)
    with pytest.raises(BudgetError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_budget_columns(path)


def test_random_ids_sort_and_digest_as_python_does():
    rng = np.random.default_rng(3)
    alphabet = list("ab0~-_Z")
    ids = sorted(
        {"".join(rng.choice(alphabet, size=rng.integers(1, 20))) for _ in range(400)}, key=lambda _: rng.random()
    )
    eps = rng.choice([0.25, 1.0, 1 / 3, 7.5], size=len(ids))
    columns = BudgetColumns.from_lists(ids, eps)
    assert [ids[i] for i in columns.order] == sorted(ids)
    assert columns.digest() == budgets_digest(ids, eps) and not columns.duplicate()
    assert BudgetColumns.from_lists([*ids, ids[5]], np.append(eps, 1.0)).duplicate()


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 600),
    st.integers(0, 2**32),
    st.sampled_from([2, 5, 32]),
    st.sampled_from([1, 7, 64]),
)
def test_sorted_rows_sorts_as_a_whole_argsort(words, rows, seed, buckets, block):
    """Range by range, a block of rows at a time, in 4-byte positions: the same order as one lexsort, for any keys,
    including many rows sharing a first word (one range holds them all) and ranges left empty."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64, size=(rows, words), dtype=np.uint64, endpoint=False)
    keys[: rows // 2, 0] = rng.choice(keys[:, 0], size=3)[rng.integers(0, 3, rows // 2)]  # repeated first words
    keys[rows // 3 :, 1:] = 0
    original = budget_columns.SORT_BLOCK
    try:
        budget_columns.SORT_BLOCK = block
        order = budget_columns.sorted_rows(keys, buckets)
    finally:
        budget_columns.SORT_BLOCK = original
    assert sorted(order.tolist()) == list(range(rows))
    expected = np.lexsort(keys.T[::-1])
    assert np.array_equal(keys[order], keys[expected])
    assert order.dtype == (np.uint32 if rows > block else np.int64)
