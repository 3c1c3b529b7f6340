"""Federated training of a plan (GDPFed Algorithm 2): rounds of sampling, local SGD, DP aggregation.

Randomness is derived per round from ``SeedSequence([seed, round, stream])`` (streams: 0 client sampling,
1 local batches, 2 noise; 3 and 4 the privacy audit's canaries, :mod:`hdp_planner_train.audit.canaries`), so the
loop and vectorized engines sample and noise identically, and a resumed
run continues exactly where it stopped: the checkpoint holds θ, the next round, the history, the noise
measurements and the privacy ledger (rounds run per group); it also stores torch's global RNG state.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hdp_planner.ledger.runs import plan_clients
from hdp_planner.methods.registry import REGISTRY, planner
from hdp_planner.planfile.document import load_plan, read_document, verify
from hdp_planner.rules.noise import SecureRandom
from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.rules.aggregate import (
    METHOD_NAMES,
    GroupAggregator,
    GroupSpec,
    method_spec,
    noise_source,
    round_rows,
    round_seed,
    sample_round,
)
from hdp_planner_train.rules.cohort import cohort_round, epsilon_spent, planned_secure
from hdp_planner_train.simulator.data import DEFAULTS, load_federated, parse_group_classes
from hdp_planner_train.simulator.engines import (
    ENGINES,
    PRECISIONS,
    clients_deltas,
    evaluate,
)
from hdp_planner_train.simulator.models import MODELS, make_model, model_dim, model_name
from hdp_planner_train.simulator.personal import PERSONAL_METHODS, check_options, run_personal
from hdp_planner_train.simulator.private_selection import SELECTION_METHODS, check_selection_options, run_selection
from hdp_planner_train.simulator.scaffold import (  # noqa: F401  (CHECKPOINT, privacy_ledger, SEEDED_NOTE: the run's API)
    CHECKPOINT,
    SECURE_NOTE,
    SEEDED_NOTE,
    TrainConfig,
    TrainError,
    base_metrics,
    check_finished,
    device_arrays,
    global_evaluation,
    ledger_run,
    noise_kind,
    output_folder,
    privacy_ledger,
    resume_state,
    run_identity,
    save_checkpoint,
    status,
    train_rounds,
    write_metrics,
)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainError("--device cuda: no CUDA device is visible (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise TrainError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def secagg_spec(cfg: TrainConfig, plan, spec: GroupSpec) -> GroupSpec:
    """The method's groups under the plan's ``secagg`` trust object (verified, :func:`~hdp_planner_train.rules.secagg.
    planned_groups`), or its public cohorts and private coins where it was solved with ``--hide-sample``
    (:func:`~hdp_planner_train.rules.cohort.planned_cohorts`), and the simulated dropout rate."""
    if cfg.method in PERSONAL_METHODS or cfg.method in SELECTION_METHODS:
        raise TrainError(f"{cfg.method} has no distributed form under --trust secagg (the plan's trust model: "
                         "--trust server --override-trust runs it with a trusted server)")  # fmt: skip
    if not 0 <= cfg.dropout < 1:
        raise TrainError(f"--dropout must lie in [0, 1), got {cfg.dropout}")
    try:
        return planned_secure(read_document(cfg.plan), plan, spec, METHOD_NAMES[spec.method], cfg.dropout)
    except ValueError as exc:
        raise TrainError(str(exc).replace("this plan", cfg.plan)) from None


def secagg_metrics(plan, spec: GroupSpec, rounds: int, withheld: int | None) -> dict[str, Any]:
    """The run's privacy under secure aggregation, from the distributed accounting of the rounds run: ε against third
    parties and against the server (every round a participation, the worst case), per group."""
    from hdp_planner_train.rules.secagg import epsilon_server_spent, epsilon_third_parties_spent

    sa, delta, groups = spec.secagg, plan.config.delta, range(len(spec.sizes))
    if sa.cohorts is not None:  # hidden participation: the ε against the server bounds third parties' too
        return {
            "kind": "secagg", "hidden_participation": True, "bits": sa.bits, "survivors": sa.survivors,
            "colluders": sa.colluders, "dropout_simulated": sa.dropout, "noise_multiplier": list(spec.noise_multiplier),
            "cohort": [g.cohort for g in sa.cohorts], "coin": [g.coin for g in sa.cohorts],
            "memberships": [g.memberships for g in sa.cohorts],
            "epsilon_server": [epsilon_spent(sa, m, rounds=rounds, delta=delta) for m in groups],
            "coins": "OS CSPRNG" if withheld is None else "seeded: a simulation's, regenerated from the seed",
            **({"group_rounds_withheld": withheld} if withheld is not None else {}),
        }  # fmt: skip
    doc = {
        "kind": "secagg", "bits": sa.bits, "survivors": sa.survivors, "colluders": sa.colluders,
        "dropout_simulated": sa.dropout, "noise_multiplier": list(spec.noise_multiplier),
        "epsilon_third_parties": [epsilon_third_parties_spent(spec, m, rounds=rounds, delta=delta) for m in groups],
        "epsilon_server_every_round": [epsilon_server_spent(spec, m, participations=rounds, delta=delta)
                                       for m in groups],
    }  # fmt: skip
    if withheld is not None:  # which group-rounds released nothing depends on who took part: simulations only
        doc["group_rounds_withheld"] = withheld
    return doc


def plan_trust(plan_file: str) -> str:
    """The trust model a plan file was solved for: ``secagg`` when it holds a secure-aggregation trust object."""
    from hdp_planner.planfile.trust import trust_from_dict

    return trust_from_dict(read_document(plan_file)).kind


def run_trust(cfg: TrainConfig, spec: GroupSpec) -> str:
    """The trust model the run follows: ``cfg.trust``, by default the plan's (:func:`plan_trust`; a method without
    noise runs as the trusted-server reference). ``--trust server`` on a plan solved for secure aggregation would
    show the server every clipped update it was planned never to see: refused unless ``cfg.override_trust``."""
    if cfg.trust not in (None, "server", "secagg"):
        raise TrainError(f"--trust must be server or secagg, got {cfg.trust!r}")
    planned = plan_trust(cfg.plan)
    if cfg.trust is None:
        return planned if spec.private else "server"
    if cfg.trust == "server" and planned == "secagg" and spec.private and not cfg.override_trust:
        raise TrainError(
            f"{cfg.plan} was solved for a server that is not trusted (--trust secagg): --trust server would show "
            "the server every clipped update; add --override-trust to run it so"
        )
    return cfg.trust


def validate_config(cfg: TrainConfig):
    """Validate everything before anything is written; returns (plan, data, spec, rounds, batch, momentum)."""
    if cfg.method not in METHOD_NAMES and cfg.method not in SELECTION_METHODS:
        names = ", ".join((*METHOD_NAMES, *SELECTION_METHODS))
        raise TrainError(f"--method must be one of {names}, got {cfg.method!r}")
    if cfg.engine not in ENGINES:
        raise TrainError(f"--engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}")
    if cfg.precision not in PRECISIONS:
        raise TrainError(f"--precision must be one of {', '.join(PRECISIONS)}, got {cfg.precision!r}")
    if cfg.precision != "fp32" and cfg.method in SELECTION_METHODS:
        raise TrainError(f"--precision {cfg.precision}: {cfg.method} trains by per-example DP-SGD, in fp32 only")
    if cfg.dataset not in DEFAULTS:
        raise TrainError(f"--dataset must be one of {', '.join(DEFAULTS)}, got {cfg.dataset!r}")
    noise_kind(cfg)
    try:
        model_name(cfg.dataset, cfg.model)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    plan = load_plan(cfg.plan)
    problems = verify(plan)
    if problems:
        raise TrainError(f"plan {cfg.plan} fails verification: {problems[0]}")
    t = plan.config.rounds
    rounds = t if cfg.rounds is None else cfg.rounds
    if not 1 <= rounds <= t:
        raise TrainError(f"--rounds must be between 1 and the plan's T = {t}, got {rounds}")
    if cfg.eval_every < 1:
        raise TrainError(f"--eval-every must be ≥ 1, got {cfg.eval_every}")
    if not 0 < cfg.lr_decay <= 1:
        raise TrainError(f"--lr-decay must lie in (0, 1], got {cfg.lr_decay}")
    defaults = DEFAULTS[cfg.dataset]
    batch = int(cfg.batch_size if cfg.batch_size is not None else defaults["batch_size"])  # type: ignore[arg-type]
    momentum = float(cfg.momentum if cfg.momentum is not None else defaults["momentum"])  # type: ignore[arg-type]
    if batch < 1 or not 0 <= momentum < 1:
        raise TrainError(f"need --batch-size ≥ 1 and 0 ≤ --momentum < 1, got {batch} and {momentum}")
    check_options(cfg)
    check_selection_options(cfg)
    if cfg.audit and (cfg.method in PERSONAL_METHODS or cfg.method in SELECTION_METHODS):
        raise TrainError(f"--audit covers the plan-noised methods, not {cfg.method}")
    if cfg.audit_canaries is not None and not cfg.audit:
        raise TrainError("--audit-canaries needs --audit")
    if cfg.method in SELECTION_METHODS and cfg.ledger not in (None, "", "none", "auto"):
        raise TrainError(f"--ledger: {cfg.method} protects each client's examples (example-level DP), not whole "
                         "clients; the ledger composes client-level runs: use --ledger none")  # fmt: skip
    skew = None
    if cfg.group_classes is not None:
        skew = (plan.groups.size, parse_group_classes(cfg.group_classes, len(plan.groups.size), 10))
    data = load_federated(
        cfg.dataset, cfg.data_dir, cfg.clients, cfg.dirichlet, cfg.seed, cfg.shards, cfg.iid_share, skew
    )
    if data.n_clients != plan.config.n:
        raise TrainError(
            f"plan has n = {plan.config.n} clients but the {cfg.dataset} partition gives n = {data.n_clients}: "
            f"re-plan with --n {data.n_clients} or train with --clients {plan.config.n}"
        )
    try:
        # a selection method: each client the ε of its group in its row, as the method planning that row executes it
        spec = method_spec(plan, cfg.method if cfg.method in METHOD_NAMES else planner(REGISTRY[cfg.method].row))
    except ValueError as exc:
        raise TrainError(f"{cfg.plan}: {exc}") from None
    try:  # a plan made from per-client budgets runs only with the clients' own groups file
        plan_clients(plan, METHOD_NAMES[spec.method], read_document(cfg.plan), cfg.groups)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    if run_trust(cfg, spec) == "secagg":
        spec = secagg_spec(cfg, plan, spec)
    if cfg.audit:
        from hdp_planner_train.audit.canaries import check_auditable

        try:
            check_auditable(spec)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    return plan, data, spec, rounds, batch, momentum


def run(cfg: TrainConfig) -> dict[str, Any]:
    """Train ``cfg.method`` on ``cfg.dataset`` under ``cfg.plan``; writes metrics (and checkpoints) to ``cfg.out``,
    which is checked before round 1 (:func:`output_folder`) and never holds a finished run unless ``cfg.overwrite``."""
    plan, data, spec, rounds, batch, momentum = validate_config(cfg)
    device = _device(cfg.device)
    check_finished(cfg)
    with output_folder(cfg.out):
        if cfg.method in PERSONAL_METHODS:  # DP²-FedSAM family: personal heads / SAM, per-client evaluation
            return run_personal(cfg, plan, data, spec, rounds, batch, momentum, device)
        if cfg.method in SELECTION_METHODS:  # the selection paper: record-level DP-SGD, with replacement
            return run_selection(cfg, plan, data, rounds, batch, momentum, device)
        return run_fedavg(cfg, plan, data, spec, rounds, batch, momentum, device)


def run_fedavg(cfg: TrainConfig, plan, data, spec: GroupSpec, rounds: int, batch: int, momentum: float, device):
    """The FedAvg family's run (GDPFed Algorithm 2): :func:`run` once the configuration is checked."""
    out = Path(cfg.out) if cfg.out else None
    identity = run_identity(cfg, data, batch, momentum, audit=(cfg.audit_canaries or "default") if cfg.audit else None)
    state = resume_state(cfg, identity, rounds)

    torch.manual_seed(cfg.seed)
    model = make_model(cfg.dataset, data.num_classes, cfg.model).to(device)
    theta = parameters_to_vector(model.parameters()).detach()
    if spec.secagg is not None and spec.secagg.model_dim != theta.numel():
        raise TrainError(f"{cfg.plan}'s trust object was planned for d = {spec.secagg.model_dim}, this model has "
                         f"d = {theta.numel()}: re-plan with --trust secagg --model-dim {theta.numel()}")  # fmt: skip
    if spec.projection is not None and spec.projection.model_dim != theta.numel():
        raise TrainError(pfa_dim_mismatch(cfg, spec.projection.model_dim, theta.numel(), data.num_classes))
    x_train, y_train, x_test, y_test = device_arrays(data, device)
    auditor = None
    if cfg.audit:
        from hdp_planner_train.audit.canaries import CanaryAuditor

        try:
            auditor = CanaryAuditor(spec, int(theta.numel()), cfg.seed, cfg.audit_canaries)
        except ValueError as exc:
            raise TrainError(str(exc)) from None

    kind = noise_kind(cfg)
    log = RunLog(diagnostics=kind == "seeded")
    aggregator = GroupAggregator(spec)
    if state is not None:
        theta = state["theta"].to(device)
        log = RunLog.from_state(state)
        aggregator = GroupAggregator(spec, [t.to(device) for t in state["public_history"]])
        torch.set_rng_state(state["torch_rng"])
        if auditor is not None:
            if "clients" not in state["audit"]:
                raise TrainError(f"{out}: the checkpoint holds an earlier audit's state; rerun with --overwrite")
            auditor.load_state(state["audit"])
    vector_to_parameters(theta.clone(), model.parameters())

    c = plan.config
    account = ledger_run(cfg, plan, spec, log.next_round, rounds, supersedes=(state or {}).get("ledger_run"))
    withheld = 0  # secure aggregation: group sums not released this run
    cohorts = spec.secagg.cohorts if spec.secagg is not None else None
    canaries = auditor.extra if auditor is not None else (0,) * len(spec.sizes)  # members too: named like clients
    used = [np.zeros(s + e, np.int64) for s, e in zip(spec.sizes, canaries)]  # hidden participation: memberships
    if state is not None and cohorts is not None:
        used = [np.asarray(u, dtype=np.int64) for u in state["cohort_memberships"]]

    def step(r: int, lr: float):
        nonlocal withheld
        extra = auditor.extra if auditor is not None else None
        if cohorts is not None:
            rng = SecureRandom() if kind == "secure" else np.random.default_rng(round_seed(cfg.seed, r, 0))
            sampled = cohort_round(spec.secagg, spec.offsets, used, rng)
        else:
            sampled = sample_round(spec, cfg.seed, r, secure=kind == "secure", extra=extra)
        if auditor is not None:
            sampled = auditor.take(sampled, spec.offsets, spec.sizes)
        ids, group_of_row = round_rows(sampled)
        deltas = clients_deltas(
            cfg.engine, model, theta, data.clients, ids, x_train, y_train, steps=c.local_steps, batch=batch,
            seed=cfg.seed, rnd=r, lr=lr, momentum=momentum, chunk=cfg.chunk, precision=cfg.precision,
        )  # fmt: skip
        if auditor is not None:
            deltas, group_of_row = auditor.insert(deltas, group_of_row, r)
        gen = noise_source(kind, cfg.seed, r) if spec.private else None
        observe = auditor.observe if auditor is not None else None
        referee = auditor.referee if auditor is not None else None
        survivors = auditor.survivors if auditor is not None else None
        update, stats = aggregator.round(deltas, group_of_row, gen, r, observe=observe, referee=referee,
                                         survivors=survivors)  # fmt: skip
        if auditor is not None:
            stats = auditor.real_stats(stats)
        withheld += stats.withheld

        def apply_update() -> None:
            nonlocal theta
            theta = theta + update
            vector_to_parameters(theta.clone(), model.parameters())

        return stats, apply_update

    def checkpoint() -> None:
        save_checkpoint(
            out, identity, theta, log, plan, spec,
            public_history=[t.cpu() for t in aggregator.public_history], torch_rng=torch.get_rng_state(),
            numpy_rng="per-round SeedSequence([seed, round, stream])" if kind == "seeded" else "secure",
            audit=auditor.state() if auditor is not None else None,
            ledger_run=account.run_id if account is not None else None,
            **({"cohort_memberships": [u.copy() for u in used]} if cohorts is not None else {}),
        )  # fmt: skip

    train_rounds(cfg, plan, spec, rounds, log, account, step=step, evaluate=global_evaluation(model, x_test, y_test),
               checkpoint=checkpoint if out else None)  # fmt: skip

    metrics = base_metrics(cfg, plan, spec, data, device, rounds, int(theta.numel()), batch, momentum, log)
    if spec.secagg is not None:
        metrics["trust"] = secagg_metrics(plan, spec, rounds, withheld if kind == "seeded" else None)
    else:
        planned = plan_trust(cfg.plan)
        metrics["trust"] = {"kind": "server", **({"plan_trust": planned} if planned != "server" else {})}
    if cfg.group_classes is not None:  # accuracy on each privacy group's own classes
        classes = parse_group_classes(cfg.group_classes, len(plan.groups.size), data.num_classes)  # DP-FedAvg: 1 group
        metrics["group_classes"] = [list(c) for c in classes]
        metrics["group_accuracy"] = [
            evaluate(model, x_test[mask], y_test[mask])[0]
            for mask in (torch.isin(y_test, torch.as_tensor(c, device=y_test.device)) for c in classes)
        ]
    metrics.update(
        {
            "engine": cfg.engine,
            "clip": spec.clip if spec.private else None,  # C, or C_m per group
            "privacy": (
                f"(ε, δ={c.delta:.3g})-DP per group, {c.spending_accountant} accountant, for the {rounds} rounds run"
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
    if auditor is not None:
        planned = [e["epsilon_spent"] for e in metrics["epsilon_spent"]]
        with status(cfg.progress, "audit: estimating each group's ε from its canaries (PLD, bootstrap interval)…"):
            metrics["audit"] = auditor.report(planned, c.delta)
    if out:
        write_metrics(metrics, out, cfg.plot)
    return metrics


def pfa_dim_mismatch(cfg: TrainConfig, planned: int, d: int, num_classes: int) -> str:
    """The one-line error for a PFA plan made for another d: which ``--model`` has the plan's d, or how to re-plan."""
    name = model_name(cfg.dataset, cfg.model)
    fits = [
        m for m, (_, ds) in MODELS.items() if cfg.dataset in ds and model_dim(cfg.dataset, num_classes, m) == planned
    ]
    hint = f"train with --model {fits[0]}" if fits else f"re-plan with --model-dim {d}"
    return f"the plan's PFA was planned for d = {planned} parameters but --model {name} has d = {d}: {hint}"
