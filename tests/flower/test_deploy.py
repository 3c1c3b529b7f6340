"""Flower's deployment engine on this machine: a SuperLink and SuperNodes as separate processes over TLS with node
authentication; no enrolment round; refused impostors; every process stopped afterwards."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from conftest import digits_settings  # noqa: E402
from flwr.app import Context, Error, Message, RecordDict  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.planfile.document import load_plan  # noqa: E402
from hdp_planner_cli.app import app as cli_app  # noqa: E402
from hdp_planner_flower.app import client_app, model_arrays  # noqa: E402
from hdp_planner_flower.credentials import make_tls  # noqa: E402
from hdp_planner_flower.deploy import LocalDeployment, node_config  # noqa: E402
from hdp_planner_flower.local import InProcessGrid  # noqa: E402
from hdp_planner_flower.membership import FlowerRunError, read_node_clients  # noqa: E402
from hdp_planner_flower.node import client as node_client  # noqa: E402
from hdp_planner_flower.node_state import NodeState  # noqa: E402
from hdp_planner_flower.pin import file_sha256  # noqa: E402
from hdp_planner_flower.processes import alive, descendants, stop_processes  # noqa: E402
from hdp_planner_flower.records import ARRAYS, ENROLL  # noqa: E402
from hdp_planner_flower.run_log import last_error  # noqa: E402
from hdp_planner_flower.strategy import HdpStrategy  # noqa: E402
from hdp_planner_train.rules.specs import method_spec  # noqa: E402

_LEDGER_TESTS = importlib.util.spec_from_file_location(
    "ledger_tests", Path(__file__).parents[1] / "core" / "test_ledger.py"
)
_ledger_tests = importlib.util.module_from_spec(_LEDGER_TESTS)
_LEDGER_TESTS.loader.exec_module(_ledger_tests)
postgres = _ledger_tests.postgres  # the ledger tests' throwaway PostgreSQL cluster

N = 5
SETTINGS = digits_settings(clients=N, seed=0)


@pytest.fixture(scope="module")
def deploy_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("deploy") / "plan.json"
    save_plan(plan([1.0, 2.0, 4.0], n=N, rounds=10, q=0.8, clip=1.0), path)
    return path


def unchanged(msg: Message, context: Context) -> Message:
    return Message(RecordDict({ARRAYS: msg.content[ARRAYS]}), reply_to=msg)


def test_a_registry_replaces_the_enrolment_round(deploy_plan, tmp_path):
    """With the deployment's registry (node id → client id) the server sends no enrolment query; a registry that is
    not the plan's clients is refused."""
    p = load_plan(deploy_plan)
    grid = InProcessGrid(client_app(unchanged), N, keep=True)
    registry = tmp_path / "nodes.csv"
    registry.write_text("node_id,client_id\n" + "".join(f"{n},{i}\n" for i, n in enumerate(grid.node_ids)))
    strategy = HdpStrategy(p, method_spec(p, "gdpfed+"), node_clients=read_node_clients(registry))
    strategy.start(grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=1, train_config=SETTINGS.record())
    assert strategy.client_of_node == {n: i for i, n in enumerate(grid.node_ids)}
    assert not any(r.metadata.message_type == ENROLL for r in grid.received)
    registry.write_text("node_id,client_id\n" + "".join(f"{n},{i + 1}\n" for i, n in enumerate(grid.node_ids)))
    with pytest.raises(FlowerRunError, match=r"clients 0\.\.4"):
        HdpStrategy(p, method_spec(p, "gdpfed+"), node_clients=read_node_clients(registry)).start(
            grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=1, train_config=SETTINGS.record()
        )
    registry.write_text("node,client\n1,2\n")
    with pytest.raises(FlowerRunError, match="node_id,client_id"):
        read_node_clients(registry)


class UnreachableNode(InProcessGrid):
    """Node 0 has gone away: Flower's SuperLink answers for it with an error in its own name (node id 1)."""

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            if msg.metadata.dst_node_id == self.node_ids[0]:
                reply = Message(Error(code=0, reason="node unavailable"), reply_to=msg)
                reply.metadata.__dict__["_src_node_id"] = 1  # what the SuperLink sets (its own id)
                replies.append(reply)
            else:
                replies.extend(super().send_and_receive([msg], timeout=timeout))
        return replies


def test_an_error_the_superlink_sends_for_a_dead_node_is_a_dropout(deploy_plan):
    p = load_plan(deploy_plan)
    grid = UnreachableNode(client_app(unchanged), N)
    everyone = type("Everyone", (), {"random": lambda self, n: np.zeros(n)})()  # every node sampled every round
    registry = {node: i for i, node in enumerate(grid.node_ids)}
    strategy = HdpStrategy(p, method_spec(p, "gdpfed+"), uniform=everyone, node_clients=registry)
    result = strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=2, train_config=SETTINGS.record()
    )
    assert [int(result.train_metrics_clientapp[r]["failed"]) for r in (1, 2)] == [1, 1]


def test_a_deployed_node_counts_a_trusted_servers_rounds_in_its_own_state(deploy_plan, tmp_path):
    """A deployed node pins its plan in its node config: under a trusted server too it counts every round it trains
    and refuses past its cap, whatever the server asks."""
    sha = file_sha256(deploy_plan)
    config = {"client-id": 0, "plan": str(deploy_plan), "plan-sha256": sha, "state-dir": str(tmp_path)}
    grid = InProcessGrid(node_client, N, keep=True)
    for i, node in enumerate(grid.node_ids):
        grid.contexts[node] = Context(1, node, {**config, "client-id": i}, RecordDict(), {})
    p = load_plan(deploy_plan)
    strategy = HdpStrategy(p, method_spec(p, "gdpfed+"))
    strategy.start(grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=3, train_config=SETTINGS.record())
    counted = sum(NodeState(tmp_path, i).participations(sha) for i in range(N))
    trained = sum(1 for r in grid.received if r.metadata.message_type == "train" and not r.has_error())
    assert counted == trained > 0


def test_node_config_quotes_paths():
    spec = type("Spec", (), {"client": 3, "state_dir": "/a b/state"})()
    text = node_config(spec, "/p q/plan.json", "ab" * 32, "gdpfed+", None, Path("/d e/nodes.csv"))
    assert text.startswith("client-id=3 ") and 'plan="/p q/plan.json"' in text and 'state-dir="/a b/state"' in text
    assert text.endswith('registry="/d e/nodes.csv"')


def test_a_failed_runs_reason_is_the_text_of_flowers_error_box(tmp_path):
    log = tmp_path / "run.log"
    box = ["   94.62 ╭─ Error ────────────────╮", "   94.62 │ The run was stopped: │",
           "   94.63 │ connection lost.     │", "   94.63 ╰──────────────────────╯", "   94.70 bye"]  # fmt: skip
    log.write_text("\n".join(["    1.00 round 1/3", *box]) + "\n")
    assert last_error(log) == "The run was stopped: connection lost."
    log.write_text("    1.00 round 1/3\n    2.00 ValueError: no such run\n    3.00 bye\n")
    assert last_error(log) == "ValueError: no such run"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "4"], "the plan has n = 5"),
        (["--nodes", "5", "--trust", "server,cloud"], "--trust takes"),
        (["--nodes", "5", "--rounds", "11"], "within 1..10"),
        (["--nodes", "5", "--round-timeout", "0"], "must be > 0"),
    ],
)
def test_hdp_plan_deploy_refuses_bad_input_in_one_line_before_starting_anything(deploy_plan, tmp_path, args, message):
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(deploy_plan), *args, "--folder", str(tmp_path / "d")])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "d").exists()
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(tmp_path / "none.json"), "--nodes", "5"])
    assert res.exit_code == 2 and "not found" in res.output


def test_hdp_plan_deploy_runs_the_plans_own_trust_model_and_refuses_a_trusted_server_for_a_secure_plan(tmp_path):
    """A plan solved for secure aggregation is never run with a trusted server by the deployment: by default it runs
    under the plan's own trust model, and ``--trust server`` is refused in one line before anything starts."""
    from hdp_planner_flower.deploy_local import DeployConfig, check_config

    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", "12", "--rounds", "10", "--q", "1.0", "--clip", "1.0", "--methods",
            "gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", "2410", "-o",
            str(path)]  # fmt: skip
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    check_config(DeployConfig(plan=str(path), nodes=12))
    check_config(DeployConfig(plan=str(path), nodes=12, trust=("secagg",)))
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(path), "--nodes", "12", "--trust", "server",
                                       "--folder", str(tmp_path / "d")])  # fmt: skip
    assert res.exit_code == 2 and "not trusted" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "d").exists()


def test_hdp_plan_deploy_checks_the_plans_secure_form_before_starting_anything(deploy_plan, tmp_path):
    """Under secagg the deployment derives the method's secure form, as every node will, before it writes a file or
    starts a process: a trusted server's plan, or a method with no secure form (GDPFed+'s groups of two clients), is
    refused in one line."""
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(deploy_plan), "--nodes", str(N), "--trust", "secagg",
                                       "--folder", str(tmp_path / "d")])  # fmt: skip
    assert res.exit_code == 2 and "solved for a trusted server" in res.output and not (tmp_path / "d").exists()
    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", "6", "--rounds", "10", "--q", "1.0", "--clip", "1.0", "--methods",
            "gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", "2410", "-o",
            str(path)]  # fmt: skip
    assert CliRunner().invoke(cli_app, args).exit_code == 0  # DP-FedAvg, one group of six, has a secure form
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(path), "--nodes", "6", "--folder", str(tmp_path / "d")])
    assert res.exit_code == 2 and "gdpfed+ has no distributed form under --trust secagg" in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output and not (tmp_path / "d").exists()


def wait_exit(proc: subprocess.Popen, seconds: float) -> int | None:
    deadline = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return proc.poll()


def test_a_node_with_a_wrong_certificate_or_an_unregistered_key_is_refused(deploy_plan, tmp_path):
    with LocalDeployment(tmp_path / "dep", plan=str(deploy_plan), nodes=3, state_dir=tmp_path / "state") as dep:
        good, unregistered, impostor = dep.specs
        dep.register(good.key)
        dep.register(impostor.key)
        other_ca = make_tls(tmp_path / "other").ca  # the node trusts another CA: the SuperLink's certificate fails
        procs = [dep.start_node(good), dep.start_node(unregistered), dep.start_node(impostor, ca=other_ca)]
        codes = [wait_exit(p, 90) for p in procs[1:]]
        logs = [(dep.folder / "logs" / f"node-{s.client}.log").read_text() for s in (unregistered, impostor)]
        assert codes[0] not in (None, 0) and "Failed to activate SuperNode" in logs[0]
        assert codes[1] not in (None, 0) and "CERTIFICATE_VERIFY_FAILED" in logs[1]
        assert procs[0].poll() is None  # the registered node with the right CA stays connected
        pids = dep.pids()
    assert pids and not any(alive(pid) for pid in pids)


def test_hdp_plan_deploy_runs_five_nodes_over_tls_and_stops_every_process(deploy_plan, tmp_path):
    """The default suite's deployment: 5 SuperNodes, 2 rounds, trusted server, TLS and node authentication."""
    start = time.monotonic()
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(deploy_plan), "--nodes", str(N), "--trust", "server",
                                       "--rounds", "2", "--folder", str(tmp_path / "dep"), "--out",
                                       str(tmp_path / "runs"), "--node-state", str(tmp_path / "state"),
                                       "--timeout", "400"])  # fmt: skip
    seconds = time.monotonic() - start
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "runs" / "server" / "metrics.json").read_text())
    assert m["rounds"] == 2 and m["runtime"] == "flower" and 0 <= m["final_accuracy"] <= 100
    assert "SuperLink on 127.0.0.1:" in res.output and "TLS, node authentication" in res.output
    assert "; 0 left" in res.output
    logs = list((tmp_path / "dep" / "logs").glob("node-*.log"))
    assert len(logs) == N and not any("hdp_enroll" in log.read_text() for log in logs)  # no enrolment round
    states = sum(NodeState(tmp_path / "state", i).participations(file_sha256(deploy_plan)) for i in range(N))
    assert states >= 1  # the nodes counted what they trained
    print(f"deployment of {N} nodes, 2 rounds: {seconds:.1f} s")


@pytest.mark.slow
def test_hdp_plan_deploy_runs_a_secure_plan(tmp_path):
    """A secure plan on real SuperNodes: by default the deployment runs the plan's own trust model, SecAgg+ (five
    clients have a secure form as DP-FedAvg with every client in every round)."""
    from hdp_planner_train.learning.models import make_model

    d = sum(p.numel() for p in make_model("digits").parameters())
    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", str(N), "--rounds", "10", "--q", "1.0", "--clip", "1.0", "--methods",
            "dp-fedavg", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", str(d),
            "--participations", "8", "-o", str(path)]  # fmt: skip
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(path), "--nodes", str(N), "--rounds", "1", "--method",
                                       "dp-fedavg", "--out", str(tmp_path / "runs"), "--timeout", "900"])  # fmt: skip
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "runs" / "secagg" / "metrics.json").read_text())
    assert m["trust"] == "secagg" and m["rounds"] == 1 and "; 0 left" in res.output


def recipe() -> list[str]:
    """The commands of the deployment page's one-command recipe (its first ``shell`` block), continuations joined."""
    page = (Path(__file__).parents[2] / "docs" / "concepts" / "deployment.md").read_text()
    block = page.split("```shell\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.mark.slow  # a secure plan on nine SuperNodes, two rounds: about 4 minutes on the shared machine
def test_the_deployment_pages_recipe_runs_as_written_in_an_empty_folder(tmp_path):
    """The page's two commands, typed in an empty folder (the user's ledger and data folder, and the temporary
    folder, of this test): the plan has a secure form, the deployment runs it under SecAgg+, stops every process it
    started and leaves no temporary folder behind."""
    commands = recipe()
    assert [c.split()[:3] for c in commands] == [["hdp-plan", "solve", "--eps"], ["hdp-plan", "deploy", "local"]]
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    root = str(Path(__file__).parents[2])
    env = {**os.environ, "TMPDIR": str(scratch), "XDG_DATA_HOME": str(tmp_path / "data"),
           "HDP_PLANNER_LEDGER": str(tmp_path / "ledger.sqlite"),
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    outputs = []
    for command in commands:
        res = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=1500)
        outputs.append(res.stdout + res.stderr)
        assert res.returncode == 0, outputs[-1][-3000:]
        assert "Traceback" not in outputs[-1]
    assert outputs[0].strip().splitlines()[-1].startswith("recommended under secagg: ")
    m = json.loads((work / "runs" / "deploy" / "secagg" / "metrics.json").read_text())
    assert m["trust"] == "secagg" and m["rounds"] == 2 and m["method"] == "gdpfed+"
    assert "; 0 left" in outputs[1] and sorted(p.name for p in work.iterdir()) == ["plan.json", "runs"]
    assert list(scratch.iterdir()) == []  # the deployment's temporary folder is gone


@pytest.mark.slow
def test_a_supernode_killed_mid_run_is_a_dropout_and_restarts_with_its_counts(deploy_plan, tmp_path):
    """Kill one SuperNode (and its ClientApp processes) as the ServerApp starts: the run completes, that node's
    replies count as dropouts after the round timeout; restarted with the same state folder, it keeps its counts."""
    sha = file_sha256(deploy_plan)
    with LocalDeployment(tmp_path / "dep", plan=str(deploy_plan), nodes=N, state_dir=tmp_path / "state") as dep:
        dep.start_nodes()
        victim = dep.procs["node-0"]

        def kill_at_start(line: str) -> None:
            if "] Flower " in line:
                stop_processes([victim.pid, *descendants(victim.pid)])

        m = dep.run(trust="server", out=tmp_path / "a", rounds=2, round_timeout=30, progress=kill_at_start)
        assert m["rounds"] == 2 and not alive(victim.pid)
        before = NodeState(tmp_path / "state", 0).participations(sha)
        restarted = dep.start_node(dep.specs[0])
        assert NodeState(tmp_path / "state", 0).participations(sha) == before
        m = dep.run(trust="server", out=tmp_path / "b", rounds=2, round_timeout=60)
        assert m["rounds"] == 2 and restarted.poll() is None
        assert NodeState(tmp_path / "state", 0).participations(sha) >= before


@pytest.mark.slow
def test_hdp_plan_deploy_runs_a_hidden_participation_plan(tmp_path):
    """A plan with public cohorts and private coins on real SuperNodes: every node is a cohort member that flips its
    own coin, the run goes through SecAgg+, and the metrics report the cohort, the coin and the ε against the server
    that one membership spends."""
    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", str(N), "--rounds", "10", "--q", "0.6", "--clip", "1.0", "--methods",
            "dp-fedavg", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", "2410",
            "--participations", "8", "--hide-sample", "-o", str(path)]  # fmt: skip
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    res = CliRunner().invoke(cli_app, ["deploy", "local", str(path), "--nodes", str(N), "--rounds", "1", "--method",
                                       "dp-fedavg", "--out", str(tmp_path / "runs"), "--timeout", "900"])  # fmt: skip
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "runs" / "secagg" / "metrics.json").read_text())
    block = m["secagg"]
    assert m["trust"] == "secagg" and block["hidden_participation"] and block["cohort"] == [N]
    assert block["coin"] == [pytest.approx(0.6)] and block["participation_cap"] == [1]
    p = load_plan(path)  # one membership at this plan's δ ≈ 0.17 spends ε 0; the record must say what the plan says
    spent = p.trust.epsilon_spent(p.method("DP-FedAvg"), p.config, group=0, rounds=1)
    assert block["epsilon_server"] == [pytest.approx(spent)] and spent <= 1.0 and "; 0 left" in res.output


@pytest.mark.slow
def test_two_server_processes_share_one_postgresql_ledger_without_overspending(postgres, tmp_path, monkeypatch):
    """Two runs submitted at once, two ServerApp processes charging one PostgreSQL ledger; the plan's one round is
    each client's whole budget: exactly one run goes ahead, the other is refused before round 1, and every client
    is charged one round, once."""
    from hdp_planner.ledger.store import Ledger

    path = tmp_path / "plan.json"
    save_plan(plan([1.0, 2.0, 4.0], n=N, rounds=1, q=0.8, clip=1.0), path)
    monkeypatch.setenv("HDP_PLANNER_LEDGER", postgres)
    outcomes: dict[str, str] = {}
    with LocalDeployment(tmp_path / "dep", plan=str(path), nodes=N, state_dir=tmp_path / "state") as dep:
        dep.start_nodes()

        def submit(name: str) -> None:
            try:
                dep.run(trust="server", out=tmp_path / name, rounds=1, round_timeout=120, progress=lambda _: None,
                        name=name, ledger=postgres)  # fmt: skip
                outcomes[name] = "ran"
            except Exception as exc:  # the refused run: its ServerApp wrote no metrics
                outcomes[name] = str(exc)

        threads = [threading.Thread(target=submit, args=(name,)) for name in ("first", "second")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(o == "ran" for o in outcomes.values()) == [False, True], outcomes
    assert any("refused" in o for o in outcomes.values()), outcomes
    spending = Ledger(postgres).spending("flower")
    assert len(spending) == N and all(s.released_rounds == 1 and s.remaining >= -1e-9 for s in spending)


@pytest.mark.slow
def test_the_superlink_killed_and_restarted_loses_the_run_in_progress_and_runs_the_next(
    deploy_plan, tmp_path, monkeypatch
):
    """Kill the SuperLink after round 1 of a run: that run is lost (no metrics), its released round stays charged
    in the ledger; restarted on its database, the same nodes run the next run to the end."""
    from hdp_planner.ledger.store import Ledger

    ledger = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(ledger))
    with LocalDeployment(tmp_path / "dep", plan=str(deploy_plan), nodes=N, state_dir=tmp_path / "state",
                         database=True) as dep:  # fmt: skip
        dep.start_nodes()
        first = dep.procs["superlink"].pid

        def kill_after_round_1(line: str) -> None:
            if "] round 1/" in line:
                dep.restart_superlink()

        with pytest.raises(Exception, match=r"wrote no metrics|did not finish"):
            dep.run(trust="server", out=tmp_path / "lost", rounds=3, round_timeout=60, timeout=400,
                    progress=kill_after_round_1, ledger=str(ledger))  # fmt: skip
        assert not alive(first) and dep.procs["superlink"].pid != first
        for spec in dep.specs:  # a node that gave up while the SuperLink was down starts again, its state kept
            if dep.procs[f"node-{spec.client}"].poll() is not None:
                dep.start_node(spec)
        m = dep.run(trust="server", out=tmp_path / "next", rounds=2, round_timeout=60, timeout=400, ledger=str(ledger))
    assert m["rounds"] == 2 and not (tmp_path / "lost" / "metrics.json").exists()
    spending = Ledger(str(ledger)).spending("flower")
    assert all(s.released_rounds == 1 + 2 for s in spending)  # round 1 of the lost run, then the next run's two
