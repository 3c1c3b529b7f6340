"""A Flower run's configuration (:class:`FlowerConfig`) and its preparation before any node starts: the plan read once
and checked by the run layer (:mod:`hdp_planner_train.run.plan`), the data partition of the plan's n, the groups and
the clients the ledger charges (:func:`prepare`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from hdp_planner.methods.registry import REGISTRY
from hdp_planner_flower import offline_env, require_flwr
from hdp_planner_train.run.options import DataOptions, LedgerOptions, ModelOptions, OutputOptions, RunConfig

if TYPE_CHECKING:
    import numpy as np

    from hdp_planner_flower.app import DataSettings
    from hdp_planner_train.run.bound import BoundRun
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.run.settings import RunSettings


@dataclass(frozen=True, kw_only=True)
class FlowerConfig(RunConfig):
    """A Flower run (``hdp-plan flower``) on the simulation engine. Flower's noise is always secure. Besides
    :class:`~hdp_planner_train.run.options.RunConfig`'s fields (method, rounds, seed, data: digits by default, trust,
    audit: under a trusted server, ledger: federation ``flower`` by default, output: ``out`` and ``overwrite``):

    Args:
        plan: The plan file.
        cpus_per_client: Ray CPUs per virtual node.
        diagnostics: Per-round joined counts, measured noise and round times (a simulation's).
        node_state: The simulated nodes' state folder under secagg (None: a temporary folder for a simulation of
            public data, else the user's data folder).
        in_process: Every node in this process, one after another (no Ray: InProcessGrid).
        masks: False sums secagg's messages in the clear (simulations of long runs, with ``diagnostics``).
        nodes: A deployment's registry (CSV node_id,client_id: no enrolment round).
        round_timeout: Seconds the server waits for a round's replies (a dead node is a dropout after).
    """

    plan: str
    data: DataOptions = field(default_factory=lambda: DataOptions(dataset="digits"))
    ledger: LedgerOptions = field(default_factory=lambda: LedgerOptions(federation="flower"))
    cpus_per_client: float = 1.0
    diagnostics: bool = False
    node_state: str | None = None
    in_process: bool = False
    masks: bool = True
    nodes: str | None = None
    round_timeout: float = 3600.0


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A checked run: everything the server needs, built before any node starts or any file is written.

    Args:
        cfg: The run's configuration, its trust kind resolved (the plan's unless asked).
        train: The trainer's configuration of the same run (validation and metrics are the run layer's).
        bound: The plan read once and bound, with the data, the method's groups, the rounds, batch and momentum.
        groups: Each client id's group in the method's spec, from ``--groups`` (None: the simulated assignment).
        settings: What each node trains with.
        version: Flower's version.
        clients: (group, lifetime budget) by client id, the ledger's charge.
    """

    cfg: FlowerConfig
    train: RunSettings
    bound: BoundRun
    groups: np.ndarray | None
    settings: DataSettings
    version: str
    clients: tuple[dict[str, int], dict[str, float]]


def prepare(cfg: FlowerConfig) -> Prepared:
    """Validate ``cfg`` (ValueError with a one-line message for anything the user can fix) and load its data."""
    from hdp_planner.trust.registry import trust_class, trust_name

    version = require_flwr()
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.run.settings import RunSettings

    run_plan = RunPlan.read(cfg.plan)  # the one read of the plan file
    cfg = replace(cfg, trust=replace(cfg.trust, kind=cfg.trust.kind or trust_name(run_plan.trust)))  # the plan's
    if cfg.method not in REGISTRY or not REGISTRY[cfg.method].flower:
        names = ", ".join(key for key, m in REGISTRY.items() if m.flower)
        raise ValueError(f"--method must be one of {names} on Flower, got {cfg.method!r}")
    try:
        secure = not trust_class(cfg.trust.kind).sees_updates  # the clients add the noise under secure aggregation
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if cfg.output != OutputOptions(out=cfg.output.out, overwrite=cfg.output.overwrite):
        raise ValueError("a Flower run writes its metrics to --out (--overwrite replaces them): no other output option")
    if cfg.cpus_per_client <= 0:
        raise ValueError(f"--cpus-per-client must be > 0, got {cfg.cpus_per_client}")
    if not cfg.masks and (not secure or not cfg.diagnostics):
        raise ValueError("--no-masks is for simulations of --trust secagg only: it needs --diagnostics")
    if cfg.trust.sparse_graph and (not secure or not cfg.masks):
        raise ValueError("--sparse-graph is a SecAgg+ neighbour graph: it needs --trust secagg and the masks")
    offline_env()
    from hdp_planner.ledger.runs import plan_clients
    from hdp_planner_flower.app import DataSettings
    from hdp_planner_flower.membership import groups_from_file
    from hdp_planner_train.rules.specs import METHOD_NAMES

    tc = RunSettings(method=cfg.method, rounds=cfg.rounds, seed=cfg.seed, data=cfg.data,
                      model=ModelOptions(engine="loop"), trust=cfg.trust, audit=cfg.audit, ledger=cfg.ledger,
                      output=cfg.output)  # fmt: skip
    if cfg.audit.enabled and secure:
        raise ValueError("--audit needs --trust server: the server inserts the canaries and adds their noise")
    bound = validate(tc, run_plan)
    plan, spec = run_plan.plan, bound.spec
    clients = plan_clients(plan, plan.method(METHOD_NAMES[spec.method]), cfg.ledger.groups)  # refuses a default mapping
    groups_file = cfg.ledger.groups
    groups = groups_from_file(groups_file, spec, plan.groups.epsilon, plan.budgets_sha256) if groups_file else None
    settings = DataSettings(dataset=cfg.data.dataset, data_dir=cfg.data.data_dir, clients=cfg.data.clients,
                            dirichlet=cfg.data.dirichlet, seed=cfg.seed, local_steps=plan.config.local_steps,
                            batch_size=bound.batch, momentum=bound.momentum, lr=plan.config.lr,
                            lr_decay=tc.model.lr_decay)  # fmt: skip
    return Prepared(cfg=cfg, train=tc, bound=bound, groups=groups, settings=settings, version=version,
                    clients=clients)  # fmt: skip


def validate(tc: RunSettings, run_plan: RunPlan) -> BoundRun:
    """The checks of the run layer (:mod:`hdp_planner_train.run.plan`) on the trainer's configuration ``tc`` of the
    run under ``run_plan``, and its data; returns the run bound to them (on the CPU: Flower's nodes train there)."""
    import torch

    from hdp_planner_train.learning.datasets import DEFAULTS
    from hdp_planner_train.learning.federated import load_federated
    from hdp_planner_train.run.bound import BoundRun
    from hdp_planner_train.run.plan import run_spec

    d = tc.data
    if d.dataset not in DEFAULTS:
        raise ValueError(f"--dataset must be one of {', '.join(DEFAULTS)}, got {d.dataset!r}")
    data = load_federated(d.dataset, d.data_dir, clients=d.clients, dirichlet=d.dirichlet, seed=tc.seed)
    rounds, spec = run_spec(tc, run_plan, data.n_clients)
    defaults = DEFAULTS[d.dataset]
    return BoundRun(run_plan=run_plan, data=data, spec=spec, rounds=rounds, batch=int(defaults["batch_size"]),
                    momentum=float(defaults["momentum"]), device=torch.device("cpu"))  # fmt: skip
