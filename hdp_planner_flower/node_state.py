"""What a node keeps between processes: its client's participations and a mirror of the budget it has spent.

One SQLite file per client, ``DIR/client-I.sqlite``, in a folder of the node's own (node config ``state-dir``, else
:func:`default_state_dir`, the user's data folder), readable by its owner only (folders 0700, files 0600; SQLite
gives its journal the database file's mode). Every admission is one ``BEGIN IMMEDIATE`` transaction: read the
counts, check them, write the new rows; so concurrent ClientApp processes of one node serialize on the file's lock
and the cap holds across processes, restarts and runs.

The mirror is what the privacy ledger charges the client, as far as the node can see it: each round of a run, up
to the last one the node was sampled in (the ledger also charges the rounds after it, which the node never sees, so
the mirror never exceeds the ledger's charge), at its group's cost (the ledger's
:class:`~hdp_planner.rules.costs.GroupRound`, from the trainer's ``planned_costs``: the plan's sampled Gaussian,
or the trust object's distributed discrete Gaussian), composed over every run with the ledger's own
:func:`~hdp_planner.ledger.store.compose`. A run is Flower's run id; a round at or
below the last one the node saw under that id counts as a new run, so a server that reuses a run id cannot make
the node under-count. A participation is refused (:class:`~hdp_planner_flower.pin.RoundRefused`, before the client
sends anything) when the client has already taken part in K rounds of the plan (its cap, per plan SHA-256 over every
run), or when the rounds it would be charged would take its spent ε past its own budget. That check needs no
accountant while every round charged to the client is of this plan and they are, kind by kind, at most one run's
(:func:`within_run`): a part of a run spends no more than the whole run, whose ε the node composed once per plan
(:attr:`Terms.run_epsilon`); otherwise the node composes what it has charged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from hdp_planner.rules.costs import GroupRound
from hdp_planner_flower.pin import (
    Pin,
    PinnedPlan,
    RoundRefused,
    file_sha256,
    load_pinned,
    pinned_digest,
    pinned_spec,
    read_pinned,
)
from hdp_planner_flower.plan_cache import derived
from hdp_planner_flower.records import HDP
from hdp_planner_flower.stages import client_id

SCHEMA = """CREATE TABLE IF NOT EXISTS rounds (
    plan_sha256 TEXT NOT NULL, run_id TEXT NOT NULL, server_round INTEGER NOT NULL, participated INTEGER NOT NULL,
    q REAL NOT NULL, noise_multiplier REAL NOT NULL, tau_d REAL, delta REAL NOT NULL, at REAL NOT NULL,
    accountant TEXT NOT NULL DEFAULT 'rdp', delta_cost REAL NOT NULL DEFAULT 0)"""
"""One row per round charged to the client (``participated`` 1 where it contributed), with that round's whole cost
(:class:`~hdp_planner.rules.costs.GroupRound`: its accountant and the δ its law's events spend too); the run id is
text (Flower's ids are unsigned 64-bit, beyond SQLite's signed INTEGER)."""
COST_COLUMNS = "q, noise_multiplier, tau_d, accountant, delta_cost"
"""A charged round's cost, as :class:`~hdp_planner.rules.costs.GroupRound` holds it."""


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


@dataclass(frozen=True, kw_only=True)
class Terms:
    """What the client accepted in a plan: each round's cost to its group (rounds 1..T), δ, its cap K, its lifetime
    budget ε, and ε at δ of one whole run (the ledger's composition of the T rounds' costs; infinite: not known)."""

    costs: tuple[GroupRound, ...]
    delta: float
    cap: int
    budget: float
    run_epsilon: float = math.inf


@dataclass(frozen=True, kw_only=True)
class Admission:
    """What the node counted for one participation: the plan's count after it, and the client's ε spent (the
    composition of every round charged to it; None where :func:`within_run` admitted the round without composing)."""

    participations: int
    spent: float | None


def state_file(folder: str | Path, client: int) -> Path:
    """Client ``client``'s SQLite file in ``folder``: ``client-I.sqlite``."""
    return Path(folder).expanduser() / f"client-{client}.sqlite"


def private_connection(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file ``path``, created 0600 (before SQLite opens it) in a folder of mode 0700."""
    private_folder(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    os.close(fd)
    return sqlite3.connect(path, timeout=120.0, isolation_level=None)


class NodeState:
    """Client ``client``'s participations and charged rounds in ``folder`` (see the module's docstring)."""

    def __init__(self, folder: str | Path, client: int) -> None:
        self.path = state_file(folder, client)

    def _connect(self) -> sqlite3.Connection:
        conn = private_connection(self.path)
        conn.execute(SCHEMA)
        columns = {row[1] for row in conn.execute("PRAGMA table_info(rounds)")}
        for column, kind in (("accountant", "TEXT NOT NULL DEFAULT 'rdp'"), ("delta_cost", "REAL NOT NULL DEFAULT 0")):
            if column not in columns:  # a state file of an earlier version, whose rounds cost no δ of their own
                conn.execute(f"ALTER TABLE rounds ADD COLUMN {column} {kind}")
        return conn

    def admit(self, *, plan_sha256: str, run_id: int, server_round: int, terms: Terms) -> Admission:
        """Count a participation in round ``server_round`` of run ``run_id`` of the plan and charge the rounds since
        the node's last one in that run (all of 1..``server_round`` for a new run), or refuse: past the cap, or
        past the budget. Atomic across processes."""
        if not 1 <= server_round <= len(terms.costs):
            raise RoundRefused(f"round {server_round} is outside the plan's 1..{len(terms.costs)}")
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            used = conn.execute("SELECT COUNT(*) FROM rounds WHERE plan_sha256 = ? AND participated = 1",
                                (plan_sha256,)).fetchone()[0]  # fmt: skip
            if used >= terms.cap:
                raise RoundRefused(f"this client has taken part in {used} rounds of the plan, its cap K = {terms.cap}")
            last = conn.execute("SELECT server_round FROM rounds WHERE plan_sha256 = ? AND run_id = ? ORDER BY rowid "
                                "DESC LIMIT 1", (plan_sha256, str(run_id))).fetchone()  # fmt: skip
            first = 1 if last is None or server_round <= int(last[0]) else int(last[0]) + 1
            new = [(r, terms.costs[r - 1]) for r in range(first, server_round + 1)]
            charged = conn.execute(f"SELECT plan_sha256, {COST_COLUMNS}, COUNT(*) FROM rounds GROUP BY plan_sha256, "
                                   f"{COST_COLUMNS}").fetchall()  # fmt: skip
            fits = within_run(charged, [g for _, g in new], plan_sha256=plan_sha256, terms=terms)
            spent = None if fits else _composed(conn, [g for _, g in new], terms.delta)
            if spent is not None and spent > terms.budget * (1 + 1e-9):
                raise RoundRefused(f"round {server_round} would bring this client's spent ε to {spent:.4g}, past its "
                                   f"budget {terms.budget:.4g}")  # fmt: skip
            now = time.time()
            conn.executemany(f"INSERT INTO rounds (plan_sha256, run_id, server_round, participated, delta, at, "
                             f"{COST_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(plan_sha256, str(run_id), r, int(r == server_round), terms.delta, now, g.q,
                               g.noise_multiplier, g.tau_d, g.accountant, g.delta_cost) for r, g in new])  # fmt: skip
            conn.execute("COMMIT")
            return Admission(participations=used + 1, spent=spent)
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
            row = conn.execute("SELECT COUNT(*) FROM rounds WHERE plan_sha256 = ? AND participated = 1",
                               (plan_sha256,))  # fmt: skip
            return int(row.fetchone()[0])

    def spent(self, delta: float) -> float:
        """ε at ``delta`` the client has spent over every round charged to it (0 without a state file)."""
        if not self.path.is_file():
            return 0.0
        with closing(self._connect()) as conn:
            return _composed(conn, [], delta)


def within_run(charged, new: Sequence[GroupRound], *, plan_sha256: str, terms: Terms) -> bool:
    """Whether the client's budget pays for ``new`` without composing: every round ``charged`` to it (rows of
    ``plan_sha256``, the :data:`COST_COLUMNS`, ``count``) is of this plan, those and ``new`` are, kind by kind, at most
    the rounds of one run of it (``terms.costs``), and that run's ε is within the client's budget. A part of a run
    spends no more than the whole run (post-processing), so the check :meth:`NodeState.admit` would compose holds."""
    if not terms.run_epsilon <= terms.budget * (1 + 1e-9) or any(row[0] != plan_sha256 for row in charged):
        return False
    counts = Counter({GroupRound(q=q, noise_multiplier=z, tau_d=tau, accountant=a, delta_cost=dc): int(c)
                      for _, q, z, tau, a, dc, c in charged})  # fmt: skip
    counts.update(new)
    run = Counter(terms.costs)
    return all(run[kind] >= c for kind, c in counts.items())


def _composed(conn: sqlite3.Connection, extra: Sequence[GroupRound], delta: float) -> float:
    """ε at ``delta`` of the rounds charged so far plus ``extra`` (the ledger's composition)."""
    from hdp_planner.ledger.composition import compose  # the accountants: only where no plan's verdict decides

    rows = conn.execute(f"SELECT {COST_COLUMNS}, COUNT(*) FROM rounds GROUP BY {COST_COLUMNS}")
    counts = Counter({GroupRound(q=q, noise_multiplier=z, tau_d=tau, accountant=a, delta_cost=dc): int(c)
                      for q, z, tau, a, dc, c in rows})  # fmt: skip
    counts.update(extra)
    return compose(counts, delta)


def kept(pin: Pin, what: str, derive):
    """What this node derives from the plan ``pin`` pinned (its hash checked first), from its own cache in its state
    folder (:mod:`.plan_cache`): derived once per plan, method and groups file, whatever process asks."""
    digest = pinned_digest(pin)
    if pin.groups and not Path(pin.groups).is_file():
        raise RoundRefused(f"groups file {pin.groups} not found")
    return derived(private_folder(pin.state_dir or default_state_dir()), plan_sha256=digest, method=pin.method,
                   groups_sha256=file_sha256(pin.groups) if pin.groups else "", what=what, derive=derive)  # fmt: skip


@functools.lru_cache(maxsize=8)
def pinned_plan(pin: Pin) -> PinnedPlan:
    """The plan ``pin`` pinned, read, hash-checked and verified by this node (:func:`~.pin.load_pinned`), kept in its
    cache."""
    return kept(pin, "pinned plan" + (" (sparse graph)" if pin.sparse_graph else ""), lambda: load_pinned(pin))


@functools.lru_cache(maxsize=4096)  # a simulation runs many clients in one process
def client_terms(pin: Pin, *, client: int, secure: bool) -> Terms:
    """The terms of client ``client`` in the plan ``pin`` pinned (its hash checked, the plan verified): its group
    in the pinned method's row and its budget as the ledger has them (``plan_clients``: ``hdp-plan assign``'s file,
    or the plan's grouping), each round's cost to that group as the ledger charges it (``planned_costs``; under
    ``secure`` the plan's secure aggregation's distributed rounds), δ, the cap on its participations under the
    trust model the round runs (:meth:`~hdp_planner.planning.plan.Trust.cap`: K, a cohort's memberships, or T), and
    one run's ε; kept in the node's cache."""
    return kept(pin, f"terms of client {client}{' under secure aggregation' if secure else ''}",
                lambda: derive_terms(pin, client=client, secure=secure))  # fmt: skip


def derive_terms(pin: Pin, *, client: int, secure: bool) -> Terms:
    """:func:`client_terms`, derived from the plan file; under ``secure`` from the pinned method's secure form
    (:func:`~.pin.pinned_spec`, the law derived once per process for the pinned plan too), else from its trusted
    rules."""
    from hdp_planner.ledger.runs import plan_clients
    from hdp_planner_train.rules.specs import METHOD_NAMES, method_spec
    from hdp_planner_train.run.ledger import planned_costs

    _, plan = read_pinned(pin)
    row = METHOD_NAMES.get(pin.method)
    if row is None:
        raise RoundRefused(f"the node pins method {pin.method!r}, not one of {', '.join(METHOD_NAMES)}")
    try:
        membership, budgets = plan_clients(plan, plan.method(row), pin.groups)
        spec = pinned_spec(pin)[2] if secure else method_spec(plan, pin.method)
    except ValueError as exc:
        raise RoundRefused(str(exc).splitlines()[0]) from None
    if str(client) not in membership:
        raise RoundRefused(f"client {client} is not one of the plan's clients")
    m, rounds = membership[str(client)], plan.config.rounds
    costs = tuple(r[m] for r in planned_costs(plan, spec=spec, row=row, start=0, rounds=rounds))
    cap = spec.trust.cap(plan.method(row), plan.config, m)
    return Terms(costs=costs, delta=plan.config.delta, cap=cap, budget=budgets[str(client)],
                 run_epsilon=run_epsilon(costs, plan.config.delta))  # fmt: skip


@functools.lru_cache(maxsize=256)  # a group's clients share their costs
def run_epsilon(costs: tuple[GroupRound, ...], delta: float) -> float:
    """ε at ``delta`` of one run whose rounds cost ``costs`` (the ledger's composition), derived with a client's
    terms."""
    from hdp_planner.ledger.composition import compose

    return compose(Counter(costs), delta)


def node_budget(config, terms: Terms) -> Terms:
    """``terms`` with the node config's ``budget`` (the client's own ε, where it is below the plan's) in place;
    refuses anything but a positive number."""
    if "budget" not in config:
        return terms
    try:
        value = float(config["budget"])
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise RoundRefused(f"node config budget must be a positive ε, got {config['budget']!r}")
    return dataclasses.replace(terms, budget=min(value, terms.budget))


def admit_round(pin: Pin, ctxt, *, server_round: int, secure: bool) -> Admission:
    """Count this node's participation in ``server_round`` of the run ``ctxt.run_id`` of the plan ``pin`` pinned, in
    its state folder, or refuse it (:meth:`NodeState.admit` with :func:`client_terms`)."""
    cid = client_id(ctxt)
    terms = node_budget(ctxt.node_config, client_terms(pin, client=cid, secure=secure))
    state = NodeState(pin.state_dir or default_state_dir(), cid)
    return state.admit(plan_sha256=pin.sha256, run_id=int(ctxt.run_id), server_round=server_round, terms=terms)


def guard_mod(msg, ctxt, call_next):
    """Flower mod for a trusted server's train messages: a node whose config pins a plan (``plan``,
    ``plan-sha256``) counts the round in its state first and refuses it past its cap or budget."""
    if msg.metadata.message_type.startswith("train") and "plan" in ctxt.node_config:
        pin = Pin.from_node_config(ctxt.node_config)
        admit_round(pin, ctxt, server_round=int(msg.content[HDP]["server-round"]), secure=False)
    return call_next(msg, ctxt)
