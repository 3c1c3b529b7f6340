"""A plan on Flower's deployment engine, on this machine: one SuperLink and N SuperNodes as separate OS processes.

:class:`LocalDeployment` makes the run's credentials (:mod:`.credentials`: a CA, the SuperLink's TLS certificate, one
authentication key pair per SuperNode), starts ``flower-superlink`` with TLS and ``--enable-supernode-auth``, registers
every node's public key (``flwr supernode register``: only registered keys join), starts each ``flower-supernode`` once
with its node config (client id, the plan it pins and its SHA-256, its state folder), runs the plan with ``flwr run``
against that SuperLink (the ServerApp of :mod:`.deployed`, the ClientApp of :mod:`.node`) and, on leaving (also on
failure or Ctrl-C), stops every process it started, and their children, by PID (:mod:`.processes`). Flower 1.41 serves
the Fleet, Control and Runtime APIs on one HTTPS port; each SuperNode has a local Runtime port for its ClientApp
processes. Everything runs offline (:data:`~hdp_planner_flower.OFFLINE_ENV`, a ``FLWR_HOME`` in the deployment's
folder). :func:`~.deploy_local.deploy_local` runs a plan on one under each trust model in turn.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hdp_planner.io.files import write_text_atomic
from hdp_planner_flower import OFFLINE_ENV
from hdp_planner_flower.credentials import NodeKey, Tls, make_node_key, make_tls
from hdp_planner_flower.node_state import default_state_dir
from hdp_planner_flower.pin import file_sha256
from hdp_planner_flower.processes import descendants, free_ports, stop_processes
from hdp_planner_flower.run_log import last_error, stamped

CONNECTION = "hdp-deployment"
"""The name of the SuperLink connection in the deployment's ``FLWR_HOME/config.toml``."""

APP_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "hdp-deployment"
version = "1.0.0"
description = "A plan of hdp-planner on Flower's deployment engine"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "hdp-planner"

[tool.flwr.app.components]
serverapp = "hdp_planner_flower.deployed:server"
clientapp = "hdp_planner_flower.node:client"

[tool.flwr.app.config]
plan = ""
method = "gdpfed+"
dataset = "digits"
data-dir = ""
clients = 0
rounds = 0
seed = 0
trust = "server"
groups = ""
ledger = ""
out = ""
nodes = ""
round-timeout = 0
"""
"""The Flower app ``flwr run`` submits: no code of its own, its components are :mod:`.deployed`'s ServerApp and
:mod:`.node`'s ClientApp."""


LEAN_ENV = {"MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
"""Set for every process of a deployment: glibc's malloc keeps two arenas, not eight per core, and the math
libraries start one thread, not one per core: many nodes on one machine each run one small model at a time."""


REGISTER = """
import sys
from typer.testing import CliRunner
from flwr.cli.app import app
runner = CliRunner()
for key in sys.argv[2:]:
    res = runner.invoke(app, ["supernode", "register", key, sys.argv[1], "--format", "json"])
    if res.exit_code != 0:
        sys.exit(res.output.strip() or str(res.exception))
"""
"""``python -c REGISTER CONNECTION KEY...``: ``flwr supernode register KEY CONNECTION --format json`` for every key
in one process (flwr prints each reply, a JSON object, on stdout); the first failure ends it, non-zero."""


class DeployError(RuntimeError):
    """The deployment could not start or its run failed: one line (the logs are in the deployment's folder)."""


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """What one SuperNode is configured with, once: its client id, key pair, state folder and Runtime port."""

    client: int
    key: NodeKey
    state_dir: Path
    port: int


def node_config(spec: NodeSpec, plan: str, sha256: str, method: str, groups: str | None, registry: Path) -> str:
    """The ``--node-config`` string of a SuperNode: its client id, the plan it pins and the deployment's registry."""
    items = {"client-id": spec.client, "plan": plan, "plan-sha256": sha256, "method": method,
             "state-dir": str(spec.state_dir), **({"groups": groups} if groups else {}),
             "registry": str(registry)}  # fmt: skip
    return " ".join(f"{k}={json.dumps(v)}" for k, v in items.items())


class LocalDeployment:
    """A SuperLink and ``nodes`` SuperNodes on this machine, with TLS and node authentication, in ``folder``.

    Use as a context manager: entering makes the credentials and starts the SuperLink; :meth:`start_nodes` starts
    the SuperNodes; :meth:`run` runs the plan once per call; leaving stops every process started, by PID.

    Args:
        folder: Where the deployment keeps its credentials, logs and Flower home.
        plan: The plan file the nodes pin (by its SHA-256).
        nodes: The SuperNodes, one per client.
        method: The ``--method`` key the nodes run.
        groups: A file assigning clients to the plan's groups (None: the plan's order).
        state_dir: Where the nodes keep their state, one file per client (None: the user's data folder).
        wait: Seconds the SuperLink has to start listening.
        retries: A SuperNode gives up connecting after this many tries or seconds.
        warm: The nodes' ClientApp processes are forked from one warm process (:mod:`.executor`; the SuperNodes run
            with ``--isolation process``); False: each SuperNode starts its own SuperExec, which starts a new Python
            process per message (Flower's default).
        database: The SuperLink keeps its state (registered keys, runs, messages) in ``superlink.db``, so that it
            survives the SuperLink's restart (:meth:`restart_superlink`); False: in memory (Flower's default), which
            spares the SuperLink an SQLite transaction for every request of every node.
    """

    def __init__(self, folder: str | Path, *, plan: str, nodes: int, method: str = "gdpfed+", groups: str | None = None,
                 state_dir: str | Path | None = None, wait: float = 60.0, retries: tuple[int, float] = (5, 60.0),
                 warm: bool = True, database: bool = False) -> None:  # fmt: skip
        self.folder = Path(folder).resolve()
        self.plan = str(Path(plan).resolve())
        self.sha256 = file_sha256(self.plan)
        self.method, self.nodes = method, nodes
        self.groups = str(Path(groups).resolve()) if groups else None
        self.state_dir = Path(state_dir or default_state_dir()).resolve()  # one file per client: nodes may share it
        self.procs: dict[str, subprocess.Popen] = {}
        self.stopped: list[int] = []
        self.tls: Tls | None = None
        self.port = 0
        self.specs: list[NodeSpec] = []
        self.wait = wait  # seconds the SuperLink has to start listening
        self.retries = retries  # a SuperNode gives up connecting after this many tries or seconds
        self.warm = warm
        self.database = database

    # ------------------------------------------------------------------ processes
    def env(self) -> dict[str, str]:
        """The processes' environment: offline, a ``FLWR_HOME`` of the deployment's own, this checkout importable,
        and :data:`LEAN_ENV` unless the caller's environment sets those variables."""
        root = str(Path(__file__).resolve().parent.parent)
        path = os.environ.get("PYTHONPATH")
        return {**LEAN_ENV, **os.environ, **OFFLINE_ENV, "FLWR_HOME": str(self.folder / "flwr-home"),
                "PYTHONPATH": root + (os.pathsep + path if path else "")}  # fmt: skip

    def spawn(self, name: str, args: list[str], pipe: bool = False) -> subprocess.Popen:
        """Start ``args`` as process ``name``, its output in ``logs/NAME.log`` (``pipe``: to read, as text)."""
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(args, stdout=subprocess.PIPE if pipe else log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(), cwd=self.folder, text=pipe)  # fmt: skip
        self.procs[name] = proc
        return proc

    def flwr(self, *args: str, timeout: float = 120.0) -> str:
        """``flwr ARGS`` against the deployment's SuperLink connection; its output, or :class:`DeployError`."""
        try:
            done = subprocess.run(["flwr", *args], capture_output=True, text=True, env=self.env(), cwd=self.folder,
                                  timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise DeployError(f"flwr {args[0]} did not finish in {timeout:.0f} s") from None
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()
            raise DeployError(f"flwr {' '.join(args[:2])} failed: {tail[-1] if tail else done.returncode}")
        return done.stdout

    def pids(self) -> list[int]:
        """Every process the deployment started and their live descendants."""
        own = [p.pid for p in self.procs.values()]
        return own + [d for pid in own for d in descendants(pid)]

    def close(self) -> None:
        """Stop every process started (and its children), by PID; the SuperNodes before the SuperLink."""
        nodes = [p for name, p in self.procs.items() if name != "superlink"]
        for group in (nodes, [p for name, p in self.procs.items() if name == "superlink"]):
            pids = [p.pid for p in group] + [d for p in group for d in descendants(p.pid)]
            self.stopped += stop_processes(pids)
            for p in group:
                p.wait()
        self.procs.clear()

    def __enter__(self) -> LocalDeployment:
        try:
            self.prepare()
            self.start_superlink()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ set-up
    def prepare(self) -> None:
        """Credentials, node key pairs, state folders, the app folder and the ``flwr`` connection."""
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.tls = make_tls(self.folder / "certs")
        ports = free_ports(self.nodes + 1)
        self.port = ports[0]
        self.specs = [NodeSpec(client=i, key=make_node_key(self.folder / "keys", f"node-{i}"), state_dir=self.state_dir,
                               port=ports[i + 1])
                      for i in range(self.nodes)]  # fmt: skip
        app = self.folder / "app"
        app.mkdir(exist_ok=True)
        (app / "pyproject.toml").write_text(APP_TOML)
        home = self.folder / "flwr-home"
        home.mkdir(mode=0o700, exist_ok=True)
        (home / "config.toml").write_text(f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
                                          f'address = "127.0.0.1:{self.port}"\n'
                                          f'root-certificates = "{self.tls.ca}"\n')  # fmt: skip

    def start_superlink(self) -> None:
        """``flower-superlink`` with TLS and node authentication, its state in memory or (``database``) in
        ``superlink.db``, waiting for SQLite's lock rather than failing (:mod:`.superlink`); waits until it accepts
        connections."""
        tls = self.tls
        state = ["--database", str(self.folder / "superlink.db")] if self.database else []
        self.spawn("superlink", [sys.executable, "-m", "hdp_planner_flower.superlink", "--ssl-ca-certfile",
                                 str(tls.ca), "--ssl-certfile", str(tls.certificate), "--ssl-keyfile", str(tls.key),
                                 "--enable-supernode-auth", "--disable-runtime-dependency-installation", "--host",
                                 "127.0.0.1", "--port", str(self.port), *state])  # fmt: skip
        deadline = time.monotonic() + self.wait
        while True:
            if self.procs["superlink"].poll() is not None:
                raise DeployError(f"the SuperLink exited at start (see {self.folder / 'logs' / 'superlink.log'})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise DeployError(f"the SuperLink did not listen on port {self.port} within {self.wait:.0f} s"
                                      ) from None  # fmt: skip
                time.sleep(0.2)

    def restart_superlink(self) -> None:
        """Kill the SuperLink and its children (SIGKILL, by PID) and start it again on the same port and database
        (the registered keys are kept there); only with ``database``: a SuperLink in memory would forget them."""
        if not self.database:
            raise DeployError("a SuperLink without a database forgets its registered keys when it restarts")
        proc = self.procs.pop("superlink")
        self.stopped += stop_processes([proc.pid, *descendants(proc.pid)], grace=0.0)
        proc.wait()
        self.start_superlink()

    def register(self, key: NodeKey) -> int:
        """Register a node's public key on the SuperLink; its node id."""
        out = self.flwr("supernode", "register", str(key.public), CONNECTION, "--format", "json")
        return int(json.loads(out)["node-id"])

    def start_node(self, spec: NodeSpec, key: NodeKey | None = None, ca: Path | None = None) -> subprocess.Popen:
        """``flower-supernode`` for ``spec`` (``key``, ``ca``: another key or CA certificate than its own)."""
        config = node_config(spec, self.plan, self.sha256, self.method, self.groups, self.folder / "nodes.csv")
        return self.spawn(f"node-{spec.client}", [
            "flower-supernode", "--superlink", f"127.0.0.1:{self.port}", "--root-certificates", str(ca or self.tls.ca),
            "--auth-supernode-private-key", str((key or spec.key).private), "--node-config", config,
            "--host", "127.0.0.1", "--port", str(spec.port), "--max-retries", str(self.retries[0]),
            "--max-wait-time", str(self.retries[1]), *(["--isolation", "process"] if self.warm else []),
        ])  # fmt: skip

    def start_executor(self) -> subprocess.Popen:
        """The warm SuperExec of every node (:mod:`.executor`), watching this process."""
        addresses = [f"127.0.0.1:{spec.port}" for spec in self.specs]
        return self.spawn("executor", [sys.executable, "-m", "hdp_planner_flower.executor", "--runtime-api-address",
                                       *addresses, "--parent-pid", str(os.getpid())])  # fmt: skip

    def online(self) -> int:
        """How many nodes the SuperLink counts online (``flwr supernode ls``)."""
        reply = json.loads(self.flwr("supernode", "ls", CONNECTION, "--format", "json"))
        if "nodes" not in reply:  # e.g. the SuperLink answered with an error under load
            raise DeployError(f"flwr supernode ls: {reply.get('error-message', reply)}")
        return sum(node["status"] == "online" for node in reply["nodes"])

    def register_all(self, timeout: float = 600.0) -> dict[int, int]:
        """Register every node's key and write the registry (``nodes.csv``: node id, client id); node id → client id.
        One process runs ``flwr supernode register`` for every key (:data:`REGISTER`): one Python start, not one
        per node."""
        keys = [str(spec.key.public) for spec in self.specs]
        try:
            done = subprocess.run([sys.executable, "-c", REGISTER, CONNECTION, *keys], capture_output=True, text=True,
                                  env=self.env(), cwd=self.folder, timeout=timeout)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise DeployError(f"registering {len(keys)} keys did not finish in {timeout:.0f} s") from None
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()
            raise DeployError(f"flwr supernode register failed: {tail[-1] if tail else done.returncode}")
        decoder, text, replies = json.JSONDecoder(), done.stdout.strip(), []
        while text:
            reply, end = decoder.raw_decode(text)
            replies.append(reply)
            text = text[end:].strip()
        ids = [int(r["node-id"]) for r in replies]
        if len(ids) != len(keys):
            raise DeployError(f"flwr supernode register gave {len(ids)} node ids for {len(keys)} keys")
        registry = dict(zip(ids, (spec.client for spec in self.specs), strict=True))
        lines = ["node_id,client_id", *(f"{node},{client}" for node, client in registry.items())]
        write_text_atomic(self.folder / "nodes.csv", "\n".join(lines) + "\n", private=True)  # it names the clients
        return registry

    def start_nodes(self) -> dict[int, int]:
        """:meth:`register_all`, then start every SuperNode (and, ``warm``, their SuperExec).

        Returns:
            Node id → client id of every registered node.
        """
        registry = self.register_all()
        for spec in self.specs:
            self.start_node(spec)
        if self.warm:
            self.start_executor()
        return registry

    # ------------------------------------------------------------------ runs
    def run(self, *, trust: str, out: str | Path, dataset: str = "digits", rounds: int | None = None,
            seed: int = 0, timeout: float = 600.0, round_timeout: float = 120.0,
            progress: Callable[[str], object] = print,
            name: str | None = None, ledger: str = "") -> dict:  # fmt: skip
        """Run the plan once with ``flwr run`` against the deployment's SuperLink.

        Args:
            trust: The trust model: ``server`` or ``secagg``.
            out: Where the run writes ``metrics.json``.
            dataset: The dataset the nodes train on.
            rounds: Rounds to run (None: the plan's T).
            seed: The seed the ServerApp sends to the run.
            timeout: Seconds the run may take.
            round_timeout: Seconds into a round after which a node that has not replied is a dropout.
            progress: Called with the ServerApp's lines, with the seconds since the run started.
            name: The run's process and log name (None: ``run-TRUST``; runs at once need names of their own).
            ledger: The privacy ledger the ServerApp charges ("": ``auto``, the run layer's rule: none for simulated
                clients of public data without ``groups``).

        Returns:
            The run's metrics (``out/metrics.json``).
        """
        out = Path(out).resolve()
        config = {"plan": self.plan, "method": self.method, "dataset": dataset, "clients": self.nodes,
                  "rounds": rounds or 0, "seed": seed, "trust": trust, "groups": self.groups or "",
                  "ledger": ledger, "out": str(out), "nodes": str(self.folder / "nodes.csv"),
                  "round-timeout": round_timeout}  # fmt: skip
        text = " ".join(f"{k}={json.dumps(v)}" for k, v in config.items())
        name = name or f"run-{trust}"
        log = self.folder / "logs" / f"{name}.log"
        start = time.monotonic()
        proc = self.spawn(name, ["flwr", "run", str(self.folder / "app"), CONNECTION, "--stream",
                                           "--run-config", text], pipe=True)  # fmt: skip
        timer = threading.Timer(timeout, lambda: stop_processes([proc.pid, *descendants(proc.pid)], grace=5.0))
        timer.start()
        try:
            with open(log, "a", buffering=1) as fh:  # line by line: a run in progress can be followed
                for line in proc.stdout:
                    fh.write(stamped(time.monotonic() - start, line))
                    if line.startswith(SERVER_LINES):
                        progress(f"[{time.monotonic() - start:6.1f} s] {line.rstrip()}")
            proc.wait()
        finally:
            timer.cancel()
            self.procs.pop(name, None)
            stop_processes([proc.pid, *descendants(proc.pid)], grace=5.0)
            proc.wait()
        metrics = out / "metrics.json"
        if not metrics.is_file():
            if time.monotonic() - start >= timeout:
                raise DeployError(f"the {trust} run did not finish in {timeout:.0f} s (see {log})")
            raise DeployError(f"the {trust} run wrote no metrics: {last_error(log)} (see {log})")
        return json.loads(metrics.read_text())


SERVER_LINES = ("Flower ", "round ", "accuracy ")
"""The ServerApp's own lines in ``flwr run --stream``'s output (:func:`~.simulation.serve`'s progress)."""
