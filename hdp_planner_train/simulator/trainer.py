"""Federated training of a plan (GDPFed Algorithm 2): rounds of sampling, local SGD, DP aggregation.

:func:`run` checks the configuration, binds the plan and runs the method's family (:data:`FAMILIES`, by the method
registry's family) on the one run skeleton, :func:`~.template.run_family`; the FedAvg family's hooks are here
(:class:`FedAvgRun`), its callbacks (who joins a round, the privacy audit) in :mod:`.callbacks`.

Randomness is derived per round from ``SeedSequence([seed, round, stream])`` (streams: 0 client sampling,
1 local batches, 2 noise; 3 and 4 the privacy audit's canaries, :mod:`hdp_planner_train.audit.canaries`), so the
loop and vectorized engines sample and noise identically, and a resumed
run continues exactly where it stopped: the checkpoint holds θ, the next round, the history, the noise
measurements and the privacy ledger (rounds run per group); it also stores torch's global RNG state.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import torch
from torch.nn.utils import vector_to_parameters

from hdp_planner.methods.registry import REGISTRY
from hdp_planner.planning.plan import Plan
from hdp_planner.trust.registry import trust_name
from hdp_planner_train.learning.datasets import DEFAULTS
from hdp_planner_train.learning.engines import ENGINES, PRECISIONS, clients_deltas, evaluate
from hdp_planner_train.learning.federated import load_federated
from hdp_planner_train.learning.models import MODELS, model_dim, model_name
from hdp_planner_train.learning.partitions import parse_group_classes
from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.rules.aggregate import GroupAggregator
from hdp_planner_train.rules.noise_sources import noise_source
from hdp_planner_train.rules.sampling import round_rows
from hdp_planner_train.rules.secagg import Withheld
from hdp_planner_train.rules.specs import METHOD_NAMES, paper_weighted
from hdp_planner_train.run.bound import BoundRun
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.ledger import LedgerRun
from hdp_planner_train.run.metrics import trust_metrics
from hdp_planner_train.run.noise import noise_kind
from hdp_planner_train.run.output import check_finished, output_folder
from hdp_planner_train.run.plan import RunPlan, run_spec
from hdp_planner_train.simulator.callbacks import round_sampling, run_audit
from hdp_planner_train.simulator.personal import PERSONAL_METHODS, PersonalRun, check_options
from hdp_planner_train.simulator.private_selection import SELECTION_METHODS, SelectionRun, check_selection_options
from hdp_planner_train.simulator.scaffold import CHECKPOINT, RunStart, TrainConfig, local_training, run_metrics
from hdp_planner_train.simulator.template import Callback, FamilyRun, run_family


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainError("--device cuda: no CUDA device is visible (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise TrainError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def validate_config(cfg: TrainConfig, plan: str | os.PathLike[str] | Plan | RunPlan) -> BoundRun:
    """Validate everything before anything is written: the options first, then ``plan`` bound once
    (:meth:`RunPlan.bind <hdp_planner_train.run.plan.RunPlan.bind>`: a plan file's path is read here) and verified;
    returns the run bound to its plan, its data and the device ``cfg.model.device`` names."""
    if cfg.method not in METHOD_NAMES and cfg.method not in SELECTION_METHODS:
        names = ", ".join((*METHOD_NAMES, *SELECTION_METHODS))
        raise TrainError(f"--method must be one of {names}, got {cfg.method!r}")
    if cfg.model.engine not in ENGINES:
        raise TrainError(f"--engine must be one of {', '.join(ENGINES)}, got {cfg.model.engine!r}")
    if cfg.model.weights not in ("plan", "paper"):
        raise TrainError(f"--weights must be plan or paper, got {cfg.model.weights!r}")
    if cfg.model.weights == "paper" and (cfg.method in PERSONAL_METHODS or cfg.method in SELECTION_METHODS):
        raise TrainError(f"--weights paper weighs the group sums of the plan-noised methods, not {cfg.method}")
    if cfg.model.precision not in PRECISIONS:
        raise TrainError(f"--precision must be one of {', '.join(PRECISIONS)}, got {cfg.model.precision!r}")
    if cfg.model.precision != "fp32" and cfg.method in SELECTION_METHODS:
        raise TrainError(f"--precision {cfg.model.precision}: {cfg.method} trains by per-example DP-SGD, in fp32 only")
    if cfg.data.dataset not in DEFAULTS:
        raise TrainError(f"--dataset must be one of {', '.join(DEFAULTS)}, got {cfg.data.dataset!r}")
    noise_kind(cfg)
    try:
        model_name(cfg.data.dataset, cfg.model.name)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    if cfg.output.eval_every < 1:
        raise TrainError(f"--eval-every must be ≥ 1, got {cfg.output.eval_every}")
    if not 0 < cfg.model.lr_decay <= 1:
        raise TrainError(f"--lr-decay must lie in (0, 1], got {cfg.model.lr_decay}")
    defaults = DEFAULTS[cfg.data.dataset]
    batch = int(cfg.model.batch_size if cfg.model.batch_size is not None else defaults["batch_size"])  # type: ignore[arg-type]
    momentum = float(cfg.model.momentum if cfg.model.momentum is not None else defaults["momentum"])  # type: ignore[arg-type]
    if batch < 1 or not 0 <= momentum < 1:
        raise TrainError(f"need --batch-size ≥ 1 and 0 ≤ --momentum < 1, got {batch} and {momentum}")
    check_options(cfg)
    check_selection_options(cfg)
    if cfg.audit.enabled and (cfg.method in PERSONAL_METHODS or cfg.method in SELECTION_METHODS):
        raise TrainError(f"--audit covers the plan-noised methods, not {cfg.method}")
    if cfg.audit.canaries is not None and not cfg.audit.enabled:
        raise TrainError("--audit-canaries needs --audit")
    if cfg.method in SELECTION_METHODS and cfg.ledger.url not in (None, "", "none", "auto"):
        raise TrainError(f"--ledger: {cfg.method} protects each client's examples (example-level DP), not whole "
                         "clients; the ledger composes client-level runs: use --ledger none")  # fmt: skip
    run_plan = RunPlan.bind(plan)
    skew = None
    if cfg.data.group_classes is not None:
        sizes = run_plan.plan.groups.size
        skew = (sizes, parse_group_classes(cfg.data.group_classes, len(sizes), 10))
    split = cfg.data
    data = load_federated(
        split.dataset, data_dir=split.data_dir, clients=split.clients, dirichlet=split.dirichlet, seed=cfg.seed,
        shards=split.shards, iid_share=split.iid_share, group_classes=skew,
    )  # fmt: skip
    rounds, spec = run_spec(cfg, run_plan, data.n_clients)
    if spec.secagg is not None and (cfg.method in PERSONAL_METHODS or cfg.method in SELECTION_METHODS):
        raise TrainError(f"{cfg.method} has no distributed form under --trust {trust_name(spec.trust)} (the plan's "
                         "trust model: --trust server --override-trust runs it with a trusted server)")  # fmt: skip
    if cfg.model.weights == "paper":
        if spec.secagg is not None:
            raise TrainError("--weights paper runs under a trusted server only (--trust server)")
        try:
            config = run_plan.plan.config
            spec = paper_weighted(spec, q=config.q, n=config.n)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    return BoundRun(run_plan=run_plan, data=data, spec=spec, rounds=rounds, batch=batch, momentum=momentum,
                    device=_device(cfg.model.device))  # fmt: skip


def run(cfg: TrainConfig, plan: str | os.PathLike[str] | Plan | RunPlan) -> dict[str, Any]:
    """Train ``cfg.method`` on ``cfg.data.dataset`` under ``plan`` (a plan file's path, read once, a plan in memory
    or a :class:`~hdp_planner_train.run.plan.RunPlan`); writes metrics (and checkpoints) to ``cfg.output.out``, which
    is checked before round 1 (:func:`output_folder`) and never holds a finished run unless
    ``cfg.output.overwrite``."""
    check_finished(cfg.output, checkpoint=CHECKPOINT)  # before anything slow: the plan's laws, the data
    bound = validate_config(cfg, plan)
    with output_folder(cfg.output.out):
        return run_family(FAMILIES[REGISTRY[cfg.method].family](cfg, bound))


class FedAvgRun(FamilyRun):
    """The FedAvg family's hooks (GDPFed Algorithm 2) for :func:`~.template.run_family`: each round the clients the
    run's sampling draws (:func:`~.callbacks.round_sampling`) train locally, the audit's canaries join them
    (:func:`~.callbacks.run_audit`), and the group aggregation releases the update; PFA's public history and torch's
    RNG state are checkpointed beside θ."""

    def __init__(self, cfg: TrainConfig, bound: BoundRun) -> None:
        super().__init__(cfg, bound)
        self.identity = {"audit": (cfg.audit.canaries or "default") if cfg.audit.enabled else None}
        self.withheld: list[tuple[int, Withheld]] = []  # secure aggregation: group sums not released, by round

    def begin(self, start: RunStart) -> tuple[Callback, ...]:
        """The model's dimension checked against the plan's trust model and PFA; the aggregator, the audit and the
        round's sampling."""
        super().begin(start)
        cfg, bound, d = self.cfg, self.bound, int(start.theta.numel())
        spec = bound.spec
        if spec.secagg is not None and spec.secagg.model_dim != d:
            raise TrainError(f"{bound.run_plan.source}'s trust object was planned for d = {spec.secagg.model_dim}, "
                             f"this model has d = {d}: re-plan with --trust secagg --model-dim {d}")  # fmt: skip
        if spec.projection is not None and spec.projection.model_dim != d:
            raise TrainError(pfa_dim_mismatch(cfg, spec.projection.model_dim, d, bound.data.num_classes))
        self.audit = run_audit(cfg, spec, d=d, delta=bound.plan.config.delta)
        self.aggregator = GroupAggregator(spec)
        self.sampling = round_sampling(spec, start.kind, seed=cfg.seed, extra=self.audit.extra)
        return self.audit, self.sampling

    def state(self) -> dict[str, Any]:
        return {
            "public_history": [t.cpu() for t in self.aggregator.public_history],
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": "per-round SeedSequence([seed, round, stream])" if self.start.kind == "seeded" else "secure",
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        super().load_state(state)
        self.aggregator = GroupAggregator(self.bound.spec, [t.to(self.bound.device) for t in state["public_history"]])
        torch.set_rng_state(state["torch_rng"])
        vector_to_parameters(self.theta.clone(), self.start.model.parameters())

    def step(self, r: int, lr: float):
        cfg, bound, start, audit = self.cfg, self.bound, self.start, self.audit
        spec = bound.spec
        sampled = audit.take(self.sampling.draw(r), spec.offsets, spec.sizes)
        ids, group_of_row = round_rows(sampled)
        training = local_training(cfg, bound, lr=lr)
        deltas = clients_deltas(start.model, training, theta=self.theta, data=start.train, ids=ids, seed=cfg.seed,
                                rnd=r)  # fmt: skip
        deltas, group_of_row = audit.insert(deltas, group_of_row, r)
        gen = noise_source(start.kind, seed=cfg.seed, rnd=r) if spec.private else None
        update, stats = self.aggregator.round(deltas, group_of_row, source=gen, rnd=r, observers=audit.observers)
        stats = audit.real_stats(stats)
        self.withheld.extend((r, w) for w in stats.withheld)

        def apply_update() -> None:
            self.theta = self.theta + update
            vector_to_parameters(self.theta.clone(), start.model.parameters())

        return stats, apply_update

    def metrics(self, log: RunLog, account: LedgerRun | None) -> dict[str, Any]:
        cfg, bound, kind = self.cfg, self.bound, self.start.kind
        plan, spec, rounds = bound.plan, bound.spec, bound.rounds
        model, x_test, y_test = self.start.model, self.start.x_test, self.start.y_test
        c = plan.config
        metrics = run_metrics(cfg, bound, d=int(self.theta.numel()), log=log, account=account)
        metrics["trust"] = trust_metrics(plan, spec, rounds, self.withheld if kind == "seeded" else None)
        if cfg.data.group_classes is not None:  # accuracy on each privacy group's own classes (DP-FedAvg: 1 group)
            classes = parse_group_classes(cfg.data.group_classes, len(plan.groups.size), bound.data.num_classes)
            metrics["group_classes"] = [list(c) for c in classes]
            metrics["group_accuracy"] = [
                evaluate(model, x_test[mask], y_test[mask])[0]
                for mask in (torch.isin(y_test, torch.as_tensor(c, device=y_test.device)) for c in classes)
            ]
        metrics.update(
            {
                "engine": cfg.model.engine,
                "clip": spec.clip if spec.private else None,  # C, or C_m per group
                "privacy": (
                    f"(ε, δ={c.delta:.3g})-DP per group, {c.spending_accountant} accountant, for the {rounds} rounds "
                    "run"
                    if spec.private
                    else "none: p-fedavg adds no noise and does not clip (ε = ∞)"
                ),
                "noise_lambda_note": None
                if kind == "secure"
                else (
                    "simulation diagnostics: measured = mean over rounds of Σ_m ω_m²(k_m/d)‖n_m‖²/d (noise of each "
                    "group sum, Top-k mask independent of the noise; expectation = planned lambda_exact); applied = "
                    "‖Σ_m ω_m mask_m⊙n_m‖²/d with the Top-k mask chosen on the noisy sum (biased up by Top-k's "
                    "preference for large noise)"
                ),
                "groups": {k: list(v) for k, v in asdict(spec).items() if isinstance(v, tuple)},
            }
        )
        return metrics


def pfa_dim_mismatch(cfg: TrainConfig, planned: int, d: int, num_classes: int) -> str:
    """The one-line error for a PFA plan made for another d: which ``--model`` has the plan's d, or how to re-plan."""
    name = model_name(cfg.data.dataset, cfg.model.name)
    fits = [
        m
        for m, (_, ds) in MODELS.items()
        if cfg.data.dataset in ds and model_dim(cfg.data.dataset, num_classes, m) == planned
    ]
    hint = f"train with --model {fits[0]}" if fits else f"re-plan with --model-dim {d}"
    return f"the plan's PFA was planned for d = {planned} parameters but --model {name} has d = {d}: {hint}"


FAMILIES: dict[str, type[FamilyRun]] = {
    "fedavg": FedAvgRun,  # GDPFed Algorithm 2 and its baselines: the plan's groups, global evaluation
    "personal": PersonalRun,  # DP²-FedSAM family: personal heads / SAM, per-client evaluation
    "selection": SelectionRun,  # the selection paper: record-level DP-SGD, with replacement
}
"""Each trainer family of the method registry (:attr:`~hdp_planner.methods.method.Method.family`): its hooks."""
