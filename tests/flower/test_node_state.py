"""A node's own state: participation caps that hold across concurrent processes and restarts, a spent-budget mirror
that refuses a run past the client's ε, owner-only files, and a default folder that outlives a run."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from hdp_planner import plan, save_plan
from hdp_planner.ledger.store import GroupRound, compose
from hdp_planner_flower.node_state import NodeState, Terms, admit_round, client_terms, default_state_dir
from hdp_planner_flower.pin import Pin, RoundRefused, file_sha256
from hdp_planner_flower.preparation import FlowerConfig
from hdp_planner_flower.simulation import node_state
from hdp_planner_train.run.options import configure

SHA = "a" * 64
CHEAP = GroupRound(q=0.1, noise_multiplier=20.0)  # a round that costs almost nothing
DELTA = 1e-5


def terms(cap: int = 3, budget: float = 10.0, cost: GroupRound = CHEAP, rounds: int = 10) -> Terms:
    return Terms(costs=(cost,) * rounds, delta=DELTA, cap=cap, budget=budget)


def admit(state: NodeState, *, run: int = 1, rnd: int = 1, **kw):
    return state.admit(plan_sha256=SHA, run_id=run, server_round=rnd, terms=terms(**kw))


def test_participations_are_capped_per_plan_and_persist(tmp_path):
    assert [admit(NodeState(tmp_path, 3), rnd=r).participations for r in (1, 2)] == [1, 2]
    admit(NodeState(tmp_path, 3), rnd=3)
    with pytest.raises(RoundRefused, match="cap K = 3"):
        admit(NodeState(tmp_path, 3), rnd=4)  # a restarted node reads the same file
    other = NodeState(tmp_path, 3).admit(plan_sha256="b" * 64, run_id=1, server_round=1, terms=terms())
    assert other.participations == 1 and NodeState(tmp_path, 3).participations(SHA) == 3
    assert NodeState(tmp_path, 4).participations(SHA) == 0  # another client of the node
    big = NodeState(tmp_path, 5)  # Flower's run ids are unsigned 64-bit
    assert [admit(big, run=2**64 - 1, rnd=r).participations for r in (1, 2)] == [1, 2]


def _contend(folder: str, barrier, results) -> None:
    barrier.wait()
    try:
        admit(NodeState(folder, 0), run=os.getpid(), rnd=1)
        results.put("ok")
    except RoundRefused:
        results.put("refused")
    except Exception as exc:  # anything else (FileNotFoundError, a locked database) fails the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_concurrent_client_processes_never_exceed_the_cap(tmp_path):
    """Six ClientApp processes of one node, released at once, K = 3: exactly three take part, in every trial."""
    ctx = multiprocessing.get_context("fork")
    for trial in range(10):
        folder = str(tmp_path / f"trial-{trial}")
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_contend, args=(folder, barrier, results)) for _ in range(6)]
        for p in procs:
            p.start()
        outcomes = sorted(results.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(timeout=60)
        assert outcomes == ["ok"] * 3 + ["refused"] * 3, outcomes
        assert NodeState(folder, 0).participations(SHA) == 3


def test_every_round_up_to_the_last_participation_is_charged_as_the_ledger_composes_it(tmp_path):
    state, cost = NodeState(tmp_path, 0), GroupRound(q=0.2, noise_multiplier=1.0)
    at = {r: compose({cost: r}, DELTA) for r in (3, 5, 8)}
    assert admit(state, run=1, rnd=3, cost=cost, cap=10).spent == pytest.approx(at[3])  # rounds 1..3
    assert admit(state, run=1, rnd=5, cost=cost, cap=10).spent == pytest.approx(at[5])  # 4..5 added, not 1..5 again
    assert admit(state, run=2, rnd=3, cost=cost, cap=10).spent == pytest.approx(at[8])  # a second run: 1..3 again
    budget = at[8] * 1.01
    with pytest.raises(RoundRefused, match="past its budget"):  # a server that reuses a run id, rounds from 1
        admit(state, run=2, rnd=1, cost=cost, cap=10, budget=budget)
    with pytest.raises(RoundRefused, match="past its budget"):
        admit(state, run=3, rnd=2, cost=cost, cap=10, budget=budget)
    assert state.spent(DELTA) == pytest.approx(at[8]) and state.participations(SHA) == 3  # refusals write nothing
    with pytest.raises(RoundRefused, match="outside"):
        admit(state, run=2, rnd=11)


def test_a_distributed_rounds_accountant_and_event_delta_are_charged_as_the_ledger_charges_them(tmp_path):
    """A secure-aggregation round costs a δ of its own (its law's events) beside its accountant's ε: the mirror keeps
    both, so what it composes is the ledger's, and an older state file without them is read as costing none."""
    import sqlite3

    cost = GroupRound(q=0.2, noise_multiplier=1.0, tau_d=0.5, accountant="rdp", delta_cost=2e-6)
    state = NodeState(tmp_path, 0)
    admit(state, run=1, rnd=4, cost=cost, cap=10, budget=1e9)
    assert state.spent(DELTA) == pytest.approx(compose({cost: 4}, DELTA), rel=1e-12)
    assert state.spent(DELTA) > compose({GroupRound(q=0.2, noise_multiplier=1.0, tau_d=0.5): 4}, DELTA)
    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    with sqlite3.connect(old / "client-0.sqlite") as conn:
        conn.execute("CREATE TABLE rounds (plan_sha256 TEXT NOT NULL, run_id TEXT NOT NULL, server_round INTEGER NOT "
                     "NULL, participated INTEGER NOT NULL, q REAL NOT NULL, noise_multiplier REAL NOT NULL, tau_d "
                     "REAL, delta REAL NOT NULL, at REAL NOT NULL)")  # fmt: skip
        conn.execute("INSERT INTO rounds VALUES (?, '1', 1, 1, 0.2, 1.0, NULL, ?, 0)", (SHA, DELTA))
    legacy = NodeState(old, 0)
    assert legacy.participations(SHA) == 1
    assert legacy.spent(DELTA) == pytest.approx(compose({GroupRound(q=0.2, noise_multiplier=1.0): 1}, DELTA))


def test_state_is_readable_by_its_owner_only(tmp_path):
    folder = tmp_path / "nodes" / "n0"
    admit(NodeState(folder, 0))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "client-0.sqlite").stat().st_mode) == 0o600
    assert {p.name for p in folder.iterdir()} == {"client-0.sqlite"}  # no journal left behind


def test_the_default_folder_is_the_users_data_folder_and_outlives_a_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_state_dir() == tmp_path / "data" / "hdp-planner" / "nodes"
    own = {"plan": "plan.json", "data_dir": str(tmp_path / "mine")}  # a user's own data: their clients' budgets
    with node_state(configure(FlowerConfig, **own)) as first, node_state(configure(FlowerConfig, **own)) as second:
        assert first == second == str(default_state_dir())
    with node_state(configure(FlowerConfig, plan="plan.json", dataset="digits")) as public:  # no one's budget
        assert Path(public).is_dir() and not Path(public).is_relative_to(tmp_path / "data")
    assert not Path(public).exists()  # removed after the run
    with node_state(configure(FlowerConfig, plan="plan.json", node_state=str(tmp_path / "mine"))) as chosen:
        assert chosen == str(tmp_path / "mine")


def test_rounds_within_one_run_of_the_plan_are_admitted_on_its_verdict_and_any_others_composed(tmp_path):
    cost = GroupRound(q=0.5, noise_multiplier=1.0)
    whole = compose({cost: 4}, DELTA)
    run = Terms(costs=(cost,) * 4, delta=DELTA, cap=10, budget=whole, run_epsilon=whole)
    state = NodeState(tmp_path, 0)
    assert state.admit(plan_sha256=SHA, run_id=1, server_round=2, terms=run).spent is None  # rounds 1..2 of 4
    assert state.admit(plan_sha256=SHA, run_id=1, server_round=4, terms=run).spent is None  # the whole run
    assert state.spent(DELTA) == pytest.approx(whole)  # what the verdict stood for
    with pytest.raises(RoundRefused, match="budget"):  # a second run is more than one run: composed, and refused
        state.admit(plan_sha256=SHA, run_id=2, server_round=1, terms=run)
    lower = Terms(costs=run.costs, delta=DELTA, cap=10, budget=whole / 2, run_epsilon=whole)
    with pytest.raises(RoundRefused, match="budget"):  # a budget below the run's ε: composed
        NodeState(tmp_path, 1).admit(plan_sha256=SHA, run_id=1, server_round=4, terms=lower)
    mixed = NodeState(tmp_path, 2)
    mixed.admit(plan_sha256="b" * 64, run_id=1, server_round=1, terms=terms())  # a round of another plan first
    spent = mixed.admit(plan_sha256=SHA, run_id=1, server_round=1, terms=run).spent
    assert spent == pytest.approx(compose({CHEAP: 1, cost: 1}, DELTA))


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("node") / "plan.json"
    save_plan(plan([1.0, 2.0], n=20, rounds=6, q=0.3, clip=1.0), path)
    return path


def test_a_node_refuses_rounds_its_budget_cannot_pay_whatever_the_server_asks(small_plan, tmp_path):
    """Client 0 sits in the group of ε 1 (the plan's grouping): the plan's 6 rounds are its whole budget."""
    pin = Pin(
        plan=str(small_plan), sha256=file_sha256(small_plan), method="gdpfed+", groups=None, state_dir=str(tmp_path)
    )

    def context(run: int, config: dict | None = None) -> Context:
        return Context(run, 11, {"client-id": 0, **(config or {})}, RecordDict(), {})

    whole = client_terms(pin, client=0, secure=False).run_epsilon  # the plan's whole run, composed once
    assert whole == pytest.approx(1.0, rel=0.05) and whole <= 1.0
    assert admit_round(pin, context(1), server_round=6, secure=False).spent is None  # on that verdict: not composed
    with pytest.raises(RoundRefused, match="budget"):  # a second run of the plan
        admit_round(pin, context(2), server_round=1, secure=False)
    fresh = Pin(plan=pin.plan, sha256=pin.sha256, method="gdpfed+", groups=None, state_dir=str(tmp_path / "b"))
    with pytest.raises(RoundRefused, match="budget"):  # the client's own ε, below its group's, refuses sooner
        admit_round(fresh, context(1, {"budget": 0.2}), server_round=6, secure=False)
    with pytest.raises(RoundRefused, match="positive"):
        admit_round(fresh, context(1, {"budget": "lots"}), server_round=1, secure=False)
    with pytest.raises(RoundRefused, match="SHA-256"):
        admit_round(
            Pin(plan=pin.plan, sha256="0" * 64, method="gdpfed+", groups=None, state_dir=str(tmp_path)),
            context(3),
            server_round=1,
            secure=False,
        )
