"""A GDPFed+ plan on Flower's deployment engine on this machine: start-up, each round's time, CPU and memory.

For each node count N (``--nodes 10,50``) and each scenario of ``--trust`` (``server``, ``secagg``, and ``hidden``:
secagg with public cohorts and private coins, ``solve --hide-sample``), solves a digits plan for N clients
(GDPFed+, ε = 1, 2, 4; T = 20; ``--q`` 0.8; b = 16; F = 0.75), starts one SuperLink and N SuperNodes pinning it as
separate processes with TLS and node authentication (:class:`hdp_planner_flower.deploy.LocalDeployment`; their
ClientApp processes forked from one warm SuperExec, or with ``--no-warm`` Flower's own, a new process per message),
waits until the SuperLink counts them all online, and runs ``--rounds`` rounds under that trust model. The scenarios
of one invocation run one after the other on the same machine: compare them within one invocation.

Start-up: the SuperLink, registering the keys, the SuperNodes until all are online (no message is sent to a node
before round 1). Each round, from the ServerApp's progress lines: its wall time; the nodes' CPU seconds (user +
system of every process of the nodes: SuperNodes, SuperExecs, ClientApp processes, read from ``/proc`` every
``--every`` seconds, a process that ended counted in its parent once it is reaped), the messages the nodes received
in it (their logs) and the CPU seconds per message; the server's CPU seconds (SuperLink, ServerApp); the nodes' peak
proportional set size (PSS, ``/proc/PID/smaps_rollup``: a page shared by k processes counts 1/k in each) summed over
every node process, and the lowest ``MemAvailable`` against before the SuperLink started; the load average. A guard
stops every process of the deployment (by PID) when ``MemAvailable`` falls under ``--floor`` MiB; a run stopped so,
or one past ``--timeout``, is recorded with the rounds it finished. ``--startup 5,10,20,30`` measures start-up
alone. The ledger and the node state live in a temporary folder. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py [--nodes 50] [--rounds 5]
        [--trust server,secagg,hidden] [--no-warm] [--record]
    PYTHONPATH=. nice -n 10 python benchmarks/bench_deploy.py --startup 5,10,20,30 [--record]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result
from hdp_planner_flower.deploy import DeployError, LocalDeployment
from hdp_planner_flower.processes import descendants, stop_processes

STAMP = re.compile(r"\[\s*([\d.]+) s\]")
ROUND = re.compile(r"\[\s*([\d.]+) s\] round (\d+)/")
RECEIVED = re.compile(r"\[RUN (\d+), ROUND (\d+)\]\s*\n.*Receiving: (\S+) message")
TICKS = os.sysconf("SC_CLK_TCK")


def pss_mib(pid: int) -> float:
    """Proportional set size of ``pid`` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and of its children it has reaped (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / TICKS  # utime, stime, cutime, cstime


def available_mib() -> float:
    """The machine's ``MemAvailable`` in MiB."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    raise OSError("no MemAvailable in /proc/meminfo")


class Sampler:
    """Every ``every`` seconds: the nodes' and the server's CPU seconds so far, the nodes' PSS and ``MemAvailable``
    (``samples``: (time, node CPU s, server CPU s, node PSS MiB, MemAvailable MiB, load)); below ``floor`` MiB
    available it stops every process of the deployment, by PID."""

    def __init__(self, dep: LocalDeployment, every: float, floor: float) -> None:
        self.dep, self.every, self.floor = dep, every, floor
        self.base = available_mib()
        self.samples: list[tuple[float, float, float, float, float, float]] = []
        self.cpu: dict[int, float] = {}  # the last CPU seconds seen of every process, gone ones included
        self.tripped = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def guard(self) -> float:
        avail = available_mib()
        if avail < self.floor and not self.tripped:
            self.tripped = True
            print(f"MemAvailable {avail:.0f} MiB < {self.floor:.0f} MiB: stopping the deployment", flush=True)
            stop_processes(self.dep.pids(), grace=2.0)
        return avail

    def sample(self) -> None:
        node_cpu = server_cpu = pss = 0.0
        for name, proc in list(self.dep.procs.items()):
            tree = [proc.pid, *descendants(proc.pid)]
            for pid in tree:
                seconds = cpu_seconds(pid)
                if seconds:
                    self.cpu[pid] = max(self.cpu.get(pid, 0.0), seconds)
            total = sum(self.cpu.get(pid, 0.0) for pid in tree)
            if name.startswith(("node-", "executor")):
                node_cpu += total
                pss += sum(pss_mib(pid) for pid in tree)
            else:
                server_cpu += total
        self.samples.append((time.monotonic(), node_cpu, server_cpu, pss, self.guard(), os.getloadavg()[0]))

    def loop(self) -> None:
        last = 0.0
        while not self.done.wait(0.25):
            self.guard()
            if time.monotonic() - last >= self.every:
                last = time.monotonic()
                self.sample()

    def between(self, t0: float, t1: float) -> list[tuple[float, ...]]:
        return [x for x in self.samples if t0 <= x[0] <= t1]

    def at(self, t: float, column: int) -> float:
        """Column ``column`` of the last sample at or before ``t`` (linear in between two samples)."""
        before = [x for x in self.samples if x[0] <= t]
        after = [x for x in self.samples if x[0] > t]
        if not before:
            return after[0][column] if after else 0.0
        if not after:
            return before[-1][column]
        (ta, a), (tb, b) = (before[-1][0], before[-1][column]), (after[0][0], after[0][column])
        return a + (b - a) * (t - ta) / (tb - ta)

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


def solve(folder: Path, n: int, scenario: str, q: float) -> Path:
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app
    from hdp_planner_train.learning.models import make_model

    d = sum(p.numel() for p in make_model("digits").parameters())
    path = folder / "plan.json"
    trust = "server" if scenario == "server" else "secagg"
    args = ["solve", "--eps", "1,2,4", "--n", str(n), "--rounds", "20", "--q", str(q), "--clip", "1.0", "--methods",
            "gdpfed+", "--trust", trust, "--bits", "16", "--survivors", "0.75", "--model-dim", str(d),
            "--participations", "20", *(["--hide-sample"] if scenario == "hidden" else []),
            "-o", str(path)]  # fmt: skip
    res = CliRunner().invoke(app, args)
    if res.exit_code != 0:
        raise SystemExit(res.output)
    return path


def messages_per_round(logs: Path) -> dict[int, int]:
    """Round → messages the nodes received in it (``[RUN r, ROUND k]`` then ``Receiving``, in each node's log)."""
    counts: dict[int, int] = {}
    for log in logs.glob("node-*.log"):
        for match in RECEIVED.finditer(log.read_text(errors="replace")):
            counts[int(match.group(2))] = counts.get(int(match.group(2)), 0) + 1
    return counts


STARTUP = ("nodes", "trust", "SuperLink s", "register keys s", "per key s", "nodes online s", "total s",
           "nodes restarted", "load")  # fmt: skip
RUNS = ("nodes", "scenario", "ClientApp processes", "q", "rounds done", "run to ServerApp s", "round median s",
        "round min s", "median over the trusted round", "nodes' CPU s a round (median)", "CPU s per message (median)",
        "node idle PSS MiB (median)", "nodes' PSS peak GiB", "MemAvailable drop peak GiB", "load (1 min)")  # fmt: skip
ROUNDS = ("nodes", "scenario", "ClientApp processes", "round", "wall s", "nodes' CPU s", "messages",
          "CPU s per message", "server CPU s", "nodes' PSS peak GiB", "MemAvailable drop peak GiB",
          "load (1 min)")  # fmt: skip


def one(n: int, scenario: str, args, done) -> None:
    """Start ``n`` nodes pinning a plan solved for ``scenario`` and measure start-up, then (unless ``args.startup``)
    a run; ``done(table, row)`` after each."""
    mode = "warm" if args.warm else "per message"
    with tempfile.TemporaryDirectory(prefix="bench-deploy-") as tmp:
        folder = Path(tmp)
        os.environ["HDP_PLANNER_LEDGER"] = str(folder / "ledger.sqlite")
        plan = solve(folder, n, scenario, args.q)
        load = os.getloadavg()[0]
        t0 = time.monotonic()
        with LocalDeployment(folder / "dep", plan=str(plan), nodes=n, state_dir=folder / "state", wait=300,
                             retries=(1000, args.timeout), warm=args.warm, database=args.database) as dep:  # fmt: skip
            with Sampler(dep, args.every, args.floor) as mem:
                link = time.monotonic() - t0
                dep.register_all()
                registered = time.monotonic() - t0 - link
                for spec in dep.specs:
                    if not mem.tripped:
                        dep.start_node(spec)
                        time.sleep(args.stagger)
                if args.warm and not mem.tripped:
                    dep.start_executor()
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
                shown = f"{online:.1f}" if not why else f"- ({up}/{n} online, {why})"
                done("startup", [str(n), scenario, f"{link:.1f}", f"{registered:.1f}", f"{registered / n:.2f}", shown,
                                 f"{link + registered + online:.1f}", str(restarts), f"{load:.1f}"])  # fmt: skip
                if args.startup or why:
                    return
                time.sleep(3 * args.every)  # a full sample of the idle nodes
                idle = mem.samples[-1][3] / n
                lines: list[str] = []
                start = time.monotonic()
                try:
                    dep.run(trust="server" if scenario == "server" else "secagg", out=folder / "out",
                            rounds=args.rounds, timeout=args.timeout, round_timeout=args.round_timeout,
                            progress=lines.append)  # fmt: skip
                except DeployError as e:
                    why = "memory guard" if mem.tripped else str(e).split(" (see ")[0]  # no local paths
                mem.sample()
                report(n, scenario, mode, lines, start, mem, dep.folder / "logs", idle, why, args, done)


def report(n, scenario, mode, lines, start, mem: Sampler, logs: Path, idle, why, args, done) -> None:
    """The run's rows: one per round, and the run's summary."""
    stamps = [float(m.group(1)) for m in map(STAMP.search, lines[:1]) if m]
    ends = [(int(m.group(2)), float(m.group(1))) for m in map(ROUND.search, lines) if m]
    counts = messages_per_round(logs)
    rounds, cpus, per_message = [], [], []
    previous = stamps[0] if stamps else 0.0
    for rnd, end in ends:
        t0, t1 = start + previous, start + end
        window = mem.between(t0, t1) or mem.samples[-1:]
        cpu = mem.at(t1, 1) - mem.at(t0, 1)
        server = mem.at(t1, 2) - mem.at(t0, 2)
        messages = counts.get(rnd, 0)
        rounds.append(end - previous)
        cpus.append(cpu)
        if messages:
            per_message.append(cpu / messages)
        drop = (mem.base - min(x[4] for x in window)) / 1024
        done("rounds", [str(n), scenario, mode, str(rnd), f"{end - previous:.1f}", f"{cpu:.1f}", str(messages),
                        f"{cpu / messages:.2f}" if messages else "-", f"{server:.1f}",
                        f"{max(x[3] for x in window) / 1024:.2f}", f"{drop:.1f}",
                        f"{statistics.mean(x[5] for x in window):.1f}"])  # fmt: skip
        previous = end
    loads = [x[5] for x in mem.between(start, time.monotonic())] or [os.getloadavg()[0]]
    done("runs", [str(n), scenario, mode, f"{args.q:g}",
                  f"{len(ends)}/{args.rounds}" + (f" ({why})" if why else ""),
                  f"{stamps[0]:.1f}" if stamps else "-",
                  f"{statistics.median(rounds):.1f}" if rounds else "-", f"{min(rounds):.1f}" if rounds else "-", "-",
                  f"{statistics.median(cpus):.1f}" if cpus else "-",
                  f"{statistics.median(per_message):.2f}" if per_message else "-", f"{idle:.0f}",
                  f"{max(x[3] for x in mem.samples) / 1024:.2f}",
                  f"{(mem.base - min(x[4] for x in mem.samples)) / 1024:.1f}",
                  f"{min(loads):.1f} to {max(loads):.1f}"])  # fmt: skip


NOTES = {
    "runs": (
        "ClientApp processes: warm, forked from one SuperExec that has imported the node's ClientApp "
        "(hdp_planner_flower.executor, the SuperNodes with --isolation process); per message, Flower's default "
        "(each SuperNode's own SuperExec starts a new Python process per message). SecAgg+ sends four messages a "
        "round to each sampled node; the groups' SecAgg+ runs go at once.",
        "Nodes' CPU: user + system seconds of every process of the nodes (SuperNodes, SuperExecs, ClientApp "
        "processes) in the round, from /proc; per message: over the messages the nodes received in the round "
        "(their logs). Server: the SuperLink and the ServerApp. PSS: proportional set size (a page shared by k "
        "processes counts 1/k in each), summed over every node process; MemAvailable drop: from before the "
        "SuperLink started, at its lowest.",
        "Median over the trusted round: the scenario's median round over the trusted (server) scenario's median "
        "round of the same invocation, on the same machine, one after the other.",
        "The SuperLink keeps its state in memory (Flower's default), or with --database in an SQLite file, "
        "waiting up to 60 s for its lock (hdp_planner_flower.superlink).",
        "Every process runs with MALLOC_ARENA_MAX=2 and one math thread (OMP/MKL/OpenBLAS), under nice.",
        "The machine is shared (2 cores, 23 GiB, no swap) with other jobs: the load average (1 min) is sampled "
        "during each run; a run that did not finish is recorded with the rounds it did and why.",
    ),
    "startup": (
        "The SuperLink sends no message per node before round 1 (the registry maps nodes to clients); one "
        "process registers every key; the SuperNodes start 0.2 s apart; online: counted by `flwr supernode ls` "
        "every 2 s; a SuperNode that gave up activating (the SuperLink's TLS handshakes time out under load) is "
        "started again, as a service manager would.",
    ),
}
TITLES = {"runs": ("bench_deploy", "A plan on Flower's deployment engine: rounds, CPU, memory"),
          "startup": ("bench_deploy_startup", "Deployment start-up against the node count")}  # fmt: skip


def ratios(runs: list[list[str]]) -> list[list[str]]:
    """Each run's median round over the trusted run's of the same node count and ClientApp processes."""
    trusted = {(r[0], r[2]): float(r[6]) for r in runs if r[1] == "server" and r[6] != "-"}
    out = []
    for r in runs:
        ref = trusted.get((r[0], r[2]))
        out.append([*r[:8], f"{float(r[6]) / ref:.2f}x" if ref and r[6] != "-" else "-", *r[9:]])
    return out


def record(rows: dict[str, list[list[str]]], captions: dict[str, str], startup: bool) -> None:
    """Write this invocation's tables to their result file."""
    if startup:
        name, title = TITLES["startup"]
        tables = (Table(caption=captions["startup"], columns=STARTUP, rows=tuple(map(tuple, rows["startup"]))),)
        notes = NOTES["startup"]
    else:
        name, title = TITLES["runs"]
        tables = (
            Table(caption=captions["runs"], columns=RUNS, rows=tuple(map(tuple, ratios(rows["runs"])))),
            Table(caption=captions["rounds"], columns=ROUNDS, rows=tuple(map(tuple, rows["rounds"]))),
            Table(caption=captions["startup"], columns=STARTUP, rows=tuple(map(tuple, rows["startup"]))),
        )
        notes = NOTES["runs"] + NOTES["startup"]
    path = write_result(Result(name=name, title=title, tables=tables, notes=notes))
    print(f"written to {path}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="10")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--trust", default="server,secagg,hidden", help="scenarios: server, secagg, hidden")
    ap.add_argument(
        "--warm",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ClientApp processes forked from one warm SuperExec (default), or Flower's, one per message",
    )
    ap.add_argument(
        "--database",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the SuperLink's state in an SQLite file (what survives its restart), not in memory (Flower's default)",
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run (and for start-up)")
    ap.add_argument("--round-timeout", type=float, default=900.0, help="seconds a round waits for its replies")
    ap.add_argument("--q", type=float, default=0.8, help="the plan's sampling rate (--q of hdp-plan solve)")
    ap.add_argument("--stagger", type=float, default=0.2, help="seconds between starting two SuperNodes")
    ap.add_argument("--every", type=float, default=2.0, help="seconds between two samples of CPU and memory")
    ap.add_argument("--floor", type=float, default=2048.0, help="MiB of MemAvailable under which all is stopped")
    ap.add_argument("--startup", default=None, help="node counts: measure start-up alone")
    ap.add_argument("--record", action="store_true", help="write the result file after every measurement")
    args = ap.parse_args()
    if args.startup:
        args.nodes = args.startup
    state = "an SQLite file" if args.database else "memory"
    captions = {"runs": f"GDPFed+ on digits, {args.rounds} rounds per run, TLS and node authentication, the "
                        f"SuperLink's state in {state}",
                "rounds": "each round of those runs",
                "startup": "start-up with TLS and node authentication, no enrolment round"}  # fmt: skip
    rows: dict[str, list[list[str]]] = {"runs": [], "rounds": [], "startup": []}

    def done(kind: str, row: list[str]) -> None:
        print(kind, " | ".join(row), flush=True)
        rows[kind].append(row)
        if args.record and kind != "rounds":
            record(rows, captions, bool(args.startup))

    for n in map(int, args.nodes.split(",")):
        for scenario in args.trust.split(","):
            one(n, scenario, args, done)
    for row in ratios(rows["runs"]):
        print("runs", " | ".join(row), flush=True)


if __name__ == "__main__":
    main()
