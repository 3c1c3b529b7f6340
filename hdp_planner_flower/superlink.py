"""Flower's SuperLink with its SQLite state waiting a minute for a lock, not five seconds.

flwr 1.41's SuperLink keeps its state (registered keys, messages, the objects they carry) in SQLite (``--database``)
with a busy timeout of 5000 ms. On a loaded machine a write that waits longer fails ("database is locked") and what
it wrote is lost: a node's reply among them (the SuperNode logs "Failed to push object ... The push session may have
expired"), so the ServerApp waits out its round timeout for a reply that never comes, and a SecAgg+ round, four
message rounds of every sampled node, meets that four times as often as a trusted one. ``python -m
hdp_planner_flower.superlink ARGS`` is ``flower-superlink ARGS`` with SQLite's busy timeout at
:data:`BUSY_TIMEOUT_MS`: a write waits for the lock instead of failing; nothing else changes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

BUSY_TIMEOUT_MS = 60_000
"""How long a connection of the SuperLink's state waits for SQLite's lock before it fails (Flower: 5000)."""


def patient(pragmas: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``pragmas`` (Flower's ``SQLITE_PRAGMAS``) with ``busy_timeout`` at :data:`BUSY_TIMEOUT_MS`."""
    return tuple((name, str(BUSY_TIMEOUT_MS) if name == "busy_timeout" else value) for name, value in pragmas)


def wait_for_locks() -> None:
    """Every SQLite connection Flower opens from now on in this process waits :data:`BUSY_TIMEOUT_MS` for a lock."""
    from flwr.supercore import sql_mixin

    sql_mixin.SQLITE_PRAGMAS = patient(sql_mixin.SQLITE_PRAGMAS)


def main() -> None:
    """``flower-superlink`` with :func:`wait_for_locks`; the command line is Flower's."""
    from flwr.superlink.cli import flower_superlink

    wait_for_locks()
    sys.argv[0] = "flower-superlink"
    sys.exit(flower_superlink())


if __name__ == "__main__":
    main()
