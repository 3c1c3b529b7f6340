"""The privacy ledger: lifetime budgets, runs and per-round charges as an append-only hash chain of events
(:mod:`.chain`, :mod:`.state`) in one SQL database (SQLAlchemy Core: an embedded SQLite file by default, PostgreSQL
for several servers).

A run **reserves** every round it plans when it starts, in one serialized transaction that first checks that no
member would exceed its lifetime budget with everything already charged or reserved; each round is **released**
(charged) before its model leaves the server; a run that ends early gives back the rounds it never released.
Reservations of a run that dies (SIGKILL, power loss) stay counted, so the ledger errs on the safe side and loses
nothing. Each of these is an appended event; nothing is ever edited or deleted. Writers are serialized through one
row of ``ledger_lock`` (a row lock in PostgreSQL, the database lock in SQLite), and every write first checks the
whole chain: a ledger whose chain is broken refuses every run.

Budgets are those of a client id, for its lifetime, whatever federation name a run records: the name labels runs,
it never separates budgets (:mod:`.state`). A client has one budget (a run whose plan gives it another is refused),
and a ledger holds either a simulation's clients (a plan's ids 0..n−1) or real ones, never both. Ledgers of the
earlier, unchained schema are copied into the chain when first opened (:mod:`.legacy`). Every write records the head
it leaves outside the database, and every read refuses a chain that no longer holds it (:mod:`.anchor`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Column, Integer, MetaData, String, Table, Text, create_engine, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError

from hdp_planner.ledger.anchor import Anchor, Head, head_of
from hdp_planner.ledger.chain import Event, chain_break, next_event
from hdp_planner.ledger.composition import GroupRound, compose  # noqa: F401  (the ledger's API)
from hdp_planner.ledger.errors import LedgerError
from hdp_planner.ledger.legacy import has_legacy_tables, legacy_events
from hdp_planner.ledger.state import ClientSpending, LedgerState, LedgerStateError, RunRecord, run_event

metadata = MetaData()
ledger_lock = Table("ledger_lock", metadata, Column("id", Integer, primary_key=True), Column("version", Integer))
events = Table(
    "ledger_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("kind", String(16), nullable=False),
    Column("body", Text, nullable=False),
    Column("prev", String(64), nullable=False),
    Column("digest", String(64), nullable=False),
)


@dataclass(frozen=True, kw_only=True)
class ChainReport:
    """What ``ledger check`` reports of the chain: its length, its head (the last event's digest; GENESIS for an
    empty ledger), the first break found (None: unbroken), whether it began as a copy of an unchained ledger, and
    the head recorded outside the database (None: none recorded on this machine) with the file that holds it."""

    events: int
    head: str
    problem: str | None
    migrated: bool
    recorded: Head | None
    anchor: Path


def ledger_url(target: str) -> str:
    """An SQLAlchemy URL, or a file path taken as an SQLite database."""
    return target if "://" in target else f"sqlite:///{Path(target).expanduser()}"


class Ledger:
    """A privacy ledger: every client's lifetime spending, composed over every run it took part in.

    Args:
        target: An SQLAlchemy URL, or an SQLite file path (created owner-only: 0600); tables are created on first
            use.
        create: False (reading commands): a missing SQLite file is refused instead of created.
        heads: The folder of the heads recorded outside the database (None: :func:`~.anchor.heads_folder`).

    Raises:
        LedgerError: The ledger cannot be opened or created.
    """

    def __init__(self, target: str, *, create: bool = True, heads: Path | None = None) -> None:
        url = ledger_url(target)
        self.anchor = Anchor.of(target, heads)
        self.found: Head | None = None  # the head this ledger object first read
        self.head: Head | None = None  # the head it last read or wrote
        if "://" not in target and not Path(target).expanduser().is_file():
            if not create:
                raise LedgerError(f"no privacy ledger at {target}")
            _create_owner_only(Path(target).expanduser())
        args = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
        self.target = target
        try:
            self.engine: Engine = create_engine(url, **args)
            _create_schema(self.engine)
            self._migrate()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the privacy ledger {target}: {_reason(exc)}") from None

    def _migrate(self) -> None:
        """Copy an unchained ledger into the chain, once (under the lock, so two processes never both copy it)."""
        with self.engine.connect() as conn:
            if conn.execute(select(events.c.seq).limit(1)).first() is not None or not has_legacy_tables(conn):
                return
        with self._writing() as conn:
            if conn.execute(select(events.c.seq).limit(1)).first() is None and has_legacy_tables(conn):
                last = None
                for kind, data in legacy_events(conn):
                    last = self._append(conn, last, kind, data)

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A write transaction that holds the ledger's lock from its first statement (committed if no error); the
        head it leaves recorded outside the database once committed."""
        self._appended: Event | None = None
        with self.engine.connect() as conn, conn.begin():
            conn.execute(update(ledger_lock).where(ledger_lock.c.id == 1).values(version=ledger_lock.c.version + 1))
            yield conn
        if self._appended is not None:
            self.head = Head(events=self._appended.seq, digest=self._appended.digest)
            self.anchor.record(self.head)

    @staticmethod
    def _events(conn: Connection) -> list[Event]:
        return [
            Event(seq=r.seq, kind=r.kind, body=r.body, prev=r.prev, digest=r.digest)
            for r in conn.execute(select(events).order_by(events.c.seq))
        ]

    def _state(self, conn: Connection, run_id: str | None = None) -> tuple[LedgerState, Event | None]:
        """The replayed state (with ``run_id``: of that run only) and the last event, refused (LedgerError) if the
        chain is broken."""
        chain = self._events(conn)
        problem = chain_break(chain) or self.anchor.problem(chain)
        try:
            if problem is None:
                state = LedgerState.replay(chain, run_id)
                self.head = head_of(chain)
                self.found = self.found or self.head
                return state, (chain[-1] if chain else None)
        except LedgerStateError as exc:
            problem = str(exc)
        raise LedgerError(f"the privacy ledger {self.target} is broken: {problem}; it refuses every run until it is "
                          "restored from a copy (see `hdp-plan ledger check`)")  # fmt: skip

    def _append(self, conn: Connection, last: Event | None, kind: str, data: dict) -> Event:
        e = next_event(last, kind, data)
        conn.execute(insert(events).values(seq=e.seq, kind=e.kind, body=e.body, prev=e.prev, digest=e.digest))
        self._appended = e
        return e

    def start_run(
        self,
        *,
        federation: str,
        label: str,
        plan_sha256: str,
        membership: Mapping[str, int],
        budgets_of: Mapping[str, float],
        delta: float,
        planned: Sequence[Sequence[GroupRound]],
        start: int = 0,
        supersedes: str | None = None,
        simulated: bool | None = None,
    ) -> str:
        """Register a run and reserve its rounds, or refuse it before round 1 if any member would exceed its
        lifetime budget.

        Args:
            federation: The federation's name (runs of one federation are listed together).
            label: A label for the run.
            plan_sha256: The plan file's SHA-256.
            membership: Each client's group index.
            budgets_of: Each client's ε, registered at first sight: a run that gives a registered client another ε
                is refused (a client has one budget).
            delta: The δ of the budgets.
            planned: ``planned[r][m]``: the cost of the run's round r (the plan's round ``start + r``) to group m's
                members.
            start: The plan's round the run starts at.
            supersedes: The run a resumed run continues (a run of the same plan still open, e.g. killed): first its
                unreleased rounds are given back and it is finished, its released rounds staying charged.
            simulated: True: a simulation's clients (the ids 0..n−1 of a plan's default mapping), False: clients named
                by a groups file or a deployment; a ledger never holds both (None: not recorded, not checked).

        Returns:
            The run's id.

        Raises:
            LedgerError: A member would exceed its budget, a member's budget differs from the one registered, the
                run's kind of clients is not the ledger's, or the ledger cannot be written.
        """
        if supersedes is not None:
            self.finish(supersedes, of=plan_sha256)
        data = run_event(run_id=str(uuid.uuid4()), federation=federation, label=label, plan_sha256=plan_sha256,
                         start=start, started=time.time(), delta=delta, membership=membership, budgets_of=budgets_of,
                         planned=planned, simulated=simulated)  # fmt: skip
        over = self._reserve(data, keep=True)
        if over:
            worst = max(over, key=lambda s: s.epsilon_spent / s.epsilon_budget)
            raise LedgerError(
                f"refused before round 1: {len(over)} client(s) would exceed their lifetime budget in the ledger "
                f"{self.target}, e.g. client {worst.client_id}: ε {worst.epsilon_spent:.4g} > {worst.epsilon_budget:g} "
                f"with this run's {len(planned)} rounds; see `hdp-plan ledger show`"
            )
        return data["run_id"]

    def would_exceed(
        self,
        *,
        membership: Mapping[str, int],
        budgets_of: Mapping[str, float],
        delta: float,
        planned: Sequence[Sequence[GroupRound]],
        federation: str = "",
        simulated: bool | None = None,
    ) -> list[ClientSpending]:
        """The clients a run with these rounds would take past their budget (nothing is written).

        Args:
            membership: As :meth:`start_run`'s.
            budgets_of: As :meth:`start_run`'s.
            delta: As :meth:`start_run`'s.
            planned: As :meth:`start_run`'s.
            federation: As :meth:`start_run`'s.
            simulated: As :meth:`start_run`'s.

        Returns:
            The spending of every client the run would take past its budget (empty: the run fits).

        Raises:
            LedgerError: As :meth:`start_run`'s, except for a budget that would be exceeded.
        """
        data = run_event(run_id=str(uuid.uuid4()), federation=federation, label="dry run", plan_sha256="0" * 64,
                         start=0, started=time.time(), delta=delta, membership=membership, budgets_of=budgets_of,
                         planned=planned, simulated=simulated)  # fmt: skip
        return self._reserve(data, keep=False)

    def _reserve(self, data: dict, keep: bool) -> list[ClientSpending]:
        try:
            with self._writing() as conn:
                state, last = self._state(conn)
                refused = state.refusal(data, self.target)
                if refused is not None:
                    raise LedgerError(refused)
                state.apply((last.seq if last else 0) + 1, "run", data)
                spent = state.spending(data["clients"])
                over = [s for s in spent if s.epsilon_spent > s.epsilon_budget * (1 + 1e-9)]
                if keep and not over:
                    self._append(conn, last, "run", data)
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None
        return over

    def release(self, run_id: str, round_index: int) -> None:
        """Charge a reserved round (before its model leaves the server).

        Args:
            run_id: The run, as :meth:`start_run` returned it.
            round_index: The run's round, from 0.

        Raises:
            LedgerError: The round was not reserved (or is released already), or the ledger cannot be written.
        """
        try:
            with self._writing() as conn:
                state, last = self._state(conn, run_id)
                run = state.runs.get(run_id)
                if run is None or run.finished or not 0 <= round_index < len(run.rounds) or round_index in run.released:
                    raise LedgerError(f"round {round_index + 1} of run {run_id} was not reserved: not released")
                self._append(conn, last, "release", {"run_id": run_id, "round": round_index})
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None

    def finish(self, run_id: str, *, of: str | None = None) -> None:
        """The run is over: rounds it reserved and never released are given back (nothing if it had finished).

        Args:
            run_id: The run, as :meth:`start_run` returned it.
            of: A plan digest: finish the run only if it is a run of that plan (a resumed run's predecessor).

        Raises:
            LedgerError: The ledger cannot be written.
        """
        try:
            with self._writing() as conn:
                state, last = self._state(conn, run_id)
                run = state.runs.get(run_id)
                if run is None or run.finished or (of is not None and run.plan_sha256 != of):
                    return
                given_back = len(run.rounds) - len(run.released)
                self._append(conn, last, "finish", {"run_id": run_id, "given_back": given_back})
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None

    def state(self) -> LedgerState:
        """The ledger's state, replayed from its events.

        Returns:
            Every run and budget the events record.

        Raises:
            LedgerError: The chain is broken, or the ledger cannot be read.
        """
        try:
            with self.engine.connect() as conn:
                return self._state(conn)[0]
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot read the privacy ledger {self.target}: {_reason(exc)}") from None

    def spending(self, federation: str | None = None, clients: Iterable[str] | None = None) -> list[ClientSpending]:
        """Clients' lifetime spending, each composed over all its runs under any federation name.

        Args:
            federation: Only the clients of runs that recorded this name (None: every client).
            clients: Only these clients (None: every client).

        Returns:
            One entry per client.
        """
        state = self.state()
        if federation is not None:
            named = {c for r in state.runs.values() if r.federation == federation for c in r.clients}
            clients = named if clients is None else named & set(clients)
        return state.spending(clients)

    def runs(self, federation: str | None = None) -> list[RunRecord]:
        """The runs, in the order they started.

        Args:
            federation: Only the runs that recorded this name (None: every run).

        Returns:
            The runs as their events left them.
        """
        return [r for r in self.state().runs.values() if federation is None or r.federation == federation]

    def check_chain(self, head: str | None = None) -> ChainReport:
        """Check the whole chain without refusing.

        Args:
            head: A pinned head digest that must still be in the chain (None: none pinned).

        Returns:
            The chain's length, head, first break (None: unbroken; a chain that no longer holds the head recorded
            outside the database is broken too) and that recorded head.
        """
        try:
            with self.engine.connect() as conn:
                chain = self._events(conn)
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot read the privacy ledger {self.target}: {_reason(exc)}") from None
        problem = chain_break(chain, head) or self.anchor.problem(chain)
        migrated = any(e.kind == "migrated" for e in chain)
        if problem is None:
            try:
                LedgerState.replay(chain)
            except LedgerStateError as exc:
                problem = str(exc)
        recorded = None if problem else self.anchor.recorded()  # an unreadable head file is a problem already
        return ChainReport(events=len(chain), head=head_of(chain).digest, problem=problem, migrated=migrated,
                           recorded=recorded, anchor=self.anchor.path)  # fmt: skip


def _create_schema(engine: Engine, attempts: int = 5) -> None:
    """The tables and the lock's row. Processes opening a new ledger at once race on CREATE TABLE and on the row
    (PostgreSQL refuses the loser with a duplicate-key or duplicate-table error): the loser tries again and finds the
    winner's schema."""
    for attempt in range(attempts):
        try:
            metadata.create_all(engine)
            with engine.begin() as conn:
                if conn.execute(select(ledger_lock.c.id)).first() is None:
                    conn.execute(insert(ledger_lock).values(id=1, version=0))
            return
        except (IntegrityError, ProgrammingError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def _create_owner_only(path: Path) -> None:
    """A new SQLite ledger file readable and writable by its owner only (0600); SQLite keeps the mode."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:  # another process created it first
        pass
    except OSError as exc:
        raise LedgerError(f"cannot open the privacy ledger {path}: {exc.strerror or exc}") from None


def _reason(exc: SQLAlchemyError) -> str:
    """The database's own one-line reason (read-only file, disk full, refused connection …)."""
    orig = getattr(exc, "orig", None)
    return str(orig or exc).strip().splitlines()[0]
