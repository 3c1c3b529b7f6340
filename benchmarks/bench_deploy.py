"""A GDPFed+ plan on Flower's deployment engine on this machine: start-up, round time and memory per node.

For each node count N (``--nodes 10,50,100``) and each trust model of ``--trust``, solves a digits plan for N
clients under that trust model (GDPFed+, ε = 1, 2, 4; T = 20; ``--q`` 0.8; b = 16; F = 0.75), starts one SuperLink and
N SuperNodes pinning it as separate processes with TLS and node authentication
(:class:`hdp_planner_flower.deploy.LocalDeployment`), waits until the SuperLink counts them all online, and runs
``--rounds`` rounds under that trust model.

Start-up: the SuperLink, registering the keys, the SuperNodes until all are online (no message is sent to a node
before round 1). Runs: the time from ``flwr run`` to the ServerApp's first line and each round's time (median and
minimum, from the ServerApp's progress lines). Memory, sampled every ``--every`` seconds: each node's proportional
set size (PSS, ``/proc/PID/smaps_rollup``: a page shared by k processes counts 1/k in each, so the libraries every
node maps count once over the machine) summed over its process tree (SuperNode, SuperExec, ClientApps), idle before
the first run and its peak during the runs; and the machine's ``MemAvailable`` drop from before the SuperLink
started, idle and at its lowest. A guard stops every process of the deployment (by PID) when ``MemAvailable`` falls
under ``--floor`` MiB; a run stopped so, or one past ``--timeout``, is recorded with the rounds it finished.
``--startup 5,10,20,30`` measures start-up alone. The ledger and the node state live in a temporary folder. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py [--nodes 10,50,100] [--rounds 5]
        [--trust server,secagg] [--round-timeout 900] [--record]
    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py --startup 5,10,20,30 [--record]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from hdp_planner.report.results import RESULTS_DIR, Result, Table, write_result
from hdp_planner_flower.deploy import DeployError, LocalDeployment
from hdp_planner_flower.processes import descendants, stop_processes

ROUND = re.compile(r"\[\s*([\d.]+) s\] round (\d+)/")


def pss_mib(pid: int) -> float:
    """Proportional set size of ``pid`` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def available_mib() -> float:
    """The machine's ``MemAvailable`` in MiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise OSError("no MemAvailable in /proc/meminfo")


class MemorySampler:
    """Each process tree's PSS (``now``, and its peak since :meth:`reset`) and the lowest ``MemAvailable``, every
    ``every`` seconds; below ``floor`` MiB available it stops every process of the deployment, by PID."""

    def __init__(self, dep: LocalDeployment, every: float, floor: float) -> None:
        self.dep, self.every, self.floor = dep, every, floor
        self.now: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self.base = available_mib()
        self.low = self.base
        self.tripped = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def guard(self) -> None:
        """Read ``MemAvailable``; below the floor, stop every process of the deployment (once)."""
        avail = available_mib()
        self.low = min(self.low, avail)
        if avail < self.floor and not self.tripped:
            self.tripped = True
            print(f"MemAvailable {avail:.0f} MiB < {self.floor:.0f} MiB: stopping the deployment", flush=True)
            stop_processes(self.dep.pids(), grace=2.0)

    def loop(self) -> None:
        last = 0.0
        while not self.done.wait(0.25):  # the guard every 0.25 s, and between two processes' PSS
            self.guard()
            if time.monotonic() - last < self.every:
                continue
            last = time.monotonic()
            for name, proc in list(self.dep.procs.items()):
                self.guard()
                self.now[name] = pss_mib(proc.pid) + sum(pss_mib(d) for d in descendants(proc.pid))
                self.peak[name] = max(self.peak.get(name, 0.0), self.now[name])

    def reset(self) -> None:
        """Peaks and the lowest ``MemAvailable`` from now on."""
        self.peak, self.low = dict(self.now), available_mib()

    def nodes(self, values: dict[str, float]) -> list[float]:
        return [v for k, v in values.items() if k.startswith("node-")] or [0.0]

    def __enter__(self) -> MemorySampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def solve(folder: Path, n: int, trust: str, q: float) -> Path:
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app
    from hdp_planner_train.learning.models import make_model

    d = sum(p.numel() for p in make_model("digits").parameters())
    path = folder / "plan.json"
    args = ["solve", "--eps", "1,2,4", "--n", str(n), "--rounds", "20", "--q", str(q), "--clip", "1.0", "--methods",
            "gdpfed+", "--trust", trust, "--bits", "16", "--survivors", "0.75", "--model-dim", str(d),
            "--participations", "20", "-o", str(path)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    if res.exit_code != 0:
        raise SystemExit(res.output)
    return path


STARTUP = ("nodes", "trust", "SuperLink s", "register keys s", "per key s", "nodes online s", "total s",
           "nodes restarted", "load")  # fmt: skip
RUNS = ("nodes", "trust", "q", "rounds done", "run to ServerApp s", "round median s", "round min s",
        "node idle PSS MiB", "node peak PSS MiB median", "node peak PSS MiB max", "SuperLink peak PSS MiB",
        "MemAvailable drop idle GiB", "MemAvailable drop peak GiB", "load (1 min)")  # fmt: skip


def one(n: int, trust: str, args, done) -> None:
    """Start ``n`` nodes pinning a plan solved for ``trust`` and measure start-up, then (unless ``args.startup``) a
    run under ``trust``; ``done(table, row)`` after each."""
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        folder = Path(tmp)
        os.environ["HDP_PLANNER_LEDGER"] = str(folder / "ledger.sqlite")
        plan = solve(folder, n, trust, args.q)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        with LocalDeployment(folder / "dep", plan=str(plan), nodes=n, state_dir=folder / "state", wait=300,
                             retries=(1000, args.timeout)) as dep:  # fmt: skip
            with MemorySampler(dep, args.every, args.floor) as mem:
                link = time.monotonic() - t0
                dep.register_all()
                registered = time.monotonic() - t0 - link
                for spec in dep.specs:
                    if not mem.tripped:
                        dep.start_node(spec)
                        time.sleep(args.stagger)
                up, why, restarts = 0, "", 0
                while not why:
                    try:
                        up = dep.online()
                    except DeployError:  # the guard stopped the SuperLink, or `flwr supernode ls` timed out
                        pass
                    if up >= n:
                        break
                    for spec in dep.specs:  # a node that gave up activating under load starts again, as a service would
                        if dep.procs[f"node-{spec.client}"].poll() is not None and not mem.tripped:
                            dep.start_node(spec)
                            restarts += 1
                    if mem.tripped or time.monotonic() - t0 > args.timeout:
                        why = "memory guard" if mem.tripped else f"timeout {args.timeout:.0f} s"
                    time.sleep(2.0)
                online = time.monotonic() - t0 - link - registered
                idle = statistics.median(mem.nodes(mem.now))
                shown = f"{online:.1f}" if not why else f"- ({up}/{n} online, {why}; idle node PSS {idle:.0f} MiB)"
                done("startup", [str(n), trust, f"{link:.1f}", f"{registered:.1f}", f"{registered / n:.2f}", shown,
                                 f"{link + registered + online:.1f}", str(restarts), f"{load:.1f}"])  # fmt: skip
                time.sleep(3 * args.every)  # a full sample of the idle nodes
                idle = statistics.median(mem.nodes(mem.now)) if not why else idle
                idle_drop = (mem.base - (mem.low if why else available_mib())) / 1024
                if why and not args.startup:
                    done("runs", [str(n), trust, f"{args.q:g}", f"0/{args.rounds} ({up}/{n} nodes online, {why})",
                                  "-", "-", "-",
                                  f"{idle:.0f}", "-", "-", f"{mem.peak.get('superlink', 0):.0f}", f"{idle_drop:.1f}",
                                  f"{(mem.base - mem.low) / 1024:.1f}", f"{load:.1f}"])  # fmt: skip
                if not args.startup and not why:
                    mem.reset()
                    lines: list[str] = []
                    load = os.getloadavg()[0]
                    why = ""
                    try:
                        dep.run(trust=trust, out=folder / trust, rounds=args.rounds, timeout=args.timeout,
                                round_timeout=args.round_timeout, progress=lines.append)  # fmt: skip
                    except DeployError as e:
                        why = "memory guard" if mem.tripped else str(e).split(" (see ")[0]  # no local paths
                    starts = [float(m.group(1)) for m in map(re.compile(r"\[\s*([\d.]+) s\]").search, lines[:1]) if m]
                    ends = starts + [float(m.group(1)) for m in map(ROUND.search, lines) if m]
                    times = [b - a for a, b in itertools.pairwise(ends)]
                    peaks = mem.nodes(mem.peak)
                    row = [str(n), trust, f"{args.q:g}",
                           f"{max(len(ends) - 1, 0)}/{args.rounds}" + (f" ({why})" if why else ""),
                           f"{starts[0]:.1f}" if starts else "-", f"{statistics.median(times):.1f}" if times else "-",
                           f"{min(times):.1f}" if times else "-", f"{idle:.0f}", f"{statistics.median(peaks):.0f}",
                           f"{max(peaks):.0f}",
                           f"{mem.peak.get('superlink', 0):.0f}", f"{idle_drop:.1f}",
                           f"{(mem.base - mem.low) / 1024:.1f}", f"{load:.1f}"]  # fmt: skip
                    done("runs", row)


NOTES = {
    "runs": (
        "Each SuperNode starts one ClientApp process per message (Flower 1.41's subprocess isolation): a round "
        "costs each sampled node a Python start with torch, and SecAgg+ has four messages a round.",
        "Node PSS: the proportional set size of the SuperNode, its SuperExec and the ClientApp processes alive "
        "at once, summed (shared pages divided among the processes that map them); idle: all nodes online, "
        "before the first run; peak: the highest sample of the run. MemAvailable drop: from before the "
        "SuperLink started, with all nodes idle and at its lowest during the run.",
        "Every process runs with MALLOC_ARENA_MAX=2 and one math thread (OMP/MKL/OpenBLAS).",
        "The machine is shared (2 cores, 23 GiB, no swap): the load average (1 min) is read before each run; "
        "a run that did not finish is recorded with the rounds it did and why.",
    ),
    "startup": (
        "The SuperLink sends no message per node before round 1 (the registry maps nodes to clients); one "
        "process registers every key; the SuperNodes start 0.2 s apart; online: counted by `flwr supernode ls` "
        "every 2 s; a SuperNode that gave up activating (the SuperLink's TLS handshakes time out under load) is "
        "started again, as a service manager would.",
    ),
}
TITLES = {"runs": ("bench_deploy", "A plan on Flower's deployment engine: start-up, rounds, memory"),
          "startup": ("bench_deploy_startup", "Deployment start-up against the node count")}  # fmt: skip


def record(kind: str, rows: list[list[str]], caption: str) -> None:
    """Write ``rows`` to the result file of ``kind``, keeping its rows for other node counts (and trust models)."""
    name, title = TITLES[kind]
    columns = RUNS if kind == "runs" else STARTUP
    key = 3 if kind == "runs" else 2  # nodes, trust (, q)
    path = RESULTS_DIR / f"{name}.json"
    old = json.loads(path.read_text())["tables"][0] if path.is_file() else {"columns": [], "rows": []}
    new = {tuple(r[:key]) for r in rows}
    kept = [r for r in old["rows"] if tuple(old["columns"]) == columns and tuple(r[:key]) not in new]
    merged = sorted(kept + rows, key=lambda r: (int(r[0]), r[1:key]))
    table = Table(caption=caption, columns=columns, rows=tuple(map(tuple, merged)))
    print(f"written to {write_result(Result(name=name, title=title, tables=(table,), notes=NOTES[kind]))}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trust", default="server,secagg")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run (and for start-up)")
    ap.add_argument("--round-timeout", type=float, default=900.0, help="seconds a round waits for its replies")
    ap.add_argument("--q", type=float, default=0.8, help="the plan's sampling rate (--q of hdp-plan solve)")
    ap.add_argument("--stagger", type=float, default=0.2, help="seconds between starting two SuperNodes")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between memory samples")
    ap.add_argument("--floor", type=float, default=2048.0, help="MiB of MemAvailable under which all is stopped")
    ap.add_argument("--startup", default=None, help="node counts: measure start-up alone")
    ap.add_argument("--record", action="store_true", help="write the result files after every measurement")
    args = ap.parse_args()
    if args.startup:
        args.nodes = args.startup
    captions = {"runs": f"GDPFed+ on digits, {args.rounds} rounds per run, TLS and node authentication",
                "startup": "start-up with TLS and node authentication, no enrolment round"}  # fmt: skip
    rows: dict[str, list[list[str]]] = {"runs": [], "startup": []}

    def done(kind: str, row: list[str]) -> None:
        print(kind, " | ".join(row), flush=True)
        rows[kind].append(row)
        if args.record:
            record(kind, rows[kind], captions[kind])

    for n in map(int, args.nodes.split(",")):
        for trust in args.trust.split(","):
            one(n, trust, args, done)


if __name__ == "__main__":
    main()
