"""A deployed node's ClientApp process, per stage, against Flower's own bare ClientApp and torch's import.

A SuperNode of flwr 1.41 starts one ClientApp process (``flwr-clientapp``) per message. This measures what such a
process costs for each message a node of ``hdp-plan deploy local`` receives: the enrolment query, SecAgg+'s setup,
share-keys, masked-vector (the training stage) and unmask stages, and a trusted server's train message. Each
message, with the node's context as the SuperNode would hand it over (its SecAgg+ state, its node config pinning a
plan, its state folder), is captured from a real in-process round of ``hdp_planner_flower.node:client`` and written
to a file; then each case starts a fresh process that imports what ``flwr-clientapp`` imports, loads the ClientApp
with Flower's ``load_app``, reads the message and answers it. Cases, interleaved ``--repeats`` times:

- ``python``: the interpreter alone (``python -c pass``); ``torch``: ``python -c "import torch"``;
- ``flower bare``: Flower's bare ClientApp (one train function that replies with the content it received) answering
  the training stage's message;
- each of the node's stages; the training stages with a fresh copy of the node's state folder (so that each run counts
  the same round), holding its derivations of the plan (as in every round after the node's first), and once more
  without them (the node's first round: it derives them from the plan file).

Wall time (from the start of the process to its exit) and CPU time (user + system, from ``wait4``) per case, median
and minimum, the machine's load average before each round of cases; then one run of each case under ``python -X
importtime``: its imports' total and the heaviest top-level packages. The goals: a stage that does not train within
0.5 s of Flower's bare ClientApp; the training stage within 0.5 s of the bare ClientApp plus torch's own import (torch
minus the interpreter). Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_node_start.py [--repeats 7] [--record]
"""

from __future__ import annotations

import argparse
import copy
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result

ROOT = Path(__file__).resolve().parents[1]
N = 12  # clients of the captured round: three groups of four, all sampled

CHILD = """
import pickle, sys
import flwr.supernode.runtime.run_clientapp  # what `flwr-clientapp` imports before it loads the app
from flwr.clientapp.client_app import LoadClientAppError
from flwr.supercore.object_ref import load_app

app = load_app(sys.argv[1], LoadClientAppError, sys.argv[3])
with open(sys.argv[2], "rb") as f:
    msg, context = pickle.load(f)
reply = app(msg, context)
if reply.has_error():
    sys.exit(f"the ClientApp answered with an error: {reply.error.reason}")
"""
"""A ClientApp process: ``python -c CHILD APP_REF MESSAGE_FILE APP_DIR``."""

WARM = """
import json, os, pickle, shutil, sys, time
from flwr.clientapp.client_app import LoadClientAppError
from flwr.supercore.object_ref import load_app
from hdp_planner_flower.executor import reseed, warm

warm()
app = load_app("hdp_planner_flower.node:client", LoadClientAppError, sys.argv[1])
for case, message, saved, live in json.loads(sys.argv[2]):
    if saved:
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(saved, live)
        if "first round" in case:
            os.unlink(os.path.join(live, "derived.sqlite"))
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        reseed()
        with open(message, "rb") as f:
            msg, context = pickle.load(f)
        os._exit(1 if app(msg, context).has_error() else 0)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{case} failed in its forked process")
    print(json.dumps([case, time.perf_counter() - t0, usage.ru_utime + usage.ru_stime]), flush=True)
"""
"""The warm SuperExec's way (:mod:`hdp_planner_flower.executor`): one process imports every stage, then forks a child
per message: ``python -c WARM APP_DIR '[[case, message file, saved state, live state], ...]'``."""

BARE = """from flwr.app import Message
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg, context):
    return Message(msg.content, reply_to=msg)
"""
"""Flower's bare ClientApp: a train function that replies with what it received."""


def capture(folder: Path) -> dict[str, Path]:
    """One in-process round of each trust model on the node's ClientApp; node 0's message of every stage, with its
    context, pickled to ``folder``; the node state folders as they were before each training stage."""
    import numpy as np
    from flwr.app import Context, Message, RecordDict
    from typer.testing import CliRunner

    from hdp_planner.planfile.document import load_plan
    from hdp_planner.trust.registry import trust_class, trust_names
    from hdp_planner_cli.app import app as cli
    from hdp_planner_flower.app import DataSettings, model_arrays
    from hdp_planner_flower.local import InProcessGrid
    from hdp_planner_flower.node import client
    from hdp_planner_flower.node_state import client_terms, pinned_plan
    from hdp_planner_flower.pin import Pin, file_sha256
    from hdp_planner_flower.records import ENROLL
    from hdp_planner_flower.stages import stage_of
    from hdp_planner_flower.strategy import HdpStrategy
    from hdp_planner_train.learning.models import make_model
    from hdp_planner_train.rules.specs import plan_spec

    d = sum(p.numel() for p in make_model("digits").parameters())
    settings = DataSettings(dataset="digits", data_dir=None, clients=N, dirichlet=None, seed=0, local_steps=1,
                            batch_size=10, momentum=0.0, lr=0.1, lr_decay=1.0)  # fmt: skip
    files: dict[str, Path] = {}

    class Everyone:
        def random(self, size):
            return np.zeros(size)

    for trust in reversed(trust_names()):  # secure aggregation first
        secure = not trust_class(trust).sees_updates
        path = folder / f"plan-{trust}.json"
        args = ["solve", "--eps", "1,2,4", "--n", str(N), "--rounds", "5", "--q", "1.0", "--clip", "1.0",
                "--methods", "gdpfed+", "--trust", trust, "-o", str(path)]  # fmt: skip
        if secure:
            args[-2:-2] = ["--bits", "16", "--survivors", "0.75", "--model-dim", str(d)]
        res = CliRunner().invoke(cli, args)
        if res.exit_code != 0:
            raise SystemExit(res.output)
        state = folder / f"state-{trust}"
        sha = file_sha256(path)

        def node(msg: Message, context: Context, trust: str = trust, state: Path = state) -> Message:
            if context.node_config["client-id"] == 0:
                stage = stage_of(msg) or "trusted train"
                name = {"collect_masked_vectors": "masked vector (trains)", "trusted train": "trusted (trains)"}
                key = name.get(stage, stage)
                files[key] = folder / f"{trust}-{stage}.pickle"
                files[key].write_bytes(pickle.dumps((copy.deepcopy(msg), copy.deepcopy(context))))
                if key in name.values():  # the node's state as it was before this stage
                    shutil.copytree(state, folder / f"{trust}-{stage}.state", dirs_exist_ok=True)
            return client(msg, context)

        grid = InProcessGrid(node, N)
        for i, nid in enumerate(grid.node_ids):
            config = {"client-id": i, "plan": str(path), "plan-sha256": sha, "state-dir": str(state)}
            grid.contexts[nid] = Context(1, nid, config, RecordDict(), {})
        plan = load_plan(path)
        spec = plan_spec(plan, "gdpfed+")
        state.mkdir(mode=0o700)
        pin = Pin.from_node_config(grid.contexts[grid.node_ids[0]].node_config)
        if secure:
            pinned_plan(pin)
        client_terms(pin, client=0, secure=secure)  # node 0's derivations in its cache, as after round 1
        strategy = HdpStrategy(plan, spec, plan_sha256=sha, uniform=Everyone())
        strategy.start(grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=1,
                       train_config=settings.record())  # fmt: skip
        if secure:
            query = Message(RecordDict(), dst_node_id=grid.node_ids[0], message_type=ENROLL)
            files["enrolment query"] = folder / "enrol.pickle"
            files["enrolment query"].write_bytes(pickle.dumps((query, grid.contexts[grid.node_ids[0]])))
    files["flower bare"] = files["masked vector (trains)"]
    files[FIRST_SECURE], files[FIRST_TRUSTED] = files["masked vector (trains)"], files["trusted (trains)"]
    return files


FIRST_SECURE, FIRST_TRUSTED = "masked vector, first round (derives)", "trusted, first round (derives)"
STAGES = ("enrolment query", "setup", "share_keys", "masked vector (trains)", "unmask", "trusted (trains)",
          FIRST_SECURE, FIRST_TRUSTED)  # fmt: skip
CASES = ("python", "torch", "flower bare", *STAGES)
WARM_CASES = tuple(f"warm: {stage}" for stage in STAGES)


def warm_runs(files: dict[str, Path], folder: Path) -> dict[str, tuple[float, float]]:
    """(wall s, CPU s) of each stage's process forked from one warm process (the warm SuperExec's way)."""
    import json

    jobs = []
    for stage in STAGES:
        trains = "trains" in stage or "first round" in stage
        live = folder / ("state-secagg" if stage.startswith("masked") else "state-server")
        jobs.append([f"warm: {stage}", str(files[stage]), str(files[stage].with_suffix(".state")) if trains else "",
                     str(live)])  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", WARM, str(folder), json.dumps(jobs)], capture_output=True, text=True,
                          env=env, cwd=folder)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the warm process failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    return {case: (wall, cpu) for case, wall, cpu in rows}


def command(case: str, files: dict[str, Path], folder: Path, importtime: bool = False) -> list[str]:
    py = [sys.executable, *(["-X", "importtime"] if importtime else [])]
    if case == "python":
        return [*py, "-c", "pass"]
    if case == "torch":
        return [*py, "-c", "import torch"]
    ref = "bare_app:app" if case == "flower bare" else "hdp_planner_flower.node:client"
    return [*py, "-c", CHILD, ref, str(files[case]), str(folder)]


def run(case: str, files: dict[str, Path], folder: Path, importtime: bool = False) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one process of ``case``; a training stage gets a fresh copy of its node state (its
    derivations of the plan in it, except in a first round)."""
    if "trains" in case or "first round" in case:
        saved = files[case].with_suffix(".state")
        live = folder / ("state-secagg" if case.startswith("masked") else "state-server")
        shutil.rmtree(live, ignore_errors=True)
        shutil.copytree(saved, live)
        if "first round" in case:
            (live / "derived.sqlite").unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(command(case, files, folder, importtime), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, cwd=folder)  # fmt: skip
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{case} failed:\n{err[-3000:]}")
    return wall, usage.ru_utime + usage.ru_stime, err


def imports(stderr: str, top: int = 4) -> tuple[float, str]:
    """The total of ``-X importtime``'s top-level imports (s) and the heaviest top-level packages."""
    per: dict[str, int] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if not name.startswith("  "):  # a top-level import (nested ones are indented further)
            root = name.strip().split(".")[0]
            per[root] = per.get(root, 0) + int(cumulative)
    heavy = sorted(per.items(), key=lambda kv: -kv[1])[:top]
    return sum(per.values()) / 1e6, ", ".join(f"{k} {v / 1e6:.2f}" for k, v in heavy)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-node-start-") as tmp:
        folder = Path(tmp)
        os.environ["HDP_PLANNER_LEDGER"] = "none"
        (folder / "bare_app.py").write_text(BARE)
        files = capture(folder)
        times: dict[str, list[tuple[float, float]]] = {c: [] for c in CASES}
        loads = []
        for rep in range(args.repeats):
            loads.append(os.getloadavg()[0])
            print(f"round {rep + 1}/{args.repeats}, load average {loads[-1]:.1f}", flush=True)
            for case in CASES:
                times[case].append(run(case, files, folder)[:2])
            for case, measured in warm_runs(files, folder).items():
                times.setdefault(case, []).append(measured)
        profile = {c: imports(run(c, files, folder, importtime=True)[2]) for c in CASES}

    def med(case: str, i: int) -> float:
        return statistics.median(t[i] for t in times[case])

    torch_only = [med("torch", i) - med("python", i) for i in (0, 1)]
    rows = []
    for case in (*CASES, *WARM_CASES):
        walls, cpus = [t[0] for t in times[case]], [t[1] for t in times[case]]
        trains = "trains" in case or "first round" in case
        ref = [med("flower bare", i) + (torch_only[i] if trains else 0.0) for i in (0, 1)]
        over = "-" if case in ("python", "torch", "flower bare") or case in WARM_CASES else \
            f"{med(case, 0) - ref[0]:+.2f} / {med(case, 1) - ref[1]:+.2f}"  # fmt: skip
        total, heavy = profile.get(case, (0.0, "- (imported before the fork)"))
        rows.append([case, f"{statistics.median(walls):.2f}", f"{min(walls):.2f}", f"{statistics.median(cpus):.2f}",
                     f"{min(cpus):.2f}", over, f"{total:.2f}" if case not in WARM_CASES else "-", heavy])  # fmt: skip
        print(" | ".join(rows[-1]), flush=True)
    print(f"torch's own import (torch - python): wall {torch_only[0]:.2f} s, CPU {torch_only[1]:.2f} s; load "
          f"average {min(loads):.1f} to {max(loads):.1f}")  # fmt: skip
    if args.record:
        columns = ("process", "wall s median", "wall s min", "CPU s median", "CPU s min",
                   "over the goal's reference s (wall / CPU)", "imports s (-X importtime)",
                   "heaviest imports s")  # fmt: skip
        table = Table(caption=f"one ClientApp process per message, {args.repeats} interleaved runs each",
                      columns=columns, rows=tuple(map(tuple, rows)))  # fmt: skip
        notes = (
            "Each process imports what flwr-clientapp imports, loads the ClientApp with Flower's load_app and answers "
            "one message captured from a real in-process round (node 0 of 12, digits, GDPFed+), with the node's "
            "context: its SecAgg+ state and its node config pinning the plan.",
            "Reference of the goal: Flower's bare ClientApp for the stages that do not train; for the training stages "
            f"the bare ClientApp plus torch's own import (torch - python: {torch_only[0]:.2f} s wall, "
            f"{torch_only[1]:.2f} s CPU). Over: the stage's median minus that reference.",
            "warm: the same message answered in a process forked from one that imported every stage first (the warm "
            "SuperExec's way, hdp_planner_flower.executor): its wall time from the fork to its exit and its CPU time.",
            f"Load average (1 min) {min(loads):.1f} to {max(loads):.1f} over the runs: the machine is shared.",
        )
        result = Result(name="bench_node_start", title="A node's ClientApp process per stage", tables=(table,),
                        notes=notes)  # fmt: skip
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
