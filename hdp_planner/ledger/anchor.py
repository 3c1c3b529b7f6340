"""The ledger's head kept outside its database: the last event this machine left the chain at, in a file of the
user's data folder (``$HDP_PLANNER_LEDGER_HEADS``, else ``$XDG_DATA_HOME/hdp-planner/ledger-heads``, beside the runs'
counts and the nodes' state; the folder 0700, one file per ledger, 0600, named by the SHA-256 of the ledger's URL).

The chain itself shows an event edited or deleted inside it (:func:`~.chain.chain_break`), not its last events
removed, every event from an edited one on rewritten with their digests, or the whole database put back from an older
copy. So every write records the head it leaves (:meth:`Anchor.record`), and every later read checks that the chain
still holds that event with that digest (:meth:`Anchor.problem`): each digest commits to every event before it, so
this one comparison finds all three. The chain may have grown since (other runs, other machines); it may not have
lost or changed the recorded event.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hdp_planner.io.folders import user_data_folder
from hdp_planner.ledger.chain import GENESIS, Event
from hdp_planner.ledger.errors import LedgerError

HEADS_ENV = "HDP_PLANNER_LEDGER_HEADS"
"""Where the heads are kept, if not in the user's data folder."""


@dataclass(frozen=True, kw_only=True)
class Head:
    """A chain's last event: ``events``, its place (0 for an empty chain), and its ``digest``."""

    events: int
    digest: str

    def as_dict(self) -> dict[str, int | str]:
        return {"events": self.events, "head": self.digest}


def head_of(chain: Sequence[Event]) -> Head:
    """The head of ``chain`` (in order of ``seq``): its last event, or 0 events and the genesis link."""
    return Head(events=chain[-1].seq, digest=chain[-1].digest) if chain else Head(events=0, digest=GENESIS)


def heads_folder() -> Path:
    """``$HDP_PLANNER_LEDGER_HEADS``, else the user's data folder's ``ledger-heads``."""
    return Path(os.environ.get(HEADS_ENV) or user_data_folder() / "ledger-heads").expanduser()


@dataclass(frozen=True, kw_only=True)
class Anchor:
    """The head file of the ledger at ``url`` (an SQLAlchemy URL, SQLite paths absolute)."""

    url: str
    folder: Path

    @classmethod
    def of(cls, target: str, heads: Path | None = None) -> Anchor:
        """The head file of the ledger ``target`` (an SQLAlchemy URL, or an SQLite file path, made absolute) in the
        folder ``heads`` (None: :func:`heads_folder`)."""
        url = target if "://" in target else f"sqlite:///{Path(target).expanduser().resolve()}"
        return cls(url=url, folder=heads or heads_folder())

    @property
    def path(self) -> Path:
        return self.folder / f"{hashlib.sha256(self.url.encode()).hexdigest()}.json"

    def recorded(self) -> Head | None:
        """The head recorded last (None: this machine never wrote this ledger, or the file was removed); LedgerError
        if the file cannot be read."""
        try:
            doc = json.loads(self.path.read_text())
            return Head(events=int(doc["events"]), digest=str(doc["head"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise LedgerError(f"cannot read the ledger's recorded head {self.path}: {exc}") from None

    def problem(self, chain: Sequence[Event]) -> str | None:
        """Why ``chain`` (unbroken, in order of ``seq``) does not hold the recorded head, in words (or why the head
        cannot be read); None if it does."""
        try:
            head = self.recorded()
        except LedgerError as exc:
            return str(exc)
        if head is None or head.events == 0:
            return None
        if len(chain) < head.events:
            found = (f"the chain ends at event {len(chain)}, but it was left at event {head.events}: events were "
                     "removed, or the database was put back from an older copy")  # fmt: skip
        elif chain[head.events - 1].digest != head.digest:
            found = f"event {head.events} is not the one the chain was left at: the chain was rewritten from it on"
        else:
            return None
        return f"{found} (the head recorded in {self.path}; remove it only if the ledger was replaced on purpose)"

    def record(self, head: Head) -> None:
        """Record ``head``, unless a later one is recorded already (another process of this machine wrote after it);
        under an exclusive lock of the folder, so that concurrent writers never lower it. LedgerError if it cannot be
        written."""
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(self.folder / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                known = self.recorded()
                if known is not None and known.events > head.events:
                    return
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(json.dumps({"ledger": self.url, **head.as_dict()}))
                os.replace(tmp, self.path)
        except OSError as exc:
            raise LedgerError(f"cannot record the ledger's head in {self.path}: {exc.strerror or exc}") from None
