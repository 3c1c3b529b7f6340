"""``hdp-plan compare``: every method trained on the same data, plan, sampling, clipping and noise code, over
several seeds, reported as GDPFed Table 2 (mean ± sample std of the final test accuracy) with a figure.

One plan holds every method's noise (the planner's four and the baselines asked for); each (method, seed)
run is ``hdp-plan train`` with its own output folder, so a grid can be resumed run by run. Every run uses seeded
noise (``--seeded-noise``): the grid is a reproducible simulation, and its models must not be released.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hdp_planner.io.files import write_json_atomic
from hdp_planner.methods.baselines import BASELINES, BaselineOptions
from hdp_planner.planfile.document import PlanVerificationError, plan_to_dict
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import Plan, Trust
from hdp_planner.planning.trust import SecaggParameters, TrustedServer
from hdp_planner.solving import secured, solve
from hdp_planner.trust.registry import DEFAULT_TRUST, trust_name
from hdp_planner_train.run import options as run_options

SIMULATION = "seeded noise: a reproducible simulation grid; its models must not be released"

PAPER_SETTINGS: dict[str, dict[str, Any]] = {
    "fmnist": {"eps": (0.5, 1.5, 3.0), "rounds": 50, "q": 0.02, "clip": 1.5, "local_steps": 5},
    "svhn": {"eps": (0.5, 1.5, 3.0), "rounds": 100, "q": 0.05, "clip": 1.0, "local_steps": 25},
    "cifar10": {"eps": (2.0, 6.0, 12.0), "rounds": 100, "q": 0.10, "clip": 1.5, "local_steps": 5},
    "shakespeare": {"eps": (0.5, 1.5, 3.0), "rounds": 50, "q": 0.10, "clip": 1.0, "local_steps": 30},
    "digits": {"eps": (0.5, 1.5, 3.0), "rounds": 20, "q": 0.10, "clip": 1.5, "local_steps": 5},
}
"""Plan settings of GDPFed Table 1 / B.2 per dataset (digits: a fast setting), k_m/d = 0.7, 0.8, 0.9.
n is the dataset partition's number of clients."""
PAPER_SPARSITY = (0.7, 0.8, 0.9)
_TABLE2_METHODS = ("p-fedavg", "dp-fedavg", "gdpfed", "pfa", "idp-fedavg", "gdpfed+")
PAPER_TABLE2: dict[str, dict[str, float]] = {
    dataset: dict(zip(_TABLE2_METHODS, values))
    for dataset, values in (
        ("fmnist", (78.96, 71.88, 73.97, 73.67, 74.80, 75.83)),
        ("svhn", (84.13, 40.80, 59.11, 67.51, 66.46, 71.10)),
        ("cifar10", (56.40, 32.10, 34.00, 37.17, 37.49, 38.78)),
        ("shakespeare", (60.62, 34.97, 37.63, 36.69, 37.26, 42.00)),
    )
}
"""GDPFed Table 2, test accuracy (%) (its IDP-FedAvg row does not say which variant: shown for both)."""


def paper_accuracy(dataset: str, method: str) -> float | None:
    key = "idp-fedavg" if method.startswith("idp-fedavg") else method
    return PAPER_TABLE2.get(dataset, {}).get(key)


@dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """The grid: ``methods`` (trainer names) × seeds 0..``seeds``−1, each run with the shared option groups
    (:mod:`hdp_planner_train.run.options`; ``output.out`` the grid's folder, required) and its plan solved for
    ``plan_trust``, the trust model named ``trust.kind`` (under secure aggregation every noised method runs through
    the integer pipeline). ``ledger.url`` None: no ledger (a simulation); otherwise every run is charged to the same
    clients."""

    methods: tuple[str, ...]
    seeds: int
    data: run_options.DataOptions = field(default_factory=run_options.DataOptions)
    model: run_options.ModelOptions = field(default_factory=run_options.ModelOptions)
    noise: run_options.NoiseOptions = field(default_factory=run_options.NoiseOptions)
    trust: run_options.TrustOptions = field(default_factory=lambda: run_options.TrustOptions(kind=DEFAULT_TRUST))
    plan_trust: Trust = field(default_factory=TrustedServer)
    audit: run_options.AuditOptions = field(default_factory=run_options.AuditOptions)
    ledger: run_options.LedgerOptions = field(default_factory=lambda: run_options.LedgerOptions(url=None))
    output: run_options.OutputOptions = field(
        default_factory=lambda: run_options.OutputOptions(out="runs/compare", eval_every=5)
    )

    def __post_init__(self) -> None:
        if self.trust.kind != trust_name(self.plan_trust):
            raise ValueError(f"trust {self.trust.kind} but the plan's trust model is {trust_name(self.plan_trust)}")
        if not self.output.out:
            raise ValueError("a compare grid needs --out")


def check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """Trainer names of ``methods``, validated (each once, in the given order)."""
    from hdp_planner_train.rules.specs import METHOD_NAMES

    names = tuple(dict.fromkeys(m.strip().lower() for m in methods if m.strip()))
    for name in names:
        if name not in METHOD_NAMES:
            raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHOD_NAMES)}")
    if not names:
        raise ValueError("--methods lists no method")
    return names


def prepare_plan(
    cfg: CompareConfig, groups: Groups, config: PlanConfig, options: BaselineOptions, num_classes: int
) -> Path:
    """Solve the plan with every baseline (PFA at the model's d) and ``cfg.plan_trust``'s sections
    (:func:`~hdp_planner.solving.solve`, verified), and write it; every method of the grid must run under the plan's
    trust model. The plan does not depend on which methods the grid trains, so ``--resume`` can add methods to a
    finished grid."""
    from hdp_planner_train.learning.models import model_dim

    d = model_dim(cfg.data.dataset, num_classes, cfg.model.name)
    planned = cfg.plan_trust.parameters
    if planned is not None and planned.model_dim != d:
        raise ValueError(f"the trust model was given d = {planned.model_dim}, this model has d = {d}")
    options = dataclasses.replace(options, model_dim=d)
    try:
        plan = solve(groups, config, baselines=tuple(BASELINES.values()), options=options)
        if not cfg.plan_trust.sees_updates:
            check_grid_folder(cfg, plan_to_dict(plan), whole=False)  # before the secure rows' slow calibration
        plan = secured(plan, cfg.plan_trust)
    except PlanVerificationError as exc:
        raise ValueError(f"internal check failed, no plan written: {exc.problems[0]}") from None
    unplanned = [m for m in cfg.methods if secure_form(plan, m) is False]
    if unplanned:
        hidden = " with cohorts under the caps" if plan.hidden is not None else ""
        raise ValueError(f"{unplanned[0]} has no distributed form under --trust {cfg.trust.kind}{hidden}")
    doc = plan_to_dict(plan)
    check_grid_folder(cfg, doc)
    path = Path(cfg.output.out) / "plan.json"
    write_json_atomic(path, doc)
    return path


def check_grid_folder(cfg: CompareConfig, doc: dict[str, Any], *, whole: bool = True) -> None:
    """Refuse an ``out`` folder that already holds a grid unless ``overwrite`` replaces it, or ``resume`` continues it
    under the same plan (``doc``; not ``whole``: the plan's sections so far, before the secure rows are added): a
    rerun would otherwise silently replace finished results. A grid of another plan is never offered ``--resume``."""
    out = Path(cfg.output.out)
    held = out / "plan.json"
    if cfg.output.overwrite or not (held.is_file() or (out / "results.json").is_file()):
        return
    try:
        old = json.loads(held.read_text())
    except (OSError, ValueError):
        old = None
    ours = {k: v for k, v in doc.items() if k != "versions"}
    theirs = {k: v for k, v in old.items() if k != "versions" and (whole or k in ours)} if isinstance(old, dict) else {}
    if theirs != ours:
        raise ValueError(f"{out} holds a compare grid of another plan: replace it with --overwrite, or choose another "
                         "--out")  # fmt: skip
    if not cfg.output.resume:
        raise ValueError(f"{out} holds a compare grid of this plan: continue it with --resume, or replace it with "
                         "--overwrite")  # fmt: skip


def secure_form(plan: Plan, method: str) -> bool | None:
    """Whether ``method`` (a trainer name) runs under the plan's trust model where the server does not see the
    updates (True), has no form under it (False: the personal methods, rows secure aggregation could not calibrate,
    rows without cohorts in a plan that hides participation), or runs as solved (None: a method without noise, the
    non-private reference, or a plan whose server sees the updates)."""
    from hdp_planner.methods.registry import REGISTRY
    from hdp_planner_train.rules.specs import METHOD_NAMES, method_spec

    if not method_spec(plan, method).private or plan.trust.sees_updates:
        return None
    return REGISTRY[method].family == "fedavg" and plan.trust.form_problem(METHOD_NAMES[method]) is None


def run_grid(cfg: CompareConfig, plan_path: Path, report: Callable[[str], None]) -> list[dict[str, Any]]:
    """Train every (seed, method) under ``plan_path``, read once (reusing finished runs with ``resume``); one row per
    run."""
    from hdp_planner_train.audit.canaries import auditable
    from hdp_planner_train.learning.models import model_name
    from hdp_planner_train.run.output import FINISHED
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.simulator.scaffold import CHECKPOINT
    from hdp_planner_train.simulator.trainer import TrainConfig, run

    run_plan = RunPlan.read(plan_path)  # the one read of the plan file: every run of the grid is bound to it
    plan, plan_hash = run_plan.plan, run_plan.sha256
    partition = {
        "dirichlet": cfg.data.dirichlet,
        "shards": cfg.data.shards,
    }  # a reused run must have trained on the same
    model = model_name(cfg.data.dataset, cfg.model.name)  # ... partition and model
    rows = []
    total = cfg.seeds * len(cfg.methods)
    for seed in range(cfg.seeds):
        for method in cfg.methods:
            folder = Path(cfg.output.out) / method / f"seed{seed}"
            done = folder / "run.json"
            secure = secure_form(plan, method) is True
            audit = cfg.audit.enabled and auditable(plan, method)
            if cfg.output.resume and done.is_file():
                row = json.loads(done.read_text())
                same = row.get("plan_sha256") == plan_hash and row.get("partition") == partition
                same = same and row.get("model", model) == model
                same = same and row.get("dropout_simulated", 0.0) == (cfg.noise.dropout if secure else 0.0)
                if same and ("epsilon_empirical" in row or not audit):
                    rows.append(row)
                    report(f"[{len(rows)}/{total}] {method} seed {seed}: {row['final_accuracy']:.2f}% (reused)")
                    continue
            # --resume continues an interrupted run from its checkpoint and retrains one made with other settings
            unfinished = cfg.output.resume and (folder / CHECKPOINT).is_file() and not (folder / FINISHED).is_file()
            t0 = time.perf_counter()
            metrics = run(
                TrainConfig(
                    method=method,
                    seed=seed,
                    data=cfg.data,
                    model=cfg.model,
                    # seeded noise: a simulation grid, whose models are not released
                    noise=run_options.NoiseOptions(kind="seeded", dropout=cfg.noise.dropout if secure else 0.0),
                    trust=run_options.TrustOptions(),  # the plan's, or a trusted server's for a method without noise
                    audit=dataclasses.replace(cfg.audit, enabled=audit),
                    ledger=cfg.ledger,
                    output=run_options.OutputOptions(
                        out=str(folder),
                        eval_every=cfg.output.eval_every,
                        progress=False,
                        resume=unfinished,
                        overwrite=not unfinished and (cfg.output.overwrite or cfg.output.resume),
                    ),
                ),
                run_plan,
            )
            row = {
                "method": method,
                "seed": seed,
                "trust": trust_name(plan.trust) if secure else DEFAULT_TRUST,
                "hidden_participation": secure and plan.hidden is not None,
                "dropout_simulated": cfg.noise.dropout if secure else 0.0,
                "plan_sha256": plan_hash,
                "partition": partition,
                "model": model,
                "d": metrics["d"],
                "final_accuracy": metrics["final_accuracy"],
                "history": metrics["history"],
                "epsilon_spent": [e["epsilon_spent"] for e in metrics["epsilon_spent"]],
                "noise_lambda_measured": metrics["noise_lambda_measured"],
                "noise_lambda_planned": metrics["noise_lambda_planned"],
                "wall_seconds": time.perf_counter() - t0,
            }
            if "audit" in metrics:
                groups = metrics["audit"]["groups"]
                row["epsilon_empirical"] = [g["epsilon_empirical"] for g in groups]
                row["epsilon_empirical_upper"] = [g["epsilon_empirical_upper"] for g in groups]
                row["audit_verdicts"] = [g["verdict"] for g in groups]
            write_json_atomic(done, row)
            rows.append(row)
            acc, wall = row["final_accuracy"], row["wall_seconds"]
            report(f"[{len(rows)}/{total}] {method} seed {seed}: {acc:.2f}% in {wall:.0f} s")
    return rows


def summarize(dataset: str, methods: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per method: accuracy mean and sample std over seeds, the paper's value, Λ, the largest ε spent, time."""
    out = []
    for method in methods:
        runs = [r for r in rows if r["method"] == method]
        acc = np.array([r["final_accuracy"] for r in runs])
        spent = [r["epsilon_spent"] for r in runs]
        out.append(
            {
                "method": method,
                "seeds": len(runs),
                "trust": runs[0].get("trust", DEFAULT_TRUST),
                "accuracy_mean": float(acc.mean()),
                "accuracy_std": float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
                "paper": paper_accuracy(dataset, method),
                "rounds": max((h["round"] for h in runs[0]["history"]), default=0),
                "paper_rounds": PAPER_SETTINGS.get(dataset, {}).get("rounds"),
                "lambda_measured": float(np.mean([r["noise_lambda_measured"] for r in runs])),
                "lambda_planned": runs[0]["noise_lambda_planned"],
                "epsilon_spent": None if spent[0][0] is None else np.max(spent, axis=0).tolist(),
                "wall_seconds_mean": float(np.mean([r["wall_seconds"] for r in runs])),
                **audit_summary(runs),
            }
        )
    return out


def audit_summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Empirical ε per group, mean over the audited seeds, the largest upper bound, and any verdict that is not
    "consistent" (empty when no run of the method was audited)."""
    audited = [r for r in runs if "epsilon_empirical" in r]
    if not audited:
        return {}
    emp = np.array([[np.nan if e is None else e for e in r["epsilon_empirical"]] for r in audited], dtype=float)
    upper = np.array([[np.nan if e is None else e for e in r["epsilon_empirical_upper"]] for r in audited], dtype=float)
    flagged = sorted({v for r in audited for v in r["audit_verdicts"] if v != "consistent"})
    with np.errstate(all="ignore"):
        return {
            "epsilon_empirical": [None if np.isnan(e) else float(e) for e in np.nanmean(emp, axis=0)],
            "epsilon_empirical_upper": [None if np.isnan(e) else float(e) for e in np.nanmax(upper, axis=0)],
            "audit_flags": flagged,
        }


def trust_record(trust: Trust) -> dict[str, Any]:
    """The trust model a grid was planned for, as results.json records it: its name and secure aggregation's
    parameters (their defaults for a trusted server)."""
    return {"kind": trust_name(trust), **dataclasses.asdict(trust.parameters or SecaggParameters())}


def write_results(cfg: CompareConfig, rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]]) -> list[Path]:
    """results.json (every run and the summary), results.csv (the summary) and comparison.png."""
    out = Path(cfg.output.out)
    write_json_atomic(
        out / "results.json",
        {
            "dataset": cfg.data.dataset,
            "seeds": cfg.seeds,
            "noise_source": "seeded",
            "noise_note": SIMULATION,
            "trust": trust_record(cfg.plan_trust),
            "dropout_simulated": cfg.noise.dropout,
            "summary": summary,
            "runs": rows,
        },
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    keys = ("method", "seeds", "accuracy_mean", "accuracy_std", "paper", "lambda_measured", "lambda_planned")
    writer.writerow([*keys, "epsilon_spent", "wall_seconds_mean"])
    for s in summary:
        eps = "" if s["epsilon_spent"] is None else " ".join(f"{e:.6g}" for e in s["epsilon_spent"])
        writer.writerow([*("" if s[k] is None else s[k] for k in keys), eps, f"{s['wall_seconds_mean']:.1f}"])
    from hdp_planner.io.files import write_text_atomic

    write_text_atomic(out / "results.csv", buf.getvalue())
    return [
        out / "results.json",
        out / "results.csv",
        plot_comparison(cfg.data.dataset, rows, summary, out / "comparison.png"),
    ]


def plot_comparison(
    dataset: str, rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]], path: Path
) -> Path:
    """Test accuracy against rounds (mean ± std over seeds) and final accuracy per method beside the paper's."""
    from hdp_planner.report.plots import pyplot, round_ticks, save_figure

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    try:
        for i, s in enumerate(summary):
            runs = [r for r in rows if r["method"] == s["method"]]
            rounds = [h["round"] for h in runs[0]["history"]]
            acc = np.array([[h["accuracy"] for h in r["history"]] for r in runs])
            mean, std = acc.mean(0), acc.std(0)
            short = len(rounds) < 5  # a few evaluations: markers, so a single point still shows
            ax1.plot(rounds, mean, color=f"C{i}", lw=1.6, marker="o" if short else None, ms=4, label=s["method"])
            ax1.fill_between(rounds, mean - std, mean + std, color=f"C{i}", alpha=0.15, lw=0)
        seeds = summary[0]["seeds"]
        ax1.set_xlabel("communication round")
        ax1.set_xlim(0, max(s["rounds"] for s in summary) + 1)
        round_ticks(ax1)
        ax1.set_ylabel("test accuracy (%)")
        ax1.set_title(f"{dataset}: convergence " + ("(mean ± std over seeds)" if seeds > 1 else "(one seed)"))
        ax1.legend(frameon=False, fontsize=8)
        x = np.arange(len(summary))
        ax2.bar(
            x,
            [s["accuracy_mean"] for s in summary],
            yerr=[s["accuracy_std"] for s in summary] if seeds > 1 else None,
            color=[f"C{i}" for i in x],
            capsize=3,
        )
        paper = [(i, s["paper"]) for i, s in zip(x, summary) if s["paper"] is not None]
        rounds_run, paper_rounds = summary[0]["rounds"], summary[0]["paper_rounds"]
        if paper:
            label = f"GDPFed Table 2 (after {paper_rounds} rounds)"
            ax2.plot(*zip(*paper), ls="none", marker="_", ms=22, mew=2.5, color="black", label=label)
            ax2.legend(frameon=False, fontsize=8, loc="upper right")
        ax2.set_xticks(x, [s["method"] for s in summary], rotation=30, ha="right")
        low = min(s["accuracy_mean"] - s["accuracy_std"] for s in summary)
        high = max([s["accuracy_mean"] + s["accuracy_std"] for s in summary] + [p for _, p in paper])
        ax2.set_ylim(max(0.0, low - 10), high + 0.25 * (high - low + 10))
        ax2.set_ylabel("final test accuracy (%)")
        title = f"final accuracy after {rounds_run} rounds"
        if paper and rounds_run != paper_rounds:
            title += f"\n(the paper's marks are after {paper_rounds} rounds: compare the ranking, not the values)"
        ax2.set_title(title, fontsize=9 if "\n" in title else None)
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)
