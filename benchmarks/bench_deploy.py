"""A GDPFed+ plan on Flower's deployment engine on this machine: start-up, round time and memory per node.

For each node count N (``--nodes 10,50,100``), solves a digits plan for N clients under ``--trust secagg`` (GDPFed+,
ε = 1, 2, 4; T = 20; q = 0.5; b = 16; F = 0.75), starts one SuperLink and N SuperNodes as separate processes with
TLS and node authentication (:class:`hdp_planner_flower.deploy.LocalDeployment`), and runs ``--rounds`` rounds under
each trust model of ``--trust`` against the same nodes. It reports the SuperLink's start, the nodes' registration
and start, the time from ``flwr run`` to the ServerApp's first line, each round's time (median and minimum, from the
ServerApp's progress lines), and the peak resident memory of one node (its SuperNode process and the ClientApp
processes it starts, summed; median and maximum over the nodes, sampled every second). The ledger and the node
state live in the run's temporary folder. ``--startup 5,10,20,30`` measures start-up alone against the node count
(the SuperLink, registering the keys, starting the SuperNodes until the SuperLink counts them all online), no run.
Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py [--nodes 10,50,100] [--rounds 5]
        [--trust server,secagg] [--record]
    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py --startup 5,10,20,30 [--record]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_flower.deploy import LocalDeployment, descendants

ROUND = re.compile(r"\[\s*([\d.]+) s\] round (\d+)/")


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class MemorySampler:
    """Peak over time of each node's process tree (SuperNode + its children), sampled every ``every`` seconds."""

    def __init__(self, dep: LocalDeployment, every: float = 1.0) -> None:
        self.dep, self.every = dep, every
        self.peak: dict[str, float] = {}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        while not self.done.wait(self.every):
            for name, proc in list(self.dep.procs.items()):
                total = rss_mib(proc.pid) + sum(rss_mib(d) for d in descendants(proc.pid))
                self.peak[name] = max(self.peak.get(name, 0.0), total)

    def __enter__(self) -> MemorySampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def solve(folder: Path, n: int) -> Path:
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app
    from hdp_planner_train.simulator.models import make_model

    d = sum(p.numel() for p in make_model("digits").parameters())
    path = folder / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", str(n), "--rounds", "20", "--q", "0.5", "--clip", "1.0", "--methods",
            "gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim", str(d),
            "--participations", "20", "-o", str(path)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    if res.exit_code != 0:
        raise SystemExit(res.output)
    return path


def one(n: int, rounds: int, trusts: list[str], timeout: float, done) -> None:
    """Measure runs under each trust model against one deployment of ``n`` nodes; ``done(row)`` after each run."""
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        folder = Path(tmp)
        os.environ["HDP_PLANNER_LEDGER"] = str(folder / "ledger.sqlite")
        plan = solve(folder, n)
        t0 = time.monotonic()
        with LocalDeployment(folder / "dep", plan=str(plan), nodes=n, state_dir=folder / "state") as dep:
            link = time.monotonic() - t0
            dep.start_nodes()
            nodes = time.monotonic() - t0 - link
            with MemorySampler(dep) as mem:
                for trust in trusts:
                    lines: list[str] = []
                    load = os.getloadavg()[0]
                    dep.run(trust=trust, out=folder / trust, rounds=rounds, timeout=timeout, progress=lines.append)
                    first = float(re.search(r"\[\s*([\d.]+) s\]", lines[0]).group(1))
                    ends = [first] + [float(m.group(1)) for m in map(ROUND.search, lines) if m]
                    times = [b - a for a, b in itertools.pairwise(ends)]
                    node_peaks = [v for k, v in mem.peak.items() if k.startswith("node-")]
                    row = [str(n), trust, f"{link:.1f}", f"{nodes:.1f}", f"{first:.1f}",
                           f"{statistics.median(times):.1f}", f"{min(times):.1f}",
                           f"{statistics.median(node_peaks):.0f}", f"{max(node_peaks):.0f}",
                           f"{mem.peak.get('superlink', 0):.0f}", f"{load:.1f}"]  # fmt: skip
                    print(" | ".join(row), flush=True)
                    done(row)


def startup(n: int) -> list[str]:
    """Start-up of ``n`` nodes: the SuperLink, the keys registered, the SuperNodes all online (seconds)."""
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        folder = Path(tmp)
        plan = solve(folder, n)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        with LocalDeployment(folder / "dep", plan=str(plan), nodes=n, state_dir=folder / "state") as dep:
            link = time.monotonic() - t0
            for spec in dep.specs:
                dep.register(spec.key)
            registered = time.monotonic() - t0 - link
            for spec in dep.specs:
                dep.start_node(spec)
            while dep.online() < n:
                time.sleep(0.5)
            online = time.monotonic() - t0 - link - registered
    row = [str(n), f"{link:.1f}", f"{registered:.1f}", f"{registered / n:.2f}", f"{online:.1f}",
           f"{link + registered + online:.1f}", f"{load:.1f}"]  # fmt: skip
    print(" | ".join(row), flush=True)
    return row


def record(rows: list[list[str]], columns: tuple[str, ...], rounds: int) -> None:
    """Write the rows measured so far as ``benchmarks/results/bench_deploy.json``."""
    notes = ("Each SuperNode starts one ClientApp process per message (Flower 1.41's subprocess isolation): a "
             "round costs each sampled node a Python start with torch, and SecAgg+ has four messages a round.",
             "Node peak: the SuperNode process and the ClientApp processes alive at once, summed.",
             "The machine is shared: the load average (1 min) is read before each run.")  # fmt: skip
    table = Table(f"GDPFed+ on digits, {rounds} rounds per run, TLS and node authentication", columns,
                  tuple(tuple(r) for r in rows))  # fmt: skip
    result = Result(name="bench_deploy", title="A plan on Flower's deployment engine: start-up, rounds, memory",
                    tables=(table,), notes=notes)  # fmt: skip
    print(f"written to {write_result(result)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trust", default="server,secagg")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--startup", default=None, help="node counts: measure start-up alone")
    ap.add_argument("--record", action="store_true", help="write the result file after every measured run")
    args = ap.parse_args()
    if args.startup:
        columns = ("nodes", "SuperLink s", "register keys s", "per key s", "nodes online s", "total s", "load")
        print(" | ".join(columns), flush=True)
        rows = [startup(n) for n in map(int, args.startup.split(","))]
        if args.record:
            table = Table("start-up with TLS and node authentication, no enrolment round", columns,
                          tuple(map(tuple, rows)))  # fmt: skip
            note = ("The SuperLink sends no message per node before round 1 (the registry maps nodes to clients); "
                    "each key is registered by its own `flwr supernode register` process.",)  # fmt: skip
            result = Result(name="bench_deploy_startup", title="Deployment start-up against the node count",
                            tables=(table,), notes=note)  # fmt: skip
            print(f"written to {write_result(result)}")
        return
    columns = ("nodes", "trust", "SuperLink s", "register + start nodes s", "run to ServerApp s", "round median s",
               "round min s", "node peak MiB median", "node peak MiB max", "SuperLink MiB", "load (1 min)")  # fmt: skip
    print(" | ".join(columns), flush=True)
    rows: list[list[str]] = []

    def done(row: list[str]) -> None:
        rows.append(row)
        if args.record:
            record(rows, columns, args.rounds)

    for n in map(int, args.nodes.split(",")):
        one(n, args.rounds, args.trust.split(","), args.timeout, done)


if __name__ == "__main__":
    main()
