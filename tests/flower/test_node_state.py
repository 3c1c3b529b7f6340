"""A node's own state: participation caps that hold across concurrent processes and restarts, a spent-budget mirror
that refuses a run past the client's ε, owner-only files, and a default folder that outlives a run."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from hdp_planner import plan, save_plan
from hdp_planner_flower.node_state import NodeState, admit_round, default_state_dir
from hdp_planner_flower.pin import Pin, RoundRefused, file_sha256
from hdp_planner_flower.simulation import FlowerConfig, node_state

SHA = "a" * 64


def admit(state: NodeState, *, run: int = 1, rnd: int = 1, cap: int = 3, epsilon: float = 0.0, budget: float = 1.0):
    return state.admit(plan_sha256=SHA, run_id=run, server_round=rnd, cap=cap, epsilon=epsilon, budget=budget)


def test_participations_are_capped_per_plan_and_persist(tmp_path):
    assert [admit(NodeState(tmp_path, 3), rnd=r).participations for r in (1, 2)] == [1, 2]
    admit(NodeState(tmp_path, 3), rnd=3)
    with pytest.raises(RoundRefused, match="cap K = 3"):
        admit(NodeState(tmp_path, 3), rnd=4)  # a restarted node reads the same file
    other = NodeState(tmp_path, 3).admit(plan_sha256="b" * 64, run_id=1, server_round=1, cap=3, epsilon=0, budget=1)
    assert other.participations == 1 and NodeState(tmp_path, 3).participations(SHA) == 3
    assert NodeState(tmp_path, 4).participations(SHA) == 0  # another client of the node


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
    for trial in range(12):
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


def test_each_run_is_charged_once_and_a_run_past_the_budget_is_refused(tmp_path):
    state = NodeState(tmp_path, 0)
    assert admit(state, run=1, rnd=1, cap=10, epsilon=0.5, budget=1.2).spent == 0.5
    assert admit(state, run=1, rnd=4, cap=10, epsilon=0.5, budget=1.2).spent == 0.5  # the same run: no new charge
    assert admit(state, run=2, rnd=2, cap=10, epsilon=0.5, budget=1.2).spent == 1.0  # a second run
    with pytest.raises(RoundRefused, match=r"budget 1\.2"):
        admit(state, run=3, rnd=1, cap=10, epsilon=0.5, budget=1.2)
    with pytest.raises(RoundRefused, match="budget"):  # a server that reuses a run id and starts its rounds again
        admit(state, run=2, rnd=1, cap=10, epsilon=0.5, budget=1.2)
    assert state.spent() == 1.0 and state.participations(SHA) == 3  # refusals write nothing


def test_state_is_readable_by_its_owner_only(tmp_path):
    folder = tmp_path / "nodes" / "n0"
    admit(NodeState(folder, 0))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "client-0.sqlite").stat().st_mode) == 0o600
    assert {p.name for p in folder.iterdir()} == {"client-0.sqlite"}  # no journal left behind


def test_the_default_folder_is_the_users_data_folder_and_outlives_a_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_state_dir() == tmp_path / "data" / "hdp-planner" / "nodes"
    with node_state(FlowerConfig(plan="plan.json")) as first, node_state(FlowerConfig(plan="plan.json")) as second:
        assert first == second == str(default_state_dir())
    with node_state(FlowerConfig(plan="plan.json", node_state=str(tmp_path / "mine"))) as chosen:
        assert chosen == str(tmp_path / "mine")


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("node") / "plan.json"
    save_plan(plan([1.0, 2.0], n=20, rounds=3, q=0.3, clip=1.0), path)
    return path


def test_a_node_refuses_a_second_run_its_budget_cannot_pay(small_plan, tmp_path):
    """Client 0 sits in the group of ε 1: one run of the plan is its whole budget, whatever the server asks."""
    pin = Pin(str(small_plan), file_sha256(small_plan), "gdpfed+", None, str(tmp_path))
    sha = pin.sha256

    def context(run: int, config: dict) -> Context:
        return Context(run, 11, {"client-id": 0, **config}, RecordDict(), {})

    first = admit_round(pin, context(1, {}), sha256=sha, cap=3, server_round=1)
    assert first.spent == pytest.approx(1.0)
    with pytest.raises(RoundRefused, match="budget"):
        admit_round(pin, context(2, {}), sha256=sha, cap=3, server_round=1)
    with pytest.raises(RoundRefused, match="budget"):  # a node config budget below the group's ε refuses at once
        admit_round(Pin(pin.plan, sha, "gdpfed+", None, str(tmp_path / "b")), context(1, {"budget": 0.5}),
                    sha256=sha, cap=3, server_round=1)  # fmt: skip
    with pytest.raises(RoundRefused, match="positive"):
        admit_round(pin, context(1, {"budget": "lots"}), sha256=sha, cap=3, server_round=2)
