"""A SuperNode killed mid-round under SecAgg+, with real processes: SecAgg+ releases the survivors' sum (at least
its threshold of them) or nothing, and the ledger charges only the rounds released."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("flwr")

from typer.testing import CliRunner

from hdp_planner.ledger.store import Ledger
from hdp_planner.planfile.document import load_plan
from hdp_planner_cli.app import app as cli_app
from hdp_planner_flower.deploy import LocalDeployment
from hdp_planner_flower.node_state import NodeState
from hdp_planner_flower.pin import file_sha256
from hdp_planner_flower.processes import alive, descendants, stop_processes

N = 5
ROUNDS = 2
TRAIN_STAGE = 3  # SecAgg+'s third message to a node (its masked vector), after it has shared its keys


def clientapps(pid: int) -> set[int]:
    """The ClientApp processes below ``pid`` (Flower starts one per message)."""
    found = set()
    for kid in descendants(pid):
        try:
            if b"flwr-clientapp" in Path(f"/proc/{kid}/cmdline").read_bytes():
                found.add(kid)
        except OSError:
            pass
    return found


class KillMidRound:
    """Watches every node's ClientApp processes; the first node to start its ``TRAIN_STAGE``-th is killed with its
    children (SIGKILL, by PID): it has distributed its key shares and never sends its masked vector."""

    def __init__(self, dep: LocalDeployment) -> None:
        self.dep, self.seen = dep, {}
        self.victim: int | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while self.victim is None and not self.done.wait(0.05):
            for spec in self.dep.specs:
                proc = self.dep.procs[f"node-{spec.client}"]
                self.seen.setdefault(spec.client, set()).update(clientapps(proc.pid))
                if len(self.seen[spec.client]) >= TRAIN_STAGE:
                    self.victim = spec.client
                    stop_processes([proc.pid, *descendants(proc.pid)], grace=0.0)
                    return


@pytest.mark.slow
def test_a_supernode_killed_mid_round_under_secagg_leaves_a_release_of_survivors_or_none(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(ledger))
    path = tmp_path / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", str(N), "--rounds", "10", "--q", "1.0", "--clip", "1.0", "--methods",
            "dp-fedavg", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", "2410",
            "--participations", "10", "-o", str(path)]  # fmt: skip
    assert CliRunner().invoke(cli_app, args).exit_code == 0
    with LocalDeployment(tmp_path / "dep", plan=str(path), nodes=N, method="dp-fedavg",
                         state_dir=tmp_path / "state") as dep:  # fmt: skip
        dep.start_nodes()
        killer = KillMidRound(dep)
        killer.thread.start()
        try:
            m = dep.run(
                trust="secagg", out=tmp_path / "run", rounds=ROUNDS, round_timeout=60, timeout=600, ledger=str(ledger)
            )
        finally:
            killer.done.set()
            killer.thread.join()
        victim = killer.victim
        assert victim is not None and not alive(dep.procs[f"node-{victim}"].pid)
        log = (dep.folder / "logs" / "run-secagg.log").read_text()
    assert m["trust"] == "secagg" and m["rounds"] == ROUNDS
    # Every SecAgg+ run (one per group and round) either completed with the survivors' masked vectors, at least its
    # threshold max(t, c // 2 + 1) of the c = N sampled, or halted; the round the node died in lost exactly it.
    outcomes = re.findall(r"Secure aggregation (completed|halted)", log)
    received = [int(k) for k in re.findall(r"aggregate_fit: received (\d+) results", log)]
    assert len(outcomes) == ROUNDS and len(received) == outcomes.count("completed")
    assert all(k >= N // 2 + 1 for k in received) and (N - 1 in received or "halted" in outcomes)
    # The ledger charged the rounds the run released, each once, and holds nothing back as reserved.
    runs = Ledger(str(ledger)).runs()
    assert len(runs) == 1 and runs[0].finished and runs[0].released == set(range(ROUNDS))
    spending = {s.client_id: s for s in Ledger(str(ledger)).spending()}
    assert len(spending) == N and all(s.released_rounds == ROUNDS and s.reserved_rounds == 0 for s in spending.values())
    # The killed node counted at most the round it died in (it is admitted as it trains); its mirror never exceeds
    # the ledger's charge.
    node = NodeState(tmp_path / "state", victim)
    assert node.participations(file_sha256(path)) <= 1
    assert node.spent(load_plan(path).config.delta) <= spending[str(victim)].epsilon_spent * (1 + 1e-9)
