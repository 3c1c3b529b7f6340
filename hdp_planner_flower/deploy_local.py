"""``hdp-plan deploy local`` from Python: a :class:`DeployConfig`, refused before any file is written or process
started when it cannot run (:func:`check_config`), then run under each trust model in turn on one
:class:`~.deploy.LocalDeployment` (:func:`deploy_local`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hdp_planner_flower.deploy import LocalDeployment
from hdp_planner_flower.processes import alive

if TYPE_CHECKING:
    from hdp_planner_train.run.plan import RunPlan


@dataclass(frozen=True, kw_only=True)
class DeployConfig:
    """``hdp-plan deploy``: a plan on a SuperLink and one SuperNode per client, on this machine.

    Args:
        plan: The plan file.
        nodes: The SuperNodes, one per client: the plan's n.
        trust: The trust models to run in turn (``server``, ``secagg``; empty: the one the plan was solved for).
        method: The ``--method`` key to run.
        dataset: The dataset the nodes train on.
        rounds: Rounds to run (None: the plan's T).
        seed: The seed the ServerApp sends to the run.
        groups: A file assigning clients to the plan's groups (None: the plan's groups in client-id order).
        folder: Where the deployment keeps its files (None: a fresh temporary folder, removed after a run that
            succeeded).
        node_state: Where the nodes keep their state (None: with ``groups``, the user's data folder; without, the
            nodes are simulated clients of public data, whom no lifetime budget binds: the deployment's folder).
        out: Where each run's metrics go, as ``OUT/TRUST/metrics.json`` (None: the deployment's folder).
        ledger: The privacy ledger the runs charge ("": ``auto``, none for simulated clients of public data).
        overwrite: Replace the metrics of earlier runs in ``out`` (refused otherwise, before anything starts).
        timeout: Seconds a run may take.
        round_timeout: Seconds a round may take.
        warm: The nodes' ClientApp processes are forked from one warm process (:mod:`.executor`); False: each
            SuperNode's own SuperExec starts a new Python process per message (Flower's default).
    """

    plan: str
    nodes: int
    trust: tuple[str, ...] = ()  # () : the trust model the plan was solved for
    method: str = "gdpfed+"
    dataset: str = "digits"
    rounds: int | None = None
    seed: int = 0
    groups: str | None = None
    folder: str | None = None  # None: a fresh temporary folder, removed after a run that succeeded
    node_state: str | None = None  # None: the user's data folder with groups, else the deployment's folder
    out: str | None = None  # metrics of each run in OUT/TRUST/metrics.json (default: the deployment's folder)
    ledger: str = ""
    overwrite: bool = False
    timeout: float = 600.0
    round_timeout: float = 120.0
    warm: bool = True


def check_config(cfg: DeployConfig) -> None:
    """Refuse (ValueError, one line) a deployment that cannot run, before any file is written or process started."""
    from hdp_planner.trust.registry import trust_class, trust_name, trust_names
    from hdp_planner_train.run.plan import RunPlan

    if not Path(cfg.plan).is_file():
        raise ValueError(f"plan file {cfg.plan} not found")
    run_plan = RunPlan.read(cfg.plan)
    plan = run_plan.plan
    if cfg.nodes != plan.config.n:
        raise ValueError(f"--nodes {cfg.nodes}: the plan has n = {plan.config.n} clients, one SuperNode each")
    try:
        asked = [trust_class(t) for t in cfg.trust]
    except ValueError:
        raise ValueError(f"--trust takes {' and/or '.join(trust_names())} (comma-separated), got "
                         f"{','.join(cfg.trust)}") from None  # fmt: skip
    shown = [t for t, cls in zip(cfg.trust, asked) if cls.sees_updates]
    if shown and not run_plan.trust.sees_updates:
        raise ValueError(f"{cfg.plan} was solved for a server that is not trusted: --trust {shown[0]} would show "
                         f"the server every clipped update (solve a plan with --trust {shown[0]} for that "
                         "run)")  # fmt: skip
    if cfg.rounds is not None and not 1 <= cfg.rounds <= plan.config.rounds:
        raise ValueError(f"--rounds must be within 1..{plan.config.rounds} (the plan's T), got {cfg.rounds}")
    if cfg.groups and not Path(cfg.groups).is_file():
        raise ValueError(f"groups file {cfg.groups} not found")
    if cfg.out and not cfg.overwrite:
        for trust in cfg.trust or (trust_name(run_plan.trust),):
            if (Path(cfg.out) / trust / "metrics.json").is_file():
                raise ValueError(f"{Path(cfg.out) / trust} holds a finished run (metrics.json): choose another --out, "
                                 "or replace it with --overwrite")  # fmt: skip
    if cfg.timeout <= 0 or cfg.round_timeout <= 0:
        raise ValueError(f"--timeout and --round-timeout must be > 0 seconds, got {cfg.timeout}, {cfg.round_timeout}")
    if not all(cls.sees_updates for cls in asked) if asked else not run_plan.trust.sees_updates:
        check_secure_form(run_plan, cfg.method)


def check_secure_form(run_plan: RunPlan, method: str) -> None:
    """Refuse (ValueError, one line) a plan whose ``method`` has no secure form: derived and checked as every node
    will (:func:`~hdp_planner_train.rules.specs.plan_spec`), before any process starts."""
    from hdp_planner_train.rules.specs import METHOD_NAMES, plan_spec

    if method not in METHOD_NAMES:
        raise ValueError(f"--method {method}: not one of {', '.join(METHOD_NAMES)}")
    if run_plan.trust.sees_updates:
        raise ValueError(f"{run_plan.source} was solved for a trusted server: it has no secure form to run under "
                         "secagg (solve it with --trust secagg)")  # fmt: skip
    try:
        plan_spec(run_plan.plan, method)
    except ValueError as exc:
        raise ValueError(f"{run_plan.source}: {str(exc).splitlines()[0]}") from None


def deploy_local(cfg: DeployConfig, progress: Callable[[str], object] = print) -> dict[str, dict]:
    """Start a SuperLink and ``cfg.nodes`` SuperNodes on this machine (TLS, node authentication), run the plan under
    each trust model of ``cfg.trust`` in turn, and stop every process started.

    Args:
        cfg: The deployment.
        progress: Called with each progress line.

    Returns:
        Each run's metrics by trust model, with the deployment's timings under ``"deployment"``.

    Raises:
        ValueError: A deployment that cannot run (nothing written, no process started).
        DeployError: A process failed to start or a run failed.
    """
    import shutil
    import tempfile

    from hdp_planner.trust.registry import trust_name
    from hdp_planner_train.run.plan import RunPlan

    check_config(cfg)
    folder = Path(cfg.folder) if cfg.folder else Path(tempfile.mkdtemp(prefix="hdp-deploy-"))
    out = Path(cfg.out) if cfg.out else folder / "runs"
    results: dict[str, dict] = {}
    start = time.monotonic()
    state_dir = cfg.node_state or (None if cfg.groups else folder / "nodes")  # public data, simulated ids: no budget
    with LocalDeployment(folder, plan=cfg.plan, nodes=cfg.nodes, method=cfg.method, groups=cfg.groups,
                         state_dir=state_dir, warm=cfg.warm) as dep:  # fmt: skip
        linked = time.monotonic()
        progress(f"SuperLink on 127.0.0.1:{dep.port} (TLS, node authentication), PID {dep.procs['superlink'].pid}")
        dep.start_nodes()
        started = time.monotonic()
        progress(f"{cfg.nodes} SuperNodes registered and started ({started - linked:.1f} s); node state in "
                 f"{dep.state_dir}")  # fmt: skip
        for trust in cfg.trust or (trust_name(RunPlan.read(cfg.plan).trust),):
            t0 = time.monotonic()
            results[trust] = dep.run(trust=trust, out=out / trust, dataset=cfg.dataset, rounds=cfg.rounds,
                                     seed=cfg.seed, timeout=cfg.timeout, round_timeout=cfg.round_timeout,
                                     progress=progress, ledger=cfg.ledger)  # fmt: skip
            results[trust]["deployment_run_seconds"] = time.monotonic() - t0
    left = [pid for pid in dep.stopped if alive(pid)]
    results["deployment"] = {"superlink_seconds": linked - start, "nodes_seconds": started - linked,
                             "processes_stopped": len(dep.stopped), "processes_left": left,
                             "folder": str(folder)}  # fmt: skip
    if not cfg.folder:
        shutil.rmtree(folder, ignore_errors=True)
    return results
