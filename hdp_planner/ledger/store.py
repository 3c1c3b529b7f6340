"""The privacy ledger: lifetime budgets, runs, members and per-round charges in one SQL database (SQLAlchemy Core:
an embedded SQLite file by default, PostgreSQL for several servers).

A run **reserves** every round it plans when it starts, in one serialized transaction that first checks that no
member would exceed its lifetime budget with everything already charged or reserved; each round is **released**
(marked charged) before its model leaves the server; a run that ends early gives back the rounds it never
released. Reservations of a run that dies (SIGKILL, power loss) stay counted, so the ledger errs on the safe side
and loses nothing. Writers are serialized through one row of ``ledger_lock`` (a row lock in PostgreSQL, the
database lock in SQLite).

A client's spending composes every round of every run it is a member of, in the group it was in, released or
reserved, at its lifetime δ: an upper bound on its (ε, δ). Each charge records its kind (a Poisson-subsampled
Gaussian, or with ``tau_d`` a distributed discrete Gaussian sum under secure aggregation) and the accountant that
planned it, and :func:`compose` reports the smallest of the bounds valid for the whole composition:

- RDP, always: dp-accounting's RDP accountant for the sampled Gaussian (Mironov 2017; Mironov, Talwar and Zhang
  2019); with any distributed round, every round at the integer orders 2..256 with Zhu and Wang's bound for Poisson
  subsampling (valid for every mechanism, the Gaussian's included, so mixing both kinds never under-reports), a
  distributed round's RDP being α/(2z²) + τ·d' (:mod:`hdp_planner.distributed.accounting`, Proposition 14);
- PLD, where every round is a sampled Gaussian and one was planned by PLD: a plan calibrated with PLD runs within
  the budget RDP would refuse.

Ledgers written before ``tau_d`` or ``accountant`` existed gain the columns when opened.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    delete,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import dp_event, epsilons_spent, quiet_dp_accounting
from hdp_planner.accounting.rdp import kl_certifies_zero
from hdp_planner.distributed.accounting import ORDERS, epsilon_from_rdp, poisson_subsampled_rdp, release_rdp

metadata = MetaData()
ledger_lock = Table("ledger_lock", metadata, Column("id", Integer, primary_key=True), Column("version", Integer))
budgets = Table(
    "budgets",
    metadata,
    Column("federation", String(200), primary_key=True),
    Column("client_id", String(200), primary_key=True),
    Column("epsilon", Float, nullable=False),
    Column("delta", Float, nullable=False),
)
runs = Table(
    "runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("federation", String(200), nullable=False),
    Column("label", String(400), nullable=False),
    Column("plan_sha256", String(64), nullable=False),
    Column("planned_rounds", Integer, nullable=False),
    Column("started", Float, nullable=False),
    Column("status", String(16), nullable=False),  # running | finished
)
members = Table(
    "members",
    metadata,
    Column("run_id", String(36), ForeignKey("runs.run_id"), primary_key=True),
    Column("client_id", String(200), primary_key=True),
    Column("group_index", Integer, nullable=False),
)
charges = Table(
    "charges",
    metadata,
    Column("run_id", String(36), ForeignKey("runs.run_id"), primary_key=True),
    Column("round", Integer, primary_key=True),
    Column("group_index", Integer, primary_key=True),
    Column("q", Float, nullable=False),
    Column("noise_multiplier", Float, nullable=False),
    Column("status", String(16), nullable=False),  # reserved | released
    Column("tau_d", Float, nullable=True),  # distributed discrete Gaussian: Proposition 14's τ·d' (None: Gaussian)
    Column("accountant", String(16), nullable=True),  # the accountant that planned the round (None: rdp)
)


class LedgerError(RuntimeError):
    """The ledger refuses (a budget would be exceeded) or cannot be written: one line."""


@dataclass(frozen=True)
class GroupRound:
    """What one group's release of one round costs its members: a Poisson(q)-sampled Gaussian of multiplier σ, or,
    with ``tau_d``, a distributed discrete Gaussian sum of multiplier z and Proposition 14's τ·d'. ``accountant``:
    the registered accountant that planned it (its spending accountant)."""

    q: float
    noise_multiplier: float
    tau_d: float | None = None
    accountant: str = "rdp"


@dataclass(frozen=True)
class ClientSpending:
    client_id: str
    epsilon_budget: float
    delta: float
    epsilon_spent: float
    released_rounds: int
    reserved_rounds: int

    @property
    def remaining(self) -> float:
        return self.epsilon_budget - self.epsilon_spent


def ledger_url(target: str) -> str:
    """An SQLAlchemy URL, or a file path taken as an SQLite database."""
    return target if "://" in target else f"sqlite:///{Path(target).expanduser()}"


def compose(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """ε at ``delta`` of the composition of ``rounds[g]`` rounds of each g: the smallest of the upper bounds that hold
    for the whole composition (each is one, so their minimum is one): RDP always (:func:`compose_rdp`), and, where
    every round is a sampled Gaussian and one was planned by PLD, dp-accounting's PLD (:func:`compose_pld`)."""
    if not rounds:
        return 0.0
    bounds = [compose_rdp(rounds, delta)]
    if all(g.tau_d is None for g in rounds) and any(get_accountant(g.accountant).refines for g in rounds):
        bounds.append(compose_pld(rounds, delta))
    return min(bounds)


def compose_rdp(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """The RDP bound: dp-accounting's RDP accountant for sampled Gaussian rounds, or 0 where the closed-form bound of
    orders 1.1 … 2 certifies it (the planner's RDP accountant); :func:`compose_distributed` with any distributed
    discrete Gaussian round."""
    if any(g.tau_d is not None for g in rounds):
        return compose_distributed(rounds, delta)
    if kl_certifies_zero([(g.noise_multiplier, g.q, count) for g, count in rounds.items()], delta):
        return 0.0  # as the planner's accountant: dp-accounting's sums are float noise or loose there
    acc = RdpAccountant()
    with quiet_dp_accounting():  # its "failed to converge" lines exclude orders, never under-report
        for g, count in rounds.items():
            acc.compose(dp_event(g.noise_multiplier, g.q, count))
        return float(acc.get_epsilon(delta))


def compose_pld(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """The PLD bound of sampled Gaussian rounds (Koskela, Jälkö and Honkela 2020; dp-accounting's PLDAccountant,
    pessimistic estimate). One kind of round is measured by the planner's own PLD accountant
    (:func:`epsilons_spent`, the ε its plan was calibrated with); several kinds, σ and q mixed, by dp-accounting's
    ``PLDAccountant`` at its default discretization, composing every kind's PLD."""
    if len(rounds) == 1:
        ((g, count),) = rounds.items()
        return float(epsilons_spent(noise_multipliers=[g.noise_multiplier], q=[g.q], rounds=count, delta=delta,
                                    accountant="pld")[0])  # fmt: skip
    acc = PLDAccountant()
    for g, count in rounds.items():
        acc.compose(dp_event(g.noise_multiplier, g.q, count))
    return float(acc.get_epsilon(delta))


def compose_distributed(rounds: Mapping[GroupRound, int], delta: float) -> float:
    """ε at ``delta`` of ``rounds`` at the integer orders 2..256: each round's RDP α/(2z²) + τ·d' (0 for a Gaussian
    round) amplified by Zhu and Wang's Poisson-subsampling bound, summed, converted by Canonne, Kamath and Steinke's
    Proposition 12."""
    total = np.zeros(ORDERS.size)
    for g, count in rounds.items():
        rdp = release_rdp(ORDERS, noise_multiplier=g.noise_multiplier, tau_d=g.tau_d or 0.0)
        total += count * poisson_subsampled_rdp(ORDERS, rdp, g.q)
    return epsilon_from_rdp(ORDERS, total, delta)


NEW_COLUMNS = {"tau_d": "FLOAT", "accountant": "VARCHAR(16)"}
"""Columns added to ``charges`` since ledgers were first written (nullable, so old rows keep their meaning)."""


def _add_missing_columns(engine: Engine) -> None:
    """Add :data:`NEW_COLUMNS` a ledger lacks (another process may add one first)."""
    for name, kind in NEW_COLUMNS.items():
        if name in {c["name"] for c in inspect(engine).get_columns("charges")}:
            continue
        try:
            with engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE charges ADD COLUMN {name} {kind}"))
        except SQLAlchemyError:  # another process added it first
            if name not in {c["name"] for c in inspect(engine).get_columns("charges")}:
                raise


class Ledger:
    """A privacy ledger at an SQLAlchemy URL (or an SQLite file path); tables are created on first use."""

    def __init__(self, target: str) -> None:
        url = ledger_url(target)
        args = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
        try:
            self.engine: Engine = create_engine(url, **args)
            metadata.create_all(self.engine)
            _add_missing_columns(self.engine)
            with self.engine.begin() as conn:
                if conn.execute(select(ledger_lock.c.id)).first() is None:
                    conn.execute(insert(ledger_lock).values(id=1, version=0))
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot open the privacy ledger {target}: {_reason(exc)}") from None
        self.target = target

    def _write(self):
        """A write transaction that holds the ledger's lock from its first statement."""
        conn = self.engine.connect()
        trans = conn.begin()
        conn.execute(update(ledger_lock).where(ledger_lock.c.id == 1).values(version=ledger_lock.c.version + 1))
        return conn, trans

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
        supersedes: str | None = None,
    ) -> str:
        """Register a run and reserve its rounds (``planned[r][m]``: round r's cost to group m's members), or refuse
        it before round 1 if any member would exceed its lifetime budget. Budgets are registered at first sight
        (``budgets_of``: each client's ε, at ``delta``); a client's budget only ever decreases. ``supersedes``: the
        run a resumed run continues (a run of the same plan and federation still open, e.g. killed): first its
        unreleased rounds are given back and it is closed, its released rounds staying charged."""
        if supersedes is not None:
            self.finish(supersedes, of=(federation, plan_sha256))
        run_id, over = self._reserve(federation, label, plan_sha256, membership, budgets_of, delta, planned, True)
        if over:
            worst = max(over, key=lambda s: s.epsilon_spent / s.epsilon_budget)
            raise LedgerError(
                f"refused before round 1: {len(over)} client(s) would exceed their lifetime budget in the ledger "
                f"{self.target}, e.g. client {worst.client_id}: ε {worst.epsilon_spent:.4g} > {worst.epsilon_budget:g} "
                f"with this run's {len(planned)} rounds; see `hdp-plan ledger show`"
            )
        return run_id

    def would_exceed(
        self,
        *,
        federation: str,
        membership: Mapping[str, int],
        budgets_of: Mapping[str, float],
        delta: float,
        planned: Sequence[Sequence[GroupRound]],
    ) -> list[ClientSpending]:
        """The clients a run with these rounds would take past their budget (nothing is written)."""
        return self._reserve(federation, "dry run", "0" * 64, membership, budgets_of, delta, planned, False)[1]

    def _reserve(self, federation, label, plan_sha256, membership, budgets_of, delta, planned, keep):
        run_id = str(uuid.uuid4())
        try:
            conn, trans = self._write()
            with conn:
                self._register(conn, federation, budgets_of, delta)
                conn.execute(
                    insert(runs).values(
                        run_id=run_id, federation=federation, label=label, plan_sha256=plan_sha256,
                        planned_rounds=len(planned), started=time.time(), status="running",
                    )
                )  # fmt: skip
                conn.execute(insert(members), [{"run_id": run_id, "client_id": c, "group_index": g}
                                               for c, g in membership.items()])  # fmt: skip
                rows = [{"run_id": run_id, "round": r, "group_index": m, "q": g.q,
                         "noise_multiplier": g.noise_multiplier, "tau_d": g.tau_d, "accountant": g.accountant,
                         "status": "reserved"}
                        for r, groups in enumerate(planned) for m, g in enumerate(groups)]  # fmt: skip
                if rows:
                    conn.execute(insert(charges), rows)
                spent = self._spending(conn, federation, membership)
                over = [s for s in spent if s.epsilon_spent > s.epsilon_budget * (1 + 1e-9)]
                if over or not keep:
                    trans.rollback()
                else:
                    trans.commit()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None
        return run_id, over

    def release(self, run_id: str, round_index: int) -> None:
        """Mark round ``round_index`` of ``run_id`` released (before its model leaves the server)."""
        try:
            conn, trans = self._write()
            with conn:
                done = conn.execute(
                    update(charges)
                    .where(charges.c.run_id == run_id, charges.c.round == round_index, charges.c.status == "reserved")
                    .values(status="released")
                )
                if done.rowcount == 0:
                    trans.rollback()
                    raise LedgerError(f"round {round_index + 1} of run {run_id} was not reserved: not released")
                trans.commit()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None

    def finish(self, run_id: str, *, of: tuple[str, str] | None = None) -> None:
        """The run is over: rounds it reserved and never released are given back. With ``of`` (federation, plan
        digest): only if ``run_id`` is a run of that plan and federation still open (a resumed run's predecessor)."""
        try:
            conn, trans = self._write()
            with conn:
                old = conn.execute(select(runs).where(runs.c.run_id == run_id)).first()
                open_run = old is not None and (old.federation, old.plan_sha256, old.status) == (*(of or ()), "running")
                if of is None or open_run:
                    conn.execute(delete(charges).where(charges.c.run_id == run_id, charges.c.status == "reserved"))
                    conn.execute(update(runs).where(runs.c.run_id == run_id).values(status="finished"))
                trans.commit()
        except SQLAlchemyError as exc:
            raise LedgerError(f"cannot write the privacy ledger {self.target}: {_reason(exc)}") from None

    def spending(self, federation: str, clients: Iterable[str] | None = None) -> list[ClientSpending]:
        """Every (or the given) client's spending in ``federation``, composed over all its runs."""
        with self.engine.connect() as conn:
            return self._spending(conn, federation, clients)

    def runs(self, federation: str) -> list[dict]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(runs).where(runs.c.federation == federation))]

    def _register(self, conn, federation: str, budgets_of: Mapping[str, float], delta: float) -> None:
        known = {
            r.client_id: (r.epsilon, r.delta)
            for r in conn.execute(
                select(budgets.c.client_id, budgets.c.epsilon, budgets.c.delta).where(
                    budgets.c.federation == federation
                )
            )
        }
        new = [
            {"federation": federation, "client_id": c, "epsilon": e, "delta": delta}
            for c, e in budgets_of.items()
            if c not in known
        ]
        if new:
            conn.execute(insert(budgets), new)
        for c, e in budgets_of.items():
            if c in known and (e < known[c][0] or delta < known[c][1]):
                conn.execute(
                    update(budgets)
                    .where(budgets.c.federation == federation, budgets.c.client_id == c)
                    .values(epsilon=min(e, known[c][0]), delta=min(delta, known[c][1]))
                )

    def _spending(self, conn, federation: str, clients: Iterable[str] | None) -> list[ClientSpending]:
        wanted = None if clients is None else set(clients)
        budget = {
            r.client_id: (r.epsilon, r.delta)
            for r in conn.execute(
                select(budgets.c.client_id, budgets.c.epsilon, budgets.c.delta).where(
                    budgets.c.federation == federation
                )
            )
        }
        membership: dict[str, list[tuple[str, int]]] = defaultdict(list)
        query = (
            select(members.c.client_id, members.c.run_id, members.c.group_index)
            .join(runs, runs.c.run_id == members.c.run_id)
            .where(runs.c.federation == federation)
        )
        for r in conn.execute(query):
            if wanted is None or r.client_id in wanted:
                membership[r.client_id].append((r.run_id, r.group_index))
        cost: dict[tuple[str, int], Counter] = defaultdict(Counter)
        status: dict[tuple[str, int], Counter] = defaultdict(Counter)
        for r in conn.execute(
            select(charges).join(runs, runs.c.run_id == charges.c.run_id).where(runs.c.federation == federation)
        ):
            cost[(r.run_id, r.group_index)][GroupRound(r.q, r.noise_multiplier, r.tau_d, r.accountant or "rdp")] += 1
            status[(r.run_id, r.group_index)][r.status] += 1
        cache: dict[tuple, float] = {}
        out = []
        for client in sorted(budget if wanted is None else wanted & set(budget)):
            signature = tuple(sorted(membership.get(client, ())))
            eps_budget, delta = budget[client]
            key = (signature, delta)
            if key not in cache:
                total: Counter = Counter()
                for s in signature:
                    total.update(cost[s])
                cache[key] = compose(total, delta)
            released = sum(status[s]["released"] for s in signature)
            reserved = sum(status[s]["reserved"] for s in signature)
            out.append(ClientSpending(client, eps_budget, delta, cache[key], released, reserved))
        return out


def _reason(exc: SQLAlchemyError) -> str:
    """The database's own one-line reason (read-only file, disk full, refused connection …)."""
    orig = getattr(exc, "orig", None)
    return str(orig or exc).strip().splitlines()[0]
