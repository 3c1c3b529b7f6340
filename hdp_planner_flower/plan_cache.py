"""What a node derives from the plan it pins, derived once: kept in its state folder, keyed by the plan's SHA-256.

Every message a node trains on needs what it reads off its pinned plan: under ``secagg`` the method's secure
form (each group's law of distributed noise, re-derived and checked against the plan's trust section: seconds of
accounting) and the client's group; under either trust model the client's terms (each round's cost, δ, its cap and
budget). A SuperNode starts a new process for every message, so an in-memory cache does not outlive a round; this
one does. Each derivation is a row of ``DIR/derived.sqlite`` (the node's state folder, 0700; the file 0600) keyed by
the plan's SHA-256, the method, the SHA-256 of the groups file, what was derived (the pinned plan, or one client's
terms under one trust model) and this code's version; its value is the derived object as JSON (:func:`encode`, read
back by :func:`decode` into the same frozen dataclasses, floats exactly). A process that finds no row derives it (from
the plan file, whose hash it checks and which it verifies) under the file's write lock, so the processes of one
round that arrive together derive it once. A changed plan file has another hash, and another row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable
from contextlib import closing
from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from hdp_planner import __version__

T = TypeVar("T")

CACHE_FORMAT = 3
"""Bumped when what is derived, or how, changes: together with the package's version it is part of every key."""

SCHEMA = """CREATE TABLE IF NOT EXISTS derived (
    plan_sha256 TEXT NOT NULL, method TEXT NOT NULL, groups_sha256 TEXT NOT NULL, what TEXT NOT NULL,
    version TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (plan_sha256, method, groups_sha256, what, version))"""

PACKAGES = ("hdp_planner", "hdp_planner_train", "hdp_planner_flower")
"""A cached value holds frozen dataclasses of these packages only: :func:`decode` builds nothing else."""


def cached_type(kind: str) -> type:
    """The class ``module:name`` names, if it is a frozen dataclass of :data:`PACKAGES`; else ValueError."""
    module, _, name = kind.partition(":")
    if module.split(".")[0] not in PACKAGES:
        raise ValueError(f"{kind} is not a cached type")
    cls = getattr(import_module(module), name, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
        raise ValueError(f"{kind} is not a cached type")
    return cls


def encode(value: Any) -> Any:
    """``value`` (frozen dataclasses of :data:`PACKAGES`, tuples, numpy arrays and scalars, str, int, float, bool,
    None) as JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = f"{type(value).__module__}:{type(value).__qualname__}"
        cached_type(kind)
        return {"type": kind, "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot cache a {type(value).__name__}")


def decode(data: Any) -> Any:
    """:func:`encode`'s inverse."""
    if isinstance(data, dict):
        if "type" in data:
            return cached_type(data["type"])(**{k: decode(v) for k, v in data["fields"].items()})
        if "array" in data:
            return np.array(data["array"], dtype=data["dtype"])
        return tuple(decode(v) for v in data["tuple"])
    return data


def derived(folder: Path, *, plan_sha256: str, method: str, groups_sha256: str, what: str,
            derive: Callable[[], T]) -> T:  # fmt: skip
    """The value of ``derive()`` for this key, from the node's cache in its (private) state ``folder`` if it is there;
    else derived now (under the cache file's write lock: a process that arrives meanwhile waits, then reads it) and
    kept."""
    path = folder / "derived.sqlite"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # the mode before SQLite opens it
    os.fchmod(fd, 0o600)
    os.close(fd)
    key = (plan_sha256, method, groups_sha256, what, f"{__version__}/{CACHE_FORMAT}")
    with closing(sqlite3.connect(path, timeout=600.0, isolation_level=None)) as conn:
        conn.execute(SCHEMA)
        query = ("SELECT value FROM derived WHERE plan_sha256 = ? AND method = ? AND groups_sha256 = ? AND what = ? "
                 "AND version = ?")  # fmt: skip
        row = conn.execute(query, key).fetchone()
        if row is not None:
            return decode(json.loads(row[0]))
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(query, key).fetchone()
            value = decode(json.loads(row[0])) if row is not None else derive()
            if row is None:
                conn.execute("INSERT INTO derived VALUES (?, ?, ?, ?, ?, ?)", (*key, json.dumps(encode(value))))
            conn.execute("COMMIT")
            return value
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
