"""Deployment faults on N SuperNodes (default 50) of this machine: nodes killed mid-round under SecAgg+, and the
SuperLink killed and restarted mid-run. What happened is recorded, not timed.

Both scenarios deploy a GDPFed+ digits plan solved for ``secagg`` (as :mod:`bench_deploy` does: ε = 1, 2, 4; T = 20;
``--q`` 0.8; b = 16; F = 0.75) on N SuperNodes with TLS and node authentication, their ClientApp processes forked from
one warm SuperExec (``--no-warm``: Flower's, one per message), the ledger and the nodes' state in a temporary folder.

- ``kill``: a run of ``--rounds`` rounds; once ``--kill`` nodes have received their second SecAgg+ message of round 2
  (they have shared their keys' shares, their masked vectors are still to come), those nodes are killed (SIGKILL,
  each SuperNode and its children). Recorded per round, from the ServerApp's log: the groups' SecAgg+ runs that
  completed and those that halted (a halted run releases nothing of its group), and the results and failures of the
  completed ones; then the ledger (every client's released and reserved rounds: the run's rounds released, none left
  reserved) and the killed nodes' own counts (each at most the rounds it took part in, the round it died in at most).
- ``restart``: a run of ``--rounds`` rounds; once round 1 is done, the SuperLink (and the ServerApp it runs) is killed
  and started again on the same port and database. Recorded: how the run in progress ended, the time until every
  SuperNode was back online, then a new run of 2 rounds and the ledger (the lost run's released rounds and its
  reservation stay charged: nothing is charged less than was spent).

Every process of the deployment is stopped at the end, by PID, and counted. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy_faults.py [--nodes 50] [--scenarios kill,restart] [--record]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from bench_deploy import RECEIVED, solve

from hdp_planner.ledger.store import Ledger
from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_flower.deploy import DeployError, LocalDeployment
from hdp_planner_flower.node_state import NodeState
from hdp_planner_flower.pin import file_sha256
from hdp_planner_flower.processes import alive, descendants, stop_processes

ROUND = re.compile(r"[\]\d] round (\d+)/")  # a progress line ("[ 12.3 s] round 1/3") or the log's ("  12.34 round 1/3")
SECAGG = re.compile(r"Secure aggregation (completed|halted)|received (\d+) results and (\d+) failures")


def received(logs: Path, rnd: int) -> dict[int, int]:
    """Client → messages of round ``rnd`` its SuperNode has received so far (its log)."""
    out = {}
    for log in logs.glob("node-*.log"):
        text = log.read_text(errors="replace")
        out[int(log.stem.split("-")[1])] = sum(1 for m in RECEIVED.finditer(text) if int(m.group(2)) == rnd)
    return out


def secagg_outcomes(log: Path) -> dict[int, dict[str, int]]:
    """Round → SecAgg+ runs completed and halted, results and failures of the completed ones (the run's log)."""
    rounds: dict[int, dict[str, int]] = {}
    current = 1
    for line in log.read_text(errors="replace").splitlines():
        if m := ROUND.search(line):
            current = int(m.group(1)) + 1
            continue
        if m := SECAGG.search(line):
            entry = rounds.setdefault(current, {"completed": 0, "halted": 0, "results": 0, "failures": 0})
            if m.group(1):
                entry[m.group(1)] += 1
            else:
                entry["results"] += int(m.group(2))
                entry["failures"] += int(m.group(3))
    return rounds


def ledger_rounds(target: str) -> str:
    """The clients' released and reserved rounds in the ledger, as ``released R (n clients)`` groups."""
    spent = Ledger(target).spending(federation="flower")
    counts: dict[tuple[int, int], int] = {}
    for c in spent:
        counts[(c.released_rounds, c.reserved_rounds)] = counts.get((c.released_rounds, c.reserved_rounds), 0) + 1
    return "; ".join(f"{n} clients: {rel} released, {res} reserved" for (rel, res), n in sorted(counts.items()))


def start(dep: LocalDeployment, n: int, timeout: float) -> float:
    """Register and start every node (and the warm SuperExec); the seconds until all are online."""
    t0 = time.monotonic()
    dep.start_nodes()
    while time.monotonic() - t0 < timeout:
        try:
            if dep.online() >= n:
                return time.monotonic() - t0
        except DeployError:
            pass
        for spec in dep.specs:  # a node that gave up activating under load starts again, as a service would
            if dep.procs[f"node-{spec.client}"].poll() is not None:
                dep.start_node(spec)
        time.sleep(2.0)
    raise SystemExit(f"not all {n} nodes online after {timeout:.0f} s")


def kill_nodes(dep: LocalDeployment, args, lines: list[str], stop: threading.Event, done: list) -> None:
    """Once round 1 is done, kill ``--kill`` SuperNodes (each with its children) that have received their second
    SecAgg+ message of round 2; ``done``: their clients."""
    while not stop.is_set():
        if any(ROUND.search(line) for line in lines):  # round 1 done: watch round 2
            ready = sorted(c for c, k in received(dep.folder / "logs", 2).items() if k >= 2)
            if len(ready) >= args.kill:
                for c in ready[: args.kill]:
                    proc = dep.procs[f"node-{c}"]
                    stop_processes([proc.pid, *descendants(proc.pid)], grace=0.0)
                done.extend(ready[: args.kill])
                print(f"killed the SuperNodes of clients {done} in round 2", flush=True)
                return
        stop.wait(0.5)


def restart_superlink(dep: LocalDeployment, args, lines: list[str], stop: threading.Event, done: list) -> None:
    """Once round 1 is done, kill the SuperLink and start it again; ``done``: the seconds until every SuperNode was
    back online (nothing if not all were within ``--timeout``)."""
    while not stop.is_set():
        if any(ROUND.search(line) for line in lines):
            dep.restart_superlink()
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.timeout:  # measured to the end, even once the run has ended
                try:
                    if dep.online() >= args.nodes:
                        done.append(time.monotonic() - t0)
                        return
                except DeployError:
                    pass
                time.sleep(2.0)
            return
        stop.wait(0.5)


FAULTS = {"kill": kill_nodes, "restart": restart_superlink}


def run(dep: LocalDeployment, args, out: Path, *, rounds: int, name: str, progress) -> tuple[str, dict | None]:
    """One run of ``rounds`` rounds: how it ended ("completed", or the deployment's one-line reason) and its
    metrics."""
    try:
        metrics = dep.run(trust="secagg", out=out, rounds=rounds, timeout=args.timeout, progress=progress, name=name,
                          round_timeout=args.round_timeout, ledger=os.environ["HDP_PLANNER_LEDGER"])  # fmt: skip
    except DeployError as exc:
        return str(exc).split(" (see ")[0], None
    return "completed", metrics


def scenario(args, folder: Path, fault: str) -> list[str]:
    """A run of ``--rounds`` rounds on N fresh SuperNodes with ``fault`` done to it from a thread; then what happened
    (one row of the table)."""
    plan = solve(folder, args.nodes, "secagg", args.q)
    ledger = os.environ["HDP_PLANNER_LEDGER"]
    with LocalDeployment(folder / "dep", plan=str(plan), nodes=args.nodes, state_dir=folder / "state", wait=300,
                         retries=(1000, args.timeout), warm=args.warm, database=fault == "restart") as dep:  # fmt: skip
        online = start(dep, args.nodes, args.timeout)
        lines: list[str] = []
        seen: list = []
        stop = threading.Event()
        watcher = threading.Thread(target=FAULTS[fault], args=(dep, args, lines, stop, seen), daemon=True)
        watcher.start()
        ended, _ = run(dep, args, folder / "out1", rounds=args.rounds, name="run-first", progress=lines.append)
        stop.set()
        watcher.join()
        done = sum(1 for line in lines if ROUND.search(line))
        if fault == "kill":
            what = f"clients {seen} in round 2 (after 2 of its messages)"
            outcomes = secagg_outcomes(dep.folder / "logs" / "run-first.log")
            released = "; ".join(f"round {r}: {o['completed']} completed ({o['results']} results, {o['failures']} "
                                 f"failures), {o['halted']} halted" for r, o in sorted(outcomes.items()))  # fmt: skip
            charged = ledger_rounds(ledger)
            counts = [NodeState(folder / "state", c).participations(file_sha256(plan)) for c in seen]
            own = f"killed nodes' participations {counts}"
        else:
            what = f"SuperLink after round 1; all nodes back online: {f'{seen[0]:.0f} s' if seen else 'not all'}"
            after = ledger_rounds(ledger)
            second, metrics = run(dep, args, folder / "out2", rounds=2, name="run-second", progress=[].append)
            released = f"a new run of 2 rounds: {second}" + (f", {metrics['rounds']} rounds" if metrics else "")
            charged, own = f"after the lost run: {after}; after the new one: {ledger_rounds(ledger)}", "-"
        pids = dep.pids()
    left = [pid for pid in pids if alive(pid)]
    return [fault, str(args.nodes), f"{online:.0f} s", what, str(done), ended, released, charged, own, str(len(left))]


COLUMNS = ("scenario", "nodes", "nodes online after", "fault", "rounds done", "how the run ended",
           "what the server released", "ledger", "nodes' own counts", "processes left")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--scenarios", default="kill,restart")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kill", type=int, default=5, help="SuperNodes killed in round 2 (kill scenario)")
    ap.add_argument("--q", type=float, default=0.8)
    ap.add_argument("--warm", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds for start-up and for each run")
    ap.add_argument("--round-timeout", type=float, default=300.0, help="seconds a round waits for its replies")
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    rows: list[list[str]] = []
    for name in args.scenarios.split(","):
        with tempfile.TemporaryDirectory(prefix="bench-deploy-faults-") as tmp:
            os.environ["HDP_PLANNER_LEDGER"] = str(Path(tmp) / "ledger.sqlite")
            load = os.getloadavg()[0]
            rows.append([*scenario(args, Path(tmp), name), f"{load:.1f}"])
            print(" | ".join(rows[-1]), flush=True)
    if args.record:
        table = Table(caption=f"GDPFed+ under SecAgg+ on {args.nodes} SuperNodes, {args.rounds} rounds per run",
                      columns=(*COLUMNS, "load (1 min) at start"), rows=tuple(map(tuple, rows)))  # fmt: skip
        notes = ("What happened, read off the ServerApp's log (Flower's SecAgg+ lines per round), the ledger and the "
                 "nodes' state files: a fault is recorded, not timed.",)  # fmt: skip
        result = Result(name="bench_deploy_faults", title="Deployment faults at scale", tables=(table,), notes=notes)
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
