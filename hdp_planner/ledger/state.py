"""The ledger's state, replayed from its events: budgets, runs, and every client's spending.

Events (:mod:`.chain`), each a JSON object:

- ``run``: a run reserves its rounds. ``run_id``, ``federation`` (a name recorded with the run), ``label``,
  ``plan_sha256``, ``start`` (its first round in the plan's numbering), ``started`` (Unix time), ``delta``,
  ``clients`` ({client id: [group, ε budget]}) and ``rounds`` (per round, per group: [q, σ or z, τ·d' or null,
  accountant]), and ``simulated`` (true: a simulation's clients, the ids 0..n−1 of a plan's default mapping; false:
  clients named by ``hdp-plan assign``'s file or a deployment; absent in events written before it was recorded).
  A client's budget is registered at first sight; a run that gives a client another ε is refused
  (:meth:`LedgerState.refusal`), so the budget of a client is the one ε its plans agree on (events written before
  that check: the smallest seen, and δ the smallest seen).
- ``release``: ``run_id``, ``round`` (0 = the run's first): charged before its model leaves the server.
- ``finish``: ``run_id``; the rounds it never released are given back (``given_back``, recorded).
- ``migrated``: a ledger of the unchained schema was copied into the chain (its counts).

A client is one identity across federation names: its spending composes every round of every run it is a member of,
whatever name the run recorded, in the group it was in, released or still reserved (:func:`~.composition.compose`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hdp_planner.ledger.chain import Event, canonical
from hdp_planner.ledger.composition import GroupRound, compose


class LedgerStateError(ValueError):
    """Events that no ledger writes (a release of a round never reserved, a run started twice …)."""


@dataclass(frozen=True, kw_only=True)
class ClientSpending:
    """One client's lifetime spending in a ledger.

    Args:
        client_id: The client.
        epsilon_budget: Its lifetime ε budget.
        delta: The δ of that budget.
        epsilon_spent: ε spent, composed over every round released or still reserved.
        released_rounds: Rounds charged (their models left the server).
        reserved_rounds: Rounds reserved by runs still open.
    """

    client_id: str
    epsilon_budget: float
    delta: float
    epsilon_spent: float
    released_rounds: int
    reserved_rounds: int

    @property
    def remaining(self) -> float:
        """ε left of the budget (negative: over it)."""
        return self.epsilon_budget - self.epsilon_spent


@dataclass(kw_only=True)
class RunRecord:
    """A run as its events left it."""

    run_id: str
    federation: str
    label: str
    plan_sha256: str
    start: int
    started: float
    clients: dict[str, int]
    rounds: list[list[GroupRound]]
    released: set[int] = field(default_factory=set)
    finished: bool = False
    simulated: bool | None = None

    @property
    def status(self) -> str:
        return "finished" if self.finished else "running"

    @property
    def released_through(self) -> int:
        """The plan's round count this run's releases reach (its start plus every round up to the last released)."""
        return self.start + max(self.released) + 1 if self.released else self.start

    def counted(self) -> list[tuple[int, str]]:
        """(round, released | reserved) of every round that still counts: all of them until the run finishes."""
        return [(r, "released" if r in self.released else "reserved") for r in range(len(self.rounds))
                if r in self.released or not self.finished]  # fmt: skip


def run_event(*, run_id: str, federation: str, label: str, plan_sha256: str, start: int, started: float,
              delta: float, membership: Mapping[str, int], budgets_of: Mapping[str, float],
              planned: Sequence[Sequence[GroupRound]], simulated: bool | None = None) -> dict[str, Any]:  # fmt: skip
    """The body of a ``run`` event (``simulated`` None: not recorded)."""
    return {
        "run_id": run_id, "federation": federation, "label": label, "plan_sha256": plan_sha256, "start": start,
        "started": started, "delta": delta,
        "clients": {c: [int(g), float(budgets_of[c])] for c, g in membership.items()},
        "rounds": [[[g.q, g.noise_multiplier, g.tau_d, g.accountant, *([g.delta_cost] if g.delta_cost else [])]
                    for g in groups] for groups in planned],
        **({} if simulated is None else {"simulated": bool(simulated)}),
    }  # fmt: skip


class LedgerState:
    """Budgets and runs after a sequence of events (:meth:`apply` one at a time, in order)."""

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.migrated: dict[str, Any] | None = None
        self._registered: list[tuple[str, dict[str, list], float]] = []  # (run, {client: [group, ε]}, δ) in order
        self._index: tuple[dict[str, tuple[float, float]], dict[str, list[tuple[str, int]]]] | None = None

    def _indexed(self) -> tuple[dict[str, tuple[float, float]], dict[str, list[tuple[str, int]]]]:
        """(client → (ε, δ), the smallest registered; client → its (run, group)s), built when first needed."""
        if self._index is None:
            budgets: dict[str, tuple[float, float]] = {}
            member_of: dict[str, list[tuple[str, int]]] = defaultdict(list)
            for run_id, clients, delta in self._registered:
                for c, (g, eps) in clients.items():
                    known = budgets.get(c)
                    budgets[c] = (eps, delta) if known is None else (min(known[0], eps), min(known[1], delta))
                    member_of[c].append((run_id, g))
            self._index = budgets, member_of
        return self._index

    @property
    def budgets(self) -> dict[str, tuple[float, float]]:
        """Each client's lifetime budget (ε, δ): the smallest registered."""
        return self._indexed()[0]

    def conflicts(self, data: Mapping[str, Any]) -> list[tuple[str, float, float]]:
        """(client, ε registered, ε of the run) of every client to whom the ``run`` event ``data`` gives another
        budget than the one registered."""
        budgets = self.budgets
        return [(c, budgets[c][0], float(eps)) for c, (_, eps) in data["clients"].items()
                if c in budgets and not math.isclose(budgets[c][0], float(eps), rel_tol=1e-9)]  # fmt: skip

    def holds(self, *, simulated: bool) -> bool:
        """Whether a run of a simulation's clients (``simulated``), or of clients named by a groups file (not
        ``simulated``), is recorded."""
        return any(run.simulated is simulated for run in self.runs.values())

    def refusal(self, data: Mapping[str, Any], ledger: str) -> str | None:
        """Why the ledger ``ledger`` refuses the ``run`` event ``data`` before pricing it (None: it does not): its
        clients are of the other kind than the ledger's (a simulation's ids never meet real clients), or it gives a
        registered client another budget (both values named)."""
        simulated = data.get("simulated")
        if simulated is not None and self.holds(simulated=not simulated):
            ids = sorted(data["clients"], key=lambda c: (len(c), c))
            held, new = ("real clients (named by groups files)", f"a simulation's clients {ids[0]}..{ids[-1]}")
            if not simulated:
                held, new = ("a simulation's clients (a plan's ids 0..n−1)", "real clients")
            return (f"the privacy ledger {ledger} holds {held}: {new} are never written beside them; give this run a "
                    "ledger of its own (--ledger PATH)")  # fmt: skip
        differ = self.conflicts(data)
        if not differ:
            return None
        client, registered, given = differ[0]
        more = f" (and {len(differ) - 1} more clients)" if len(differ) > 1 else ""
        return (f"client {client} has the lifetime budget ε {registered:g} in the privacy ledger {ledger} and "
                f"ε {given:g} in this run's plan{more}: a client has one budget; correct the plan or its groups file, "
                "or give these clients a ledger of their own (--ledger PATH)")  # fmt: skip

    @classmethod
    def replay(cls, events: Iterable[Event], run_id: str | None = None) -> LedgerState:
        """The state after ``events``; with ``run_id``, of that run's events only (read without parsing the others:
        a run's events are the only ones whose canonical JSON holds ``"run_id":"<run_id>"``)."""
        state = cls()
        needle = None if run_id is None else canonical({"run_id": run_id})[1:-1]
        for e in events:
            if needle is None or needle in e.body:
                data = e.data
                if needle is None or data.get("run_id") == run_id:
                    state.apply(e.seq, e.kind, data)
        return state

    def apply(self, seq: int, kind: str, data: dict[str, Any]) -> None:
        """Apply event ``seq``; LedgerStateError if no ledger could have written it."""
        try:
            if kind == "run":
                self._start(data)
            elif kind in ("release", "finish"):
                run = self.runs.get(data["run_id"])
                if run is None or run.finished:
                    raise LedgerStateError(f"{'an unknown' if run is None else 'a finished'} run")
                if kind == "finish":
                    run.finished = True
                elif not 0 <= data["round"] < len(run.rounds) or data["round"] in run.released:
                    raise LedgerStateError(f"round {data['round'] + 1} was not reserved")
                else:
                    run.released.add(int(data["round"]))
            elif kind == "migrated":
                self.migrated = data
            else:
                raise LedgerStateError(f"unknown kind {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise LedgerStateError(f"event {seq} ({kind}) is not one a ledger writes: {exc}") from None

    def _start(self, data: dict[str, Any]) -> None:
        if data["run_id"] in self.runs:
            raise LedgerStateError("the run was already started")
        clients = {c: g for c, (g, _) in data["clients"].items()}
        self._registered.append((data["run_id"], data["clients"], float(data["delta"])))
        self._index = None
        rounds = [[GroupRound(q=float(q), noise_multiplier=float(s), tau_d=None if t is None else float(t),
                              accountant=str(a), delta_cost=float(*cost) if cost else 0.0)
                   for q, s, t, a, *cost in groups] for groups in data["rounds"]]  # fmt: skip
        self.runs[data["run_id"]] = RunRecord(run_id=data["run_id"], federation=data["federation"],
                                              label=data["label"], plan_sha256=data["plan_sha256"],
                                              start=int(data["start"]), started=float(data["started"]),
                                              clients=clients, rounds=rounds,
                                              simulated=data.get("simulated"))  # fmt: skip

    def spending(self, clients: Iterable[str] | None = None) -> list[ClientSpending]:
        """Every (or each given and known) client's lifetime spending, composed over all its runs."""
        cost: dict[tuple[str, int], Counter] = defaultdict(Counter)
        status: dict[tuple[str, int], Counter] = defaultdict(Counter)
        for run in self.runs.values():
            counted = run.counted()
            for m in set(run.clients.values()):
                for r, s in counted:
                    cost[(run.run_id, m)][run.rounds[r][m]] += 1
                    status[(run.run_id, m)][s] += 1
        budgets, member_of = self._indexed()
        wanted = sorted(budgets if clients is None else set(clients) & set(budgets))
        cache: dict[tuple, float] = {}
        out = []
        for client in wanted:
            signature = tuple(sorted(member_of.get(client, ())))
            eps_budget, delta = budgets[client]
            key = (signature, delta)
            if key not in cache:
                total: Counter = Counter()
                for s in signature:
                    total.update(cost[s])
                cache[key] = compose(total, delta)
            released = sum(status[s]["released"] for s in signature)
            reserved = sum(status[s]["reserved"] for s in signature)
            out.append(
                ClientSpending(
                    client_id=client,
                    epsilon_budget=eps_budget,
                    delta=delta,
                    epsilon_spent=cache[key],
                    released_rounds=released,
                    reserved_rounds=reserved,
                )
            )
        return out
