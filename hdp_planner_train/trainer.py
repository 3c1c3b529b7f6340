"""Federated training of a plan (GDPFed Algorithm 2): rounds of sampling, local SGD, DP aggregation.

Randomness is derived per round from ``SeedSequence([seed, round, stream])`` (streams: 0 client sampling,
1 local batches, 2 noise), so the loop and vectorized engines sample and noise identically, and a resumed
run continues exactly where it stopped: the checkpoint holds θ, the next round, the history, the noise
measurements and the privacy ledger (rounds run per group); it also stores torch's global RNG state.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hdp_planner import load_plan, verify
from hdp_planner.schedule import group_epsilon
from hdp_planner_train.aggregate import METHOD_NAMES, aggregate, method_spec, noise_generator, sample_round
from hdp_planner_train.data import DEFAULTS, load_federated
from hdp_planner_train.engines import ENGINES, batch_indices, evaluate, local_deltas
from hdp_planner_train.models import make_model

CHECKPOINT = "checkpoint.pt"


class TrainError(ValueError):
    """A setting the user can fix: reported as one line, exit status 2, nothing written."""


@dataclass
class TrainConfig:
    plan: str
    method: str = "gdpfed+"
    dataset: str = "fmnist"
    data_dir: str | None = None
    dirichlet: float | None = None
    rounds: int | None = None
    seed: int = 0
    device: str = "auto"
    eval_every: int = 1
    out: str | None = None
    engine: str = "vectorized"
    batch_size: int | None = None
    momentum: float | None = None
    lr_decay: float = 0.99
    clients: int | None = None
    plot: bool = False
    resume: bool = False
    progress: bool = True
    chunk: int | None = None


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainError("--device cuda: no CUDA device is visible (use --device cpu or auto)")
    if name not in ("cpu", "cuda"):
        raise TrainError(f"--device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def privacy_ledger(plan, spec, rounds_run: int) -> list[dict[str, Any]]:
    """ε spent per group after ``rounds_run`` rounds (the plan's spending accountant, or RDP composition of a σ
    schedule; δ of the plan)."""
    c = plan.config
    m = plan.method(METHOD_NAMES[spec.method])
    ledger = []
    for i in range(len(spec.sizes)):
        entry: dict[str, Any] = {"group": i + 1, "epsilon_budget": m.epsilon[i], "rounds": rounds_run}
        if not spec.private:
            entry["epsilon_spent"] = None  # no noise: ε = ∞
        elif rounds_run == 0:
            entry["epsilon_spent"] = 0.0
        else:
            entry["epsilon_spent"] = float(group_epsilon(m, i, rounds_run, c.delta, c.spending_accountant))
        ledger.append(entry)
    return ledger


def _check(cfg: TrainConfig):
    """Validate everything before anything is written; returns (plan, data, spec, rounds, batch, momentum)."""
    if cfg.method not in METHOD_NAMES:
        raise TrainError(f"--method must be one of {', '.join(METHOD_NAMES)}, got {cfg.method!r}")
    if cfg.engine not in ENGINES:
        raise TrainError(f"--engine must be one of {', '.join(ENGINES)}, got {cfg.engine!r}")
    if cfg.dataset not in DEFAULTS:
        raise TrainError(f"--dataset must be one of {', '.join(DEFAULTS)}, got {cfg.dataset!r}")
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
    data = load_federated(cfg.dataset, cfg.data_dir, cfg.clients, cfg.dirichlet, cfg.seed)
    if data.n_clients != plan.config.n:
        raise TrainError(
            f"plan has n = {plan.config.n} clients but the {cfg.dataset} partition gives n = {data.n_clients}: "
            f"re-plan with --n {data.n_clients}"
            + ("" if cfg.dataset == "shakespeare" else f" or train with --clients {plan.config.n}")
        )
    try:
        spec = method_spec(plan, cfg.method)
    except ValueError as exc:
        raise TrainError(f"{cfg.plan}: {exc}") from None
    return plan, data, spec, rounds, batch, momentum


def _save_atomic(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def run(cfg: TrainConfig) -> dict[str, Any]:
    """Train ``cfg.method`` on ``cfg.dataset`` under ``cfg.plan``; writes metrics (and checkpoints) to ``cfg.out``."""
    plan, data, spec, rounds, batch, momentum = _check(cfg)
    device = _device(cfg.device)
    out = Path(cfg.out) if cfg.out else None
    plan_hash = hashlib.sha256(Path(cfg.plan).read_bytes()).hexdigest()
    identity = {
        "plan_sha256": plan_hash,
        "method": cfg.method,
        "dataset": cfg.dataset,
        "seed": cfg.seed,
        "dirichlet": cfg.dirichlet,
        "clients": data.n_clients,
        "batch_size": batch,
        "momentum": momentum,
        "lr_decay": cfg.lr_decay,
    }
    ckpt_path = out / CHECKPOINT if out else None
    state = None
    if cfg.resume:
        if ckpt_path is None or not ckpt_path.is_file():
            raise TrainError(f"--resume: no {CHECKPOINT} in {cfg.out}")
        state = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        diff = [k for k, v in identity.items() if state["identity"].get(k) != v]
        if diff:
            raise TrainError(f"--resume: the checkpoint in {cfg.out} was made with a different {', '.join(diff)}")
        if state["next_round"] > rounds:
            raise TrainError(f"--resume: the checkpoint already ran {state['next_round']} rounds > --rounds {rounds}")

    torch.manual_seed(cfg.seed)
    model = make_model(cfg.dataset, data.num_classes).to(device)
    theta = parameters_to_vector(model.parameters()).detach()
    if spec.projection is not None and spec.projection.model_dim != theta.numel():
        raise TrainError(
            f"the plan's PFA was planned for d = {spec.projection.model_dim} parameters but the {cfg.dataset} model "
            f"has d = {theta.numel()}: re-plan with --model-dim {theta.numel()}"
        )
    x_train = torch.as_tensor(data.x_train, device=device)
    y_train = torch.as_tensor(data.y_train, device=device)
    x_test = torch.as_tensor(data.x_test, device=device)
    y_test = torch.as_tensor(data.y_test, device=device)

    start, history, lam_measured, lam_applied, seconds = 0, [], [], [], []
    joined_log: list[list[int]] = []
    public_history: list[torch.Tensor] = []  # PFA: the public group's latest noisy sums
    if state is not None:
        theta = state["theta"].to(device)
        start, history = state["next_round"], state["history"]
        lam_measured, lam_applied, seconds = state["lambda_measured"], state["lambda_applied"], state["round_seconds"]
        joined_log = state["joined"]
        public_history = [t.to(device) for t in state["public_history"]]
        torch.set_rng_state(state["torch_rng"])
    vector_to_parameters(theta.clone(), model.parameters())
    if out:
        out.mkdir(parents=True, exist_ok=True)

    c = plan.config
    strict = int(np.argmin(plan.method(METHOD_NAMES[spec.method]).epsilon))
    progress = _progress(cfg.progress)
    task = progress.add_task("training", total=rounds, completed=start)
    with progress:
        for r in range(start, rounds):
            t0 = time.perf_counter()
            lr = c.lr * cfg.lr_decay**r
            sampled = sample_round(spec, cfg.seed, r)
            ids = np.concatenate(sampled) if sampled else np.zeros(0, np.int64)
            group_of_row = np.concatenate([np.full(len(s), m) for m, s in enumerate(sampled)]).astype(np.int64)
            idx = torch.as_tensor(batch_indices(data.clients, ids, c.local_steps, batch, cfg.seed, r), device=device)
            deltas = local_deltas(
                cfg.engine, model, theta, x_train[idx], y_train[idx], lr=lr, momentum=momentum, chunk=cfg.chunk
            )
            gen = noise_generator(cfg.seed, r, device) if spec.private else None
            update, stats = aggregate(deltas, group_of_row, spec, gen, r, public_history)
            theta = theta + update
            vector_to_parameters(theta.clone(), model.parameters())
            seconds.append(time.perf_counter() - t0)
            lam_measured.append(stats.lambda_measured)
            lam_applied.append(stats.lambda_applied)
            joined_log.append(stats.joined)
            if (r + 1) % cfg.eval_every == 0 or r + 1 == rounds:
                acc, loss = evaluate(model, x_test, y_test)
                history.append({"round": r + 1, "accuracy": acc, "loss": loss})
                eps = privacy_ledger(plan, spec, r + 1)[strict]["epsilon_spent"] if spec.private else math.inf
                progress.update(
                    task,
                    description=f"round {r + 1}/{rounds} acc {acc:.2f}% loss {loss:.3f} ε spent {eps:.3g}",
                )
            progress.update(task, completed=r + 1)
            if ckpt_path is not None:
                _save_atomic(
                    {
                        "identity": identity,
                        "theta": theta.cpu(),
                        "next_round": r + 1,
                        "history": history,
                        "lambda_measured": lam_measured,
                        "lambda_applied": lam_applied,
                        "round_seconds": seconds,
                        "joined": joined_log,
                        "public_history": [t.cpu() for t in public_history],
                        "privacy_ledger": privacy_ledger(plan, spec, r + 1) if spec.private else None,
                        "torch_rng": torch.get_rng_state(),
                        "numpy_rng": "per-round SeedSequence([seed, round, stream])",
                    },
                    ckpt_path,
                )

    mn = plan.method(METHOD_NAMES[spec.method])
    metrics: dict[str, Any] = {
        "method": cfg.method,
        "plan_method": METHOD_NAMES[spec.method],
        "dataset": cfg.dataset,
        "engine": cfg.engine,
        "device": str(device),
        "seed": cfg.seed,
        "rounds": rounds,
        "plan_rounds": c.rounds,
        "clients": data.n_clients,
        "d": int(theta.numel()),
        "batch_size": batch,
        "momentum": momentum,
        "lr": c.lr,
        "lr_decay": cfg.lr_decay,
        "local_steps": c.local_steps,
        "clip": spec.clip if spec.private else None,  # C, or C_m per group
        "final_accuracy": history[-1]["accuracy"] if history else None,
        "final_loss": history[-1]["loss"] if history else None,
        "history": history,
        "epsilon_spent": privacy_ledger(plan, spec, rounds),
        "privacy": (
            f"(ε, δ={c.delta:.3g})-DP per group, {c.spending_accountant} accountant, for the {rounds} rounds run"
            if spec.private
            else "none: p-fedavg adds no noise and does not clip (ε = ∞)"
        ),
        "noise_lambda_measured": float(np.mean(lam_measured)) if lam_measured else 0.0,
        "noise_lambda_applied": float(np.mean(lam_applied)) if lam_applied else 0.0,
        "noise_lambda_planned": mn.lambda_exact if spec.private else 0.0,
        "noise_lambda_note": (
            "measured = mean over rounds of Σ_m ω_m²(k_m/d)‖n_m‖²/d (noise of each group sum, Top-k mask "
            "independent of the noise; expectation = planned lambda_exact); applied = ‖Σ_m ω_m mask_m⊙n_m‖²/d "
            "with the Top-k mask chosen on the noisy sum (biased up by Top-k's preference for large noise)"
        ),
        "joined_per_round_mean": np.mean(joined_log, axis=0).tolist() if joined_log else [],
        "round_seconds": seconds,
        "round_seconds_median": float(np.median(seconds)) if seconds else 0.0,
        "groups": {k: list(v) for k, v in asdict(spec).items() if isinstance(v, tuple)},
    }
    if out:
        _write_metrics(metrics, out, cfg.plot)
    return metrics


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not enabled,
        transient=False,
    )


def _write_metrics(metrics: dict[str, Any], out: Path, plot: bool) -> None:
    tmp = out / "metrics.json.tmp"
    tmp.write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, out / "metrics.json")
    with (out / "metrics.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["round", "accuracy", "loss"])
        for h in metrics["history"]:
            w.writerow([h["round"], f"{h['accuracy']:.4f}", f"{h['loss']:.6f}"])
    if plot:
        plot_history(metrics, out / "convergence.png")


def plot_history(metrics: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [h["round"] for h in metrics["history"]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    a1.plot(rounds, [h["accuracy"] for h in metrics["history"]], marker="o", ms=3)
    a1.set_xlabel("communication round")
    a1.set_ylabel("test accuracy (%)")
    a2.plot(rounds, [h["loss"] for h in metrics["history"]], marker="o", ms=3, color="C1")
    a2.set_xlabel("communication round")
    a2.set_ylabel("test loss (cross-entropy)")
    fig.suptitle(f"{metrics['method']} on {metrics['dataset']} (seed {metrics['seed']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
