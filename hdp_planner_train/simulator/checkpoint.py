"""Checkpoints that ``--resume`` can trust: plain data only, authenticated against the run, rounds that only grow.

- **Plain data.** A checkpoint holds tensors and plain containers (numpy arrays become tensors), written by
  ``torch.save`` and read back with ``torch.load(weights_only=True)``: a crafted file cannot run code.
- **Authenticated.** The file is ``MAGIC`` + HMAC-SHA256(key, payload) + payload, with a random 32-byte key that the
  run creates in its folder (``run.key``, mode 0600, never inside the checkpoint). A checkpoint edited, or made by
  another run, fails the check: ``--resume`` refuses it before reading any of it.
- **Rounds only grow.** Every save also writes ``rounds.spent`` (the rounds run so far, authenticated the same way);
  a checkpoint that ran fewer rounds than that (an older copy put back), or one whose counter was removed, is
  refused, so a run can never release more noisy rounds than its metrics report.

- **Counted outside the folder.** The key and ``rounds.spent`` live in the run's folder, so whoever can write it can
  rewind the checkpoint and re-sign it with the run's own key. Every save therefore also records the rounds in the
  user's data folder (``$XDG_DATA_HOME/hdp-planner/runs/<SHA-256 of the run key>.json``, owner-only: folder 0700,
  file 0600, with the run folder's path), a count that only grows. A checkpoint behind that count, a run whose key
  was replaced (its folder has a record under another key), or a run with no record at all is refused. A run that
  charges a privacy ledger is also checked against the rounds the ledger released
  (:func:`hdp_planner_train.run.ledger.ledger_run`), which holds across machines.

What none of this stops is someone who can rewrite both the run's folder and the user's data folder (and the ledger).
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hdp_planner.io.folders import user_data_folder

CHECKPOINT = "checkpoint.pt"
KEY = "run.key"
SPENT = "rounds.spent"
MAGIC = b"HDPCKPT1"


class CheckpointError(RuntimeError):
    """A checkpoint that ``--resume`` must not use (one-line message)."""


def _key(folder: Path, create: bool) -> bytes:
    path = folder / KEY
    if path.is_file():
        key = path.read_bytes()
        if len(key) != 32:
            raise CheckpointError(f"{path} is not a run key (32 bytes)")
        return key
    if not create:
        raise CheckpointError(f"no {KEY} in {folder}: the checkpoint cannot be authenticated")
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


def _plain(value: Any) -> Any:
    """numpy arrays as tensors, recursively: what ``torch.load(weights_only=True)`` reads."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _write(path: Path, data: bytes) -> None:
    """``data`` to ``path`` through a temporary file and a rename, readable by its owner only (0600)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a leftover of an interrupted save: created afresh below with the mode
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _sealed(key: bytes, payload: bytes) -> bytes:
    return MAGIC + hmac.new(key, payload, hashlib.sha256).digest() + payload


def _opened(key: bytes, data: bytes, what: str) -> bytes:
    mac, payload = data[len(MAGIC) : len(MAGIC) + 32], data[len(MAGIC) + 32 :]
    if not data.startswith(MAGIC) or not hmac.compare_digest(mac, hmac.new(key, payload, hashlib.sha256).digest()):
        raise CheckpointError(f"{what} fails its authentication: it was edited, or written by another run")
    return payload


def counter_path(key: bytes) -> Path:
    """The run's count of rounds in the user's data folder, named by the SHA-256 of its key."""
    return user_data_folder() / "runs" / f"{hashlib.sha256(key).hexdigest()}.json"


def _recorded(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read the run's count of rounds {path}: {exc}") from None


def _record(folder: Path, key: bytes, rounds: int) -> None:
    """Raise the run's count outside its folder to ``rounds`` (never lower it); owner-only folder and file."""
    path = counter_path(key)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    known = _recorded(path)
    doc = {"rounds": max(rounds, int(known["rounds"]) if known else 0), "folder": str(folder.resolve())}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(doc))
    os.replace(tmp, path)


def _recorded_rounds(folder: Path, key: bytes) -> int:
    """The rounds the run recorded outside its folder; CheckpointError if there is no record of it."""
    path = counter_path(key)
    known = _recorded(path)
    if known is not None:
        return int(known["rounds"])
    here = str(folder.resolve())
    for other in sorted(path.parent.glob("*.json")):
        if (_recorded(other) or {}).get("folder") == here:
            raise CheckpointError(f"{folder / KEY} is not the key its rounds were recorded under ({other}): the run "
                                  "folder was rewritten; rerun with --overwrite")  # fmt: skip
    raise CheckpointError(f"no record of this run's rounds in {path.parent} (made by another user or machine, or "
                          "before rounds were recorded there): it cannot be told apart from a rewound copy; rerun "
                          "with --overwrite")  # fmt: skip


def save(folder: Path, state: dict[str, Any]) -> None:
    """Write ``state`` (with its ``next_round``) as the run's authenticated checkpoint, then the rounds spent, in
    the folder and outside it."""
    key = _key(folder, create=True)
    buf = io.BytesIO()
    torch.save(_plain(state), buf)
    _write(folder / CHECKPOINT, _sealed(key, buf.getvalue()))
    spent = json.dumps({"rounds": int(state["next_round"])}).encode()
    _write(folder / SPENT, _sealed(key, spent))
    _record(folder, key, int(state["next_round"]))


def discard(folder: Path) -> None:
    """Remove a run folder that no one asked to keep (``train`` without ``--out`` keeps its checkpoint in one while it
    runs) with the count of its rounds outside it."""
    key = folder / KEY
    if key.is_file():
        counter_path(key.read_bytes()).unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


def load(folder: Path) -> dict[str, Any]:
    """The run's checkpoint, authenticated, as plain data; refused if it ran fewer rounds than ``rounds.spent`` or
    the count recorded outside the folder, or if that count is missing."""
    path = folder / CHECKPOINT
    key = _key(folder, create=False)
    payload = _opened(key, path.read_bytes(), str(path))
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as exc:  # an authentic payload that is not plain data: never unpickle it
        raise CheckpointError(f"{path} holds more than plain data: {type(exc).__name__}") from None
    spent_path = folder / SPENT
    if not spent_path.is_file():  # every save writes it: a checkpoint without it was put back with it removed
        raise CheckpointError(f"{spent_path} is missing: the run's count of rounds spent was removed, so an older "
                         "checkpoint cannot be told apart; rerun with --overwrite")  # fmt: skip
    spent = json.loads(_opened(key, spent_path.read_bytes(), str(spent_path)))["rounds"]
    spent = max(spent, _recorded_rounds(folder, key))
    if int(state["next_round"]) < spent:
        raise CheckpointError(
            f"{path} ran {state['next_round']} rounds but this run has already spent {spent}: an older checkpoint "
            "was put back; resuming from it would release more noisy rounds than the metrics report"
        )
    return state
