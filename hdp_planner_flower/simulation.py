"""``hdp-plan flower``: a plan's method trained through Flower's simulation engine (Ray), one virtual node per client.

Validation is the run layer's (:mod:`hdp_planner_train.run.plan`: plan verified, data partition of the plan's n,
method in the plan, trust model); metrics are the trainer's (``base_metrics``, ``metrics.json``/``.csv``) plus
``"runtime": "flower"``, the flwr version and the trust model.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hdp_planner.methods.registry import REGISTRY
from hdp_planner_flower import offline_environment
from hdp_planner_flower.preparation import FlowerConfig, Prepared, prepare
from hdp_planner_train.run.options import (
    DataOptions,
    LedgerOptions,
    OutputOptions,
    TrustOptions,
)

FLOWER_METHODS = tuple(key for key, m in REGISTRY.items() if m.flower)
"""The plan's client-level methods (rows of ``plan.json``) that run on Flower (the method registry)."""

TRUSTED_NOTE = (
    "trusted server: clients send clipped updates, the server adds each group's full noise N(0, C²σ²); the server "
    "sees every sampled client's clipped update"
)
SECAGG_NOTE = (
    "Flower's SecAgg+ per group: clients send masked integer shares of distributed discrete Gaussian noise; the "
    "server sees masked vectors, each group's decoded noisy sum, and who was sampled and replied"
)


def trust_note(spec) -> str:
    """What the run's trust model shows the server, on Flower."""
    return TRUSTED_NOTE if spec.secagg is None else SECAGG_NOTE


def open_account(p: Prepared):
    """The run's account in the privacy ledger (None without one), opened before any node starts: refused before
    round 1 if a client would exceed its budget."""
    from hdp_planner_train.run.ledger import NO_LEDGER_HINT, ledger_run

    return ledger_run(p.train, p.bound, start=0, clients=p.clients, secure=True, refusal_hint=NO_LEDGER_HINT)


def serve(p: Prepared, grid, account, progress=print):
    """The ServerApp's work: :class:`HdpStrategy` over ``grid`` for the run's rounds, charging ``account``
    (:func:`open_account`), a progress line per round, central evaluation; returns the strategy (its ``log`` holds
    the run)."""
    from hdp_planner_flower.app import central_evaluation, model_arrays
    from hdp_planner_flower.membership import read_node_clients
    from hdp_planner_flower.strategy import HdpStrategy
    from hdp_planner_train.run.progress import round_description

    def on_round(rnd: int, entry, stats, seconds: float) -> None:
        line = round_description(
            p.bound.plan, p.bound.spec, done=rnd, rounds=p.bound.rounds, acc=entry["accuracy"], loss=entry["loss"]
        )
        if p.cfg.diagnostics:  # who joined and how long it took reveal participation: simulation only
            line += f" joined {'/'.join(str(j) for j in stats.joined)} ({seconds:.2f} s)"
            line += "".join(f"; group {w.group + 1} withheld: {w.reason}" for w in stats.withheld)
        progress(line)

    progress(f"Flower {p.version}: {p.bound.spec.method} on {p.cfg.data.dataset}, {p.bound.data.n_clients} nodes, "
             f"trust {p.cfg.trust.kind} ({trust_note(p.bound.spec)})")  # fmt: skip
    auditor = None
    if p.cfg.audit.enabled:
        from hdp_planner_train.audit.canaries import CanaryAuditor

        auditor = CanaryAuditor(
            p.bound.spec, spec_dim(p.bound.data, p.cfg.data.dataset), p.cfg.seed, p.cfg.audit.canaries
        )
    strategy = HdpStrategy(
        p.bound.plan, p.bound.spec, group_of_client=p.groups, on_round=on_round,
        diagnostics=p.cfg.diagnostics, auditor=auditor, account=account, plan_sha256=p.bound.run_plan.sha256,
        masks=p.cfg.masks,
        node_clients=read_node_clients(p.cfg.nodes) if p.cfg.nodes else None, sparse_graph=p.cfg.trust.sparse_graph,
    )  # fmt: skip
    strategy.start(
        grid,
        model_arrays(p.cfg.data.dataset, num_classes=p.bound.data.num_classes, seed=p.cfg.seed),
        num_rounds=p.bound.rounds,
        train_config=p.settings.record(),
        evaluate_fn=central_evaluation(p.cfg.data.dataset, p.bound.data),
        timeout=p.cfg.round_timeout,
    )
    return strategy


def finish(p: Prepared, strategy) -> dict[str, Any]:
    """The trainer's metrics of the run (``base_metrics``) plus the runtime's; written to ``--out`` if given."""
    from hdp_planner_train.learning.models import model_name
    from hdp_planner_train.run.ledger import ledger_target
    from hdp_planner_train.run.metrics import base_metrics
    from hdp_planner_train.run.output import write_metrics

    log, spec = strategy.log, p.bound.spec
    metrics = base_metrics(p.train, p.bound, rounds=log.next_round, d=spec_dim(p.bound.data, p.cfg.data.dataset),
                           log=log, model=model_name(p.cfg.data.dataset), account=strategy.account)  # fmt: skip
    for key in ("noise_lambda_measured", "noise_lambda_applied"):  # secagg: the server never sees the noise
        if isinstance(metrics.get(key), float) and math.isnan(metrics[key]):
            metrics[key] = None
    metrics.update(
        {
            "runtime": "flower",
            "flower_engine": "in-process" if p.cfg.in_process else "simulation (Ray)",
            "flwr_version": p.version,
            "trust": p.cfg.trust.kind,
            "trust_note": trust_note(spec),
            "noise_source": "secure",
            "noise_note": "SecureNoise and SecureRandom (the OS CSPRNG): no seed is written",
            "ledger": ledger_target(p.train, secure=True)[1],
            "stopped": strategy.stopped,
            **({"secagg": flower_secagg_metrics(p, log.next_round)} if spec.secagg is not None else {}),
            "clip": spec.clip,
            "groups": {"sizes": list(spec.sizes), "q": list(spec.q), "weight": list(spec.weight)},
        }
    )
    if strategy.auditor is not None:  # the trainer's audit section, from the canaries the strategy inserted
        planned = [e["epsilon_spent"] for e in metrics["epsilon_spent"]]
        metrics["audit"] = strategy.auditor.report(planned, p.bound.plan.config.delta)
    if p.cfg.output.out:
        Path(p.cfg.output.out).mkdir(parents=True, exist_ok=True)
        write_metrics(metrics, Path(p.cfg.output.out), False)
    return metrics


def run_flower(cfg: FlowerConfig, progress: Callable[[str], object] = print) -> dict[str, Any]:
    """Run ``cfg`` on Flower's simulation engine (``run_simulation``, one virtual node per client).

    The run's ledger account is opened here, before any node starts, and closed here however the run ends: on
    KeyboardInterrupt the rounds never released are given back and the run finished, then Ray is shut down and the
    temporary Flower home removed before the interrupt propagates (Flower's ServerApp thread may still be waiting for
    replies: a command line ends the process, see ``hdp-plan flower``; a release it tries after that is refused by the
    ledger).

    Args:
        cfg: The run.
        progress: Called with one line per round.

    Returns:
        The run's metrics (what metrics.json holds).

    Raises:
        ValueError: Anything the user can fix, with a one-line message.
    """
    with offline_environment():
        return _run_flower(cfg, progress)


def _run_flower(cfg: FlowerConfig, progress) -> dict[str, Any]:
    from hdp_planner_train.run.output import check_finished, output_folder

    check_finished(cfg.output)  # a finished run in --out: refused before anything slow
    p = prepare(cfg)
    with output_folder(cfg.output.out):  # checked before any node starts or the ledger is charged
        account = open_account(p)
        try:
            return _serve_flower(cfg, p, account, progress)
        finally:
            if account is not None:
                account.finish()


def _serve_flower(cfg: FlowerConfig, p: Prepared, account, progress) -> dict[str, Any]:
    from flwr.serverapp import ServerApp

    from hdp_planner_flower.app import client_app

    holder: dict[str, Any] = {}
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        try:
            holder["strategy"] = serve(p, grid, account, progress)
        except Exception as exc:  # reported by the caller as one line
            holder["error"] = exc

    with node_state(cfg) as state_dir:
        pin = None
        if p.bound.spec.secagg is not None:
            from hdp_planner_flower.pin import Pin

            pin = Pin(plan=str(Path(cfg.plan).resolve()), sha256=p.bound.run_plan.sha256, method=cfg.method,
                      groups=str(Path(cfg.ledger.groups).resolve()) if cfg.ledger.groups else None, state_dir=state_dir,
                      sparse_graph=cfg.trust.sparse_graph)  # fmt: skip
        if cfg.in_process:
            from hdp_planner_flower.local import InProcessGrid

            logging.getLogger("flwr").setLevel(logging.ERROR)
            grid = InProcessGrid(client_app(pin=pin, masks=cfg.masks), p.bound.data.n_clients)
            return finish(p, serve(p, grid, account, progress))
        _simulate(app, client_app(pin=pin, masks=cfg.masks), p.bound.data.n_clients, cfg.cpus_per_client)
    if "error" in holder:
        exc = holder["error"]
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if "strategy" not in holder:
        raise RuntimeError("the Flower simulation ended without running the strategy")
    return finish(p, holder["strategy"])


def run_config_server_app():
    """A ServerApp for ``flwr run``: the run's settings come from ``[tool.flwr.app.config]`` (plan, method, dataset,
    rounds, seed, trust, groups, ledger, out, data-dir, clients, nodes, round-timeout; 0 or "" for the defaults)."""
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        logging.getLogger("flwr").setLevel(logging.INFO)  # SecAgg+'s per-stage DEBUG lines: not for users
        rc = context.run_config
        text = {k: str(rc.get(k, "")) or None for k in ("data-dir", "groups", "ledger", "out", "nodes")}
        data = DataOptions(dataset=str(rc.get("dataset", "fmnist")), data_dir=text["data-dir"],
                           clients=int(rc.get("clients", 0)) or None)  # fmt: skip
        cfg = FlowerConfig(plan=str(rc["plan"]), method=str(rc.get("method", "gdpfed+")), data=data,
                           rounds=int(rc.get("rounds", 0)) or None, seed=int(rc.get("seed", 0)),
                           trust=TrustOptions(kind=str(rc.get("trust", "")) or None),  # type: ignore[arg-type]
                           ledger=LedgerOptions(url=text["ledger"] or "auto", federation="flower",
                                                groups=text["groups"]),
                           output=OutputOptions(out=text["out"]), nodes=text["nodes"],
                           round_timeout=float(rc.get("round-timeout", 0)) or 3600.0)  # fmt: skip
        from hdp_planner_flower.polling import Polling
        from hdp_planner_train.run.output import output_folder

        p = prepare(cfg)
        with output_folder(cfg.output.out):  # checked before round 1 and before the ledger is charged
            account = open_account(p)
            try:
                metrics = finish(p, serve(p, Polling(grid), account))  # replies asked for every 0.2 s, not 3 s
            finally:
                if account is not None:
                    account.finish()
        print(f"accuracy {metrics['final_accuracy']:.2f}% after {metrics['rounds']} rounds"
              + (f"; metrics written to {cfg.output.out}/metrics.json" if cfg.output.out else ""))  # fmt: skip

    return app


@contextmanager
def node_state(cfg: FlowerConfig) -> Iterator[str]:
    """The simulated nodes' state folder (:mod:`.node_state`): ``cfg.node_state``; for a simulation of public data
    (``public_simulation``: no one's lifetime budget to keep) a temporary folder, removed after the run; else the
    user's data folder, so that the counts and spent budgets outlive the run."""
    from hdp_planner_flower.node_state import default_state_dir
    from hdp_planner_train.run.ledger import public_simulation

    if cfg.node_state:
        yield cfg.node_state
    elif public_simulation(cfg):
        with tempfile.TemporaryDirectory(prefix="hdp-nodes-") as folder:
            yield folder
    else:
        yield str(default_state_dir())


def flower_secagg_metrics(p: Prepared, rounds: int) -> dict[str, Any]:
    """The trainer's block of the run's trust model (:func:`~hdp_planner_train.run.metrics.trust_metrics`, without
    the simulated dropout) and each group's cap on the rounds a client takes part in, which each pinned client
    enforces: under secure aggregation K, with ε against the server at it (the block's is every round's); with
    hidden participation its cohort memberships K_m."""
    from hdp_planner_train.rules.specs import METHOD_NAMES
    from hdp_planner_train.run.metrics import trust_metrics

    plan, spec = p.bound.plan, p.bound.spec
    block = {k: v for k, v in trust_metrics(plan, spec, rounds, None).items() if k != "dropout_simulated"}
    row, groups = plan.method(METHOD_NAMES[spec.method]), range(len(spec.sizes))
    caps = [min(spec.trust.cap(row, plan.config, m), rounds) for m in groups]
    if spec.secagg is not None and spec.secagg.cohorts is not None:  # the cohort block's ε at min(rounds, K_m)
        block["participation_cap"] = caps
    else:
        block["participation_cap"] = caps[0]
        block["epsilon_server"] = [spec.trust.epsilon_server(row, plan.config, group=m, participations=caps[0])
                                   for m in groups]  # type: ignore[attr-defined]  # fmt: skip
    graph = "sparse neighbour graph (honest-but-curious server)" if p.cfg.trust.sparse_graph else "full neighbour graph"
    block["masks"] = (
        f"Flower SecAgg+, {graph}, masks expanded with ChaCha20"
        if p.cfg.masks
        else "none: the messages summed in the clear (a simulation; the sums equal SecAgg+'s bit for bit)"
    )
    return block


def spec_dim(data, dataset: str) -> int:
    from hdp_planner_train.learning.models import make_model

    return int(sum(p.numel() for p in make_model(dataset, data.num_classes).parameters()))


def stop_ray() -> None:
    """Shut Ray's local cluster down (its workers and raylet), if this process started one."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def start_ray() -> None:
    """Start Ray's local cluster as Flower's backend would (its workers import what this process imports), quiet
    (errors only, no dashboard, workers' output kept out of the terminal)."""
    import ray

    path = os.pathsep.join([*sys.path, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ["PYTHONPATH"] = path
    try:
        ray.init(runtime_env={"env_vars": {"PYTHONPATH": path}}, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False)  # fmt: skip
    except SystemExit as exc:  # SIGTERM while Ray starts: its own handler exits; an interrupt like any other
        if exc.code == signal.SIGTERM:
            raise KeyboardInterrupt from None
        raise


@contextmanager
def quiet_stop(log: logging.Logger) -> Iterator[None]:
    """Ctrl-C and SIGTERM (taken back from Ray, which installs its own) raise KeyboardInterrupt after silencing
    ``log``: Flower's threads would report every actor that the shutdown ends, a traceback each. The previous
    handlers are back afterwards (nothing changes off the main thread)."""
    import threading

    from hdp_planner_train.run.interrupts import STOPS

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame) -> None:
        log.disabled = True
        raise KeyboardInterrupt

    previous = {sig: signal.getsignal(sig) for sig in STOPS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _simulate(app, client, nodes: int, cpus_per_client: float) -> None:
    """Flower's simulation engine, quiet: Ray and Flower log errors only. However it ends, Ray is shut down and every
    process it started is stopped (this process is their subreaper meanwhile, so that actors orphaned by their raylet
    are found too); stopped by Ctrl-C or SIGTERM, Flower's threads, whose peers are gone, log nothing more."""
    from flwr.simulation import run_simulation

    from hdp_planner_flower.processes import descendants, stop_processes, subreaper
    from hdp_planner_train.run.interrupts import HeldInterrupt

    flwr_log = logging.getLogger("flwr")
    flwr_log.setLevel(logging.ERROR)  # run_simulation's deprecation notice; client errors stay
    flwr_log.disabled = False
    before = set(descendants(os.getpid()))
    reaping = subreaper(True)
    try:
        with quiet_stop(flwr_log):
            start_ray()
            backend = {"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}}
            with quiet_stop(flwr_log):  # Ray's init installed its own SIGTERM handler: ours again
                run_simulation(server_app=app, client_app=client, num_supernodes=nodes, backend_config=backend)
    finally:
        with HeldInterrupt() as held:  # a second Ctrl-C does not cut the clean-up short
            held.hold()
            stop_ray()
            stop_processes([pid for pid in descendants(os.getpid()) if pid not in before], grace=5.0)
            if reaping:
                subreaper(False)
