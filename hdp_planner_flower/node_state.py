"""What a node keeps between processes: its client's participations and a mirror of the budget it has spent.

One SQLite file per client, ``DIR/client-I.sqlite``, in a folder of the node's own (node config ``state-dir``, else
:func:`default_state_dir`, the user's data folder), readable by its owner only (folders 0700, files 0600; SQLite
gives its journal the database file's mode). Every admission is one ``BEGIN IMMEDIATE`` transaction: read the
counts, check them, write the new row; so concurrent ClientApp processes of one node serialize on the file's lock
and the cap holds across processes, restarts and runs.

A participation is refused (:class:`~hdp_planner_flower.pin.RoundRefused`, before the client sends anything) when

- the client has already taken part in K rounds of the plan (its participation cap, counted per plan SHA-256 over
  every run of it), or
- joining a new run would take the client's spent budget past its own ε. The node charges each run it joins the
  plan's ε for the client's group (the plan's verification guarantees a run spends at most that), and composes runs
  by basic composition: the ε of runs add up (Dwork and Roth, *The Algorithmic Foundations of Differential Privacy*,
  Theorem 3.16). The ledger composes the same runs with RDP, which never gives more, so the mirror never reports
  less than the ledger charged. A run is Flower's run id; a round at or below the last one the node took part in
  under that id counts as a new run (a server that reuses a run id cannot make the node under-count).
"""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hdp_planner.planfile.document import budgets_digest_of, load_plan, read_document
from hdp_planner.planning.budgets import BudgetError, read_assignment
from hdp_planner_flower.mods import client_id
from hdp_planner_flower.pin import Pin, RoundRefused

SCHEMA = """CREATE TABLE IF NOT EXISTS participations (
    plan_sha256 TEXT NOT NULL, run_id INTEGER NOT NULL, server_round INTEGER NOT NULL,
    charged REAL NOT NULL, at REAL NOT NULL)"""
"""One row per participation; ``charged`` is the ε charged when the row opened a run (else 0)."""


def default_state_dir() -> Path:
    """Where a node keeps its state unless told otherwise: ``$XDG_DATA_HOME/hdp-planner/nodes`` (by default
    ``~/.local/share/hdp-planner/nodes``)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "hdp-planner" / "nodes"


def private_folder(path: str | Path) -> Path:
    """``path`` created if missing (parents too) and set to mode 0700; refuses a folder another user owns."""
    folder = Path(path).expanduser()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise RoundRefused(f"node state folder {folder} belongs to another user")
    folder.chmod(0o700)
    return folder


@dataclass(frozen=True)
class Admission:
    """What the node counted for one participation: the plan's count after it, and the client's ε spent."""

    participations: int
    spent: float


class NodeState:
    """Client ``client``'s participations and spent budget in ``folder`` (see the module's docstring)."""

    def __init__(self, folder: str | Path, client: int) -> None:
        self.folder = Path(folder).expanduser()
        self.path = self.folder / f"client-{client}.sqlite"

    def _connect(self) -> sqlite3.Connection:
        private_folder(self.folder)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # the mode before SQLite opens it
        os.fchmod(fd, 0o600)
        os.close(fd)
        conn = sqlite3.connect(self.path, timeout=120.0, isolation_level=None)
        conn.execute(SCHEMA)
        return conn

    def admit(self, *, plan_sha256: str, run_id: int, server_round: int, cap: int, epsilon: float,
              budget: float) -> Admission:  # fmt: skip
        """Count one participation in round ``server_round`` of run ``run_id`` of the plan, or refuse it: past the
        cap ``cap``, or, when it opens a run charged ``epsilon``, past ``budget``. Atomic across processes."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            used = conn.execute("SELECT COUNT(*) FROM participations WHERE plan_sha256 = ?", (plan_sha256,))
            used = int(used.fetchone()[0])
            if used >= cap:
                raise RoundRefused(f"this client has taken part in {used} rounds of the plan, its cap K = {cap}")
            last = conn.execute(
                "SELECT server_round FROM participations WHERE plan_sha256 = ? AND run_id = ? ORDER BY rowid DESC "
                "LIMIT 1",
                (plan_sha256, run_id),
            ).fetchone()
            spent = float(conn.execute("SELECT COALESCE(SUM(charged), 0) FROM participations").fetchone()[0])
            charge = epsilon if last is None or server_round <= int(last[0]) else 0.0
            if charge and spent + charge > budget * (1 + 1e-12):
                raise RoundRefused(f"joining this run would spend ε {spent + charge:.4g} of this client's budget "
                                   f"{budget:.4g} (spent so far {spent:.4g})")  # fmt: skip
            conn.execute("INSERT INTO participations VALUES (?, ?, ?, ?, ?)",
                         (plan_sha256, run_id, server_round, charge, time.time()))  # fmt: skip
            conn.execute("COMMIT")
            return Admission(used + 1, spent + charge)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            conn.close()

    def participations(self, plan_sha256: str) -> int:
        """Rounds of the plan the client has taken part in (0 without a state file)."""
        if not self.path.is_file():
            return 0
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT COUNT(*) FROM participations WHERE plan_sha256 = ?", (plan_sha256,))
            return int(row.fetchone()[0])

    def spent(self) -> float:
        """ε the client has spent over every run it joined (sum of the runs' charges)."""
        if not self.path.is_file():
            return 0.0
        with closing(self._connect()) as conn:
            return float(conn.execute("SELECT COALESCE(SUM(charged), 0) FROM participations").fetchone()[0])


@functools.lru_cache(maxsize=64)
def client_terms(plan: str, sha256: str, groups: str | None, client: int) -> tuple[float, float]:
    """(ε a run of the plan charges client ``client``: its group's ε in the plan's grouping; the client's own
    budget: its ε_i in ``hdp-plan assign``'s file, else that group's ε). ``sha256`` keys the cache."""
    p = load_plan(plan)
    epsilons = tuple(float(e) for e in p.groups.epsilon)
    if groups:
        try:
            ids, group, budgets = read_assignment(groups, epsilons, budgets_digest_of(read_document(plan)))
        except BudgetError as exc:
            raise RoundRefused(str(exc)) from None
        if str(client) not in ids:
            raise RoundRefused(f"client {client} is not in the groups file {groups}")
        i = ids.index(str(client))
        return epsilons[int(group[i])], float(budgets[i])
    by_client = np.repeat(np.arange(len(epsilons)), p.groups.size)
    if not 0 <= client < by_client.size:
        raise RoundRefused(f"client {client} is outside the plan's 0..{by_client.size - 1}")
    eps = epsilons[int(by_client[client])]
    return eps, eps


def node_budget(config, default: float) -> float:
    """The node config's ``budget`` (a client's own ε, when it is lower than the one its file records), else
    ``default``; refuses anything but a positive number."""
    if "budget" not in config:
        return default
    try:
        value = float(config["budget"])
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise RoundRefused(f"node config budget must be a positive ε, got {config['budget']!r}")
    return min(value, default)


def admit_round(pin: Pin, ctxt, *, sha256: str, cap: int, server_round: int) -> Admission:
    """Count this node's participation in ``server_round`` of the run ``ctxt.run_id`` of the plan ``pin`` pinned
    (SHA-256 ``sha256``, cap ``cap``) in its state folder, or refuse it (:meth:`NodeState.admit`)."""
    cid = client_id(ctxt)
    epsilon, budget = client_terms(pin.plan, sha256, pin.groups, cid)
    state = NodeState(pin.state_dir or default_state_dir(), cid)
    return state.admit(plan_sha256=sha256, run_id=int(ctxt.run_id), server_round=server_round, cap=cap,
                       epsilon=epsilon, budget=node_budget(ctxt.node_config, budget))  # fmt: skip
