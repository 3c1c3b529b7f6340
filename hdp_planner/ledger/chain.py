"""The ledger's events as a hash chain: each event commits, by SHA-256 over a canonical encoding, to its place, its
kind, its content and the digest of the event before it.

Appending is the only write: a status change (a round released, a run finished) is a new event, never an edit. So
deleting an event leaves a gap in the numbering or a link that points at nothing, and editing one changes its digest
(or, recomputed, breaks the next event's link): :func:`chain_break` names the first such event. What a chain cannot
show is a rewrite of every event from the edited one on, by someone who holds the database: the digest of the last
event (the **head**) is what a deployer pins or publishes, and :func:`chain_break` checks that a pinned head is still
in the chain.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GENESIS = "0" * 64
"""The link of the first event."""


def canonical(value: Any) -> str:
    """The canonical JSON of ``value``: keys sorted, no spaces, ASCII, no NaN (floats round-trip exactly)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def event_digest(*, seq: int, kind: str, prev: str, body: str) -> str:
    """SHA-256 of the canonical encoding of ``[seq, kind, prev, body]`` (``body``: the event's canonical JSON)."""
    return hashlib.sha256(canonical([seq, kind, prev, body]).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Event:
    """One appended event: its place ``seq`` (1, 2, …), ``kind``, canonical JSON ``body``, the digest of the event
    before it (``prev``) and its own ``digest``."""

    seq: int
    kind: str
    body: str
    prev: str
    digest: str

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.body)


def next_event(last: Event | None, kind: str, data: dict[str, Any]) -> Event:
    """The event that appends ``data`` after ``last`` (None: the first)."""
    seq, prev, body = (last.seq + 1 if last else 1), (last.digest if last else GENESIS), canonical(data)
    return Event(
        seq=seq, kind=kind, body=body, prev=prev, digest=event_digest(seq=seq, kind=kind, prev=prev, body=body)
    )


def chain_break(events: Sequence[Event], head: str | None = None) -> str | None:
    """The first place where ``events`` (in order of ``seq``) are not an unbroken chain, in words; None if they are.
    ``head``: a digest pinned earlier, which must be one of the events' digests."""
    prev, seq = GENESIS, 0
    for e in events:
        if e.seq != seq + 1:
            return f"event {seq + 1}{f'..{e.seq - 1}' if e.seq > seq + 2 else ''} deleted (event {e.seq} follows " \
                   f"{seq or 'the start'})"  # fmt: skip
        if e.prev != prev:
            return f"event {e.seq} does not follow event {seq} (an event before it was edited or replaced)"
        if e.digest != event_digest(seq=e.seq, kind=e.kind, prev=e.prev, body=e.body):
            return f"event {e.seq} ({e.kind}) was edited: its digest does not match its content"
        prev, seq = e.digest, e.seq
    if head is not None and head not in {e.digest for e in events}:
        return f"the pinned head {head} is not in the chain: events were removed or rewritten since it was pinned"
    return None
