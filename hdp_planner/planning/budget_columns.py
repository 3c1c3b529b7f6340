"""Per-client budgets as columns: the client ids as rows of sort keys, the budgets as codes into their values.

Ten million clients fit in a few hundred megabytes this way (a Python string per id would take gigabytes): a CSV
file is parsed by numpy a block of lines at a time (:func:`read_plain_csv`), the prefix every id shares is kept
once, and the digest a plan records of its budgets (:meth:`BudgetColumns.digest`) is computed over blocks of
sorted lines: the same SHA-256 as :func:`hdp_planner.planning.budget_files.budgets_digest` of the same ids and budgets.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

BLOCK_BYTES = 1 << 21
"""Bytes of a CSV file parsed at a time (whole lines)."""
DIGEST_BLOCK = 1 << 16
"""Clients whose digest lines are built at a time."""
SORT_BUCKETS = 32
"""Ranges of leading id words that :func:`sorted_rows` sorts one at a time."""
SORT_BLOCK = 1 << 18
"""Clients that :func:`sorted_rows` places in their ranges at a time."""
NEWLINE, COMMA = ord("\n"), ord(",")
SPACE = np.zeros(256, bool)
SPACE[list(b" \t\r")] = True
"""What ``str.strip`` would take from around an ASCII id (such ids are read row by row)."""
OTHER = np.ones(256, bool)
OTHER[[ord("\t"), ord("\n"), ord("\r"), *range(0x20, 0x7F)]] = False
OTHER[ord('"')] = True
"""Bytes a plain file never holds: control characters but tab, newline and carriage return (``str.strip`` takes
some of them from around an id), quotes (a quoted field) and non-ASCII text: such files are read row by row."""


@dataclass(frozen=True, eq=False, kw_only=True)
class BudgetColumns:
    """The clients of a budgets file in file order: their ids as ``prefix`` (shared by all) followed by the bytes
    in ``keys`` (UTF-8, NUL-padded, as native unsigned 8-byte words read big-endian: one row per client, so that
    the rows sort as the ids do), their budgets as ``values[codes]`` (the distinct budgets, ascending, and each
    client's index into them) and the optional ``delta`` column."""

    keys: np.ndarray
    values: np.ndarray
    codes: np.ndarray
    delta: np.ndarray | None = None
    prefix: bytes = b""

    @classmethod
    def from_lists(cls, ids: list[str], epsilon: np.ndarray, delta: list[float] | None = None) -> BudgetColumns:
        """The columns of budgets read row by row.

        Args:
            ids: the client ids, in file order.
            epsilon: their budgets.
            delta: their δ_i, or None without a delta column.

        Returns:
            The same clients as columns (no shared prefix).
        """
        encoded = np.array([i.encode() for i in ids], dtype=bytes) if ids else np.zeros(0, dtype="S8")
        values, codes = np.unique(np.asarray(epsilon, dtype=float), return_inverse=True)
        return cls(
            keys=sort_keys(encoded),
            values=values,
            codes=codes,
            delta=None if delta is None else np.asarray(delta, float),
        )

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def epsilon(self) -> np.ndarray:
        """Every client's budget, in file order (8 bytes a client)."""
        return self.values[self.codes]

    @property
    def counts(self) -> np.ndarray:
        """How many clients hold each of :attr:`values` (counted a block at a time: bincount widens its input)."""
        blocks = range(0, len(self), DIGEST_BLOCK)
        return sum((np.bincount(self.codes[a : a + DIGEST_BLOCK], minlength=len(self.values)) for a in blocks),
                   np.zeros(len(self.values), np.int64))  # fmt: skip

    def ids(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """The ids of ``rows`` after the prefix, as NUL-padded bytes."""
        keys = self.keys[rows]
        return keys.astype(">u8").view(f"S{8 * keys.shape[1]}").ravel()

    def id_list(self) -> list[str]:
        """The ids as strings (one Python object per client: for small files)."""
        return [(self.prefix + i).decode() for i in self.ids().tolist()]

    @cached_property
    def order(self) -> np.ndarray:
        """The clients' positions sorted by id, in the order of Python's ``sorted`` on the id strings (UTF-8 bytes
        sort as code points, and the prefix is common): 4 bytes a client (:func:`sorted_rows`)."""
        return sorted_rows(self.keys)

    def duplicate(self) -> bool:
        """Whether two clients share an id."""
        parts = (self.order[a : a + DIGEST_BLOCK + 1] for a in range(0, len(self), DIGEST_BLOCK))
        return any(np.any(np.all(self.keys[p[1:]] == self.keys[p[:-1]], axis=1)) for p in parts)

    def digest(self) -> str:
        """SHA-256 of the ``client_id,repr(ε)`` lines sorted by id, joined by newlines (as ``budgets_digest``)."""
        texts = np.array([repr(float(v)).encode() for v in self.values], dtype=bytes)
        sha = hashlib.sha256()
        order = self.order
        for start in range(0, len(order), DIGEST_BLOCK):
            part = order[start : start + DIGEST_BLOCK]
            ends = np.strings.add(b",", np.strings.add(texts[self.codes[part]], b"\n"))
            lines = np.strings.add(np.strings.add(self.prefix, self.ids(part)), ends)
            raw = np.frombuffer(lines.tobytes(), dtype=np.uint8)
            raw = raw[raw != 0]  # the padding of the fixed width
            sha.update(raw[:-1].tobytes() if start + DIGEST_BLOCK >= len(order) else raw.tobytes())
        return sha.hexdigest()


def _argsort(keys: np.ndarray) -> np.ndarray:
    """Positions of the rows of ``keys`` in ascending order (8 bytes a row)."""
    return np.argsort(keys[:, 0]) if keys.shape[1] == 1 else np.lexsort(keys.T[::-1])


def sorted_rows(keys: np.ndarray, buckets: int = SORT_BUCKETS) -> np.ndarray:
    """Positions of the rows of ``keys`` in ascending order, as 4-byte positions: an argsort of ten million rows
    would hold 8 bytes a row. The rows are split into ``buckets`` ranges of their first word, whose bounds are
    quantiles of an evenly spaced sample (rows with equal first words share a range); the positions are placed range
    by range, a block of rows at a time, and each range is then sorted on its own.

    Args:
        keys: rows of sort keys (:func:`sort_keys`).
        buckets: the number of ranges.

    Returns:
        The row positions in ascending order of the keys (uint32; int64 beyond 2^32 rows).
    """
    count = len(keys)
    if count <= SORT_BLOCK or count >= 1 << 32:
        return _argsort(keys)
    lead = keys[:, 0]
    sample = np.sort(lead[:: max(count // (64 * buckets), 1)])
    bounds = np.unique(sample[len(sample) // buckets :: max(len(sample) // buckets, 1)])
    blocks = range(0, count, SORT_BLOCK)

    def ranges(start: int) -> np.ndarray:
        return np.searchsorted(bounds, lead[start : start + SORT_BLOCK], side="right")

    sizes = sum((np.bincount(ranges(a), minlength=len(bounds) + 1) for a in blocks), np.zeros(len(bounds) + 1, int))
    ends = np.cumsum(sizes)
    filled = ends - sizes  # where the next row of each range goes
    order = np.empty(count, np.uint32)
    for a in blocks:
        found = ranges(a)
        by_range = np.argsort(found, kind="stable")
        found = found[by_range]
        first = np.searchsorted(found, found)  # each row's rank within its range in this block
        order[filled[found] + np.arange(len(found)) - first] = a + by_range
        filled += np.bincount(found, minlength=len(bounds) + 1)
    for start, end in zip(ends - sizes, ends):
        rows = order[start:end]
        rows[:] = rows[_argsort(keys[rows])]
    return order


def sort_keys(ids: np.ndarray, words: int | None = None) -> np.ndarray:
    """Fixed-width bytes ids as rows of native 8-byte words that compare as the bytes do.

    Args:
        ids: NUL-padded ids (numpy ``S`` array).
        words: words per row, or None for as few as hold the ids.

    Returns:
        (len(ids), words) unsigned 8-byte words, read big-endian.
    """
    words = words or max(-(-ids.dtype.itemsize // 8), 1)
    return ids.astype(f"S{8 * words}").view(">u8").reshape(len(ids), words).astype(np.uint64)


def read_plain_csv(path: str | os.PathLike[str]) -> BudgetColumns | None:
    """The columns of a plain ``client_id,epsilon[,delta]`` CSV file, parsed by numpy a block of lines at a time:
    a first pass reads the budgets (as codes into their distinct values) and finds the number of clients and the
    ids' width and common prefix, a second fills the ids' sort keys. None for any other file (quotes, other
    columns, non-ASCII text, a BOM, blank or short lines, spaces around an id, a budget that numpy cannot parse or
    that is not positive and finite), which the row-by-row reader then reads with its line-exact messages."""
    with open(path, "rb") as fh:
        names = [h.strip().lower() for h in fh.readline().decode("ascii", errors="replace").split(",")]
        if names not in (["client_id", "epsilon"], ["client_id", "epsilon", "delta"]):
            return None
        columns, body = len(names), fh.tell()
        width, prefix, blocks = 0, None, []
        for raw in _blocks(fh):
            lines = _lines(raw, columns)
            numbers = None if lines is None else _numbers(raw, *lines)
            if numbers is None:
                return None
            starts, lengths = lines[0], lines[2][:, 0] - lines[0]
            if prefix is None:
                prefix = raw[starts[0] : starts[0] + lengths[0]].tobytes()
            prefix = prefix[: _shared(raw, starts, prefix[: int(lengths.min())])]
            width = max(width, int(lengths.max()))
            block_values, block_codes = np.unique(numbers[0], return_inverse=True)
            blocks.append((block_values, block_codes.astype(np.min_scalar_type(len(block_values))), numbers[1]))
        if prefix is None:
            return None
        values = np.unique(np.concatenate([b[0] for b in blocks]))
        count = sum(len(b[1]) for b in blocks)
        codes = np.empty(count, np.uint16 if len(values) <= 1 << 16 else np.int64)
        delta = np.concatenate([b[2] for b in blocks]) if columns == 3 else None
        at = 0
        for block_values, block_codes, _ in blocks:
            codes[at : at + len(block_codes)] = np.searchsorted(values, block_values)[block_codes]
            at += len(block_codes)
        del blocks
        words = max(-(-(width - len(prefix)) // 8), 1)
        keys = np.empty((count, words), np.uint64)
        fh.seek(body)
        at = 0
        for raw in _blocks(fh):
            starts, _, commas = _lines(raw, columns)  # type: ignore[misc]  # the first pass read these lines
            keys[at : at + len(starts)] = sort_keys(_field(raw, starts + len(prefix), commas[:, 0]), words)
            at += len(starts)
    release_heap()
    return BudgetColumns(keys=keys, values=values, codes=codes, delta=delta, prefix=prefix)


def release_heap() -> None:
    """Give the C heap's free pages back to the operating system (glibc's ``malloc_trim``; elsewhere nothing).
    Parsing frees thousands of block-sized buffers that glibc keeps in its heap; kept, they would count again in
    the process's peak once the ids are sorted (about 45 MiB for ten million clients)."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _blocks(fh) -> Iterator[np.ndarray]:
    """The rest of ``fh`` as byte arrays of whole lines, about :data:`BLOCK_BYTES` each."""
    tail = b""
    while block := fh.read(BLOCK_BYTES):
        data = tail + block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield np.frombuffer(data[:cut], dtype=np.uint8)
        tail = data[cut:]
    if tail:
        yield np.frombuffer(tail, dtype=np.uint8)


def _shared(raw: np.ndarray, starts: np.ndarray, prefix: bytes) -> int:
    """How many leading bytes of ``prefix`` every line starting at ``starts`` begins with."""
    for j, byte in enumerate(prefix):
        if np.any(raw[starts + j] != byte):
            return j
    return len(prefix)


def _lines(raw: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(line starts, line ends, field separators per line) of a block whose every line has ``columns`` fields of
    plain ASCII text and a non-empty id without spaces around it; None otherwise."""
    if OTHER[raw].any():
        return None
    ends = np.flatnonzero(raw == NEWLINE)
    if len(ends) == 0 or ends[-1] != len(raw) - 1:
        ends = np.append(ends, len(raw))
    starts = np.concatenate(([0], ends[:-1] + 1))
    commas = np.flatnonzero(raw == COMMA)
    if len(commas) != (columns - 1) * len(starts):
        return None
    commas = commas.reshape(len(starts), columns - 1)
    if not (np.all(commas[:, 0] > starts) and np.all(commas[:, -1] < ends)):
        return None  # an empty id, or a separator on another line: a line with too few or too many fields
    if SPACE[raw[starts]].any() or SPACE[raw[commas[:, 0] - 1]].any():
        return None
    return starts, ends, commas


def _numbers(
    raw: np.ndarray, starts: np.ndarray, ends: np.ndarray, commas: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """The budgets and the deltas (None without that column) of a block's lines; None if a budget is not a
    positive finite number or a field is not a number."""
    last = commas.shape[1] == 1
    try:  # numpy skips spaces, tabs and carriage returns around a number, as float() does
        eps = _field(raw, commas[:, 0] + 1, ends if last else commas[:, 1]).astype(float)
        delta = None if last else _field(raw, commas[:, 1] + 1, ends).astype(float)
    except ValueError:
        return None
    return (eps, delta) if np.all(np.isfinite(eps)) and np.all(eps > 0) else None


def _field(raw: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The bytes from ``starts`` to ``ends`` of every line as a fixed-width, NUL-padded bytes array."""
    width = max(int((ends - starts).max(initial=0)), 1)
    windows = np.lib.stride_tricks.sliding_window_view(np.concatenate((raw, np.zeros(width, np.uint8))), width)
    grid = windows[starts]
    grid[np.arange(width)[None, :] >= (ends - starts)[:, None]] = 0
    return grid.view(f"S{width}").ravel()
