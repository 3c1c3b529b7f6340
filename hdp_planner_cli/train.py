"""``hdp-plan train`` and ``compare``: registered by :mod:`hdp_planner_cli.app`. Torch is imported when one runs."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated, Any

import typer

from hdp_planner.trust.registry import DEFAULT_TRUST, trust_class
from hdp_planner_cli.console import err as _err
from hdp_planner_cli.console import fail as _fail
from hdp_planner_cli.console import optional_columns, whole
from hdp_planner_cli.console import out as console
from hdp_planner_cli.console import result_out as _out
from hdp_planner_cli.option_blocks import Opt, option, with_groups
from hdp_planner_cli.options import Bits, CliError, Colluders, Participations, PlanFile, Survivors
from hdp_planner_cli.plan_options import PLAN, BaselineRequest, TrustRequest
from hdp_planner_cli.run_options import (
    AUDIT,
    DATA,
    LEDGER,
    MODEL,
    NOISE,
    OUTPUT,
    PERSONAL,
    SELECTION,
    TRUST,
)
from hdp_planner_train import TORCH_HINT


@with_groups(data=DATA, model=MODEL, noise=NOISE, trust=TRUST.pick("trust", "override_trust"), audit=AUDIT,
             ledger=LEDGER, output=OUTPUT, personal=PERSONAL, selection=SELECTION)  # fmt: skip
def train(
    plan_file: PlanFile,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="p-fedavg | dp-fedavg | gdpfed | gdpfed-op | gdpfed+ | pfa | idp-fedavg-sample | idp-fedavg-scale | "
            "time-adaptive | hdp-pooled (baselines: plan them with solve --methods) | dp2-fedsam | dp-fedsam | "
            "centaur | dp-fedavg-ft (DP²-FedSAM family: the plan's DP-FedAvg noise, one ε) | privacy-aware | "
            "unbiased | power-of-choice (the selection paper: record-level DP-SGD, each client the ε of its plan "
            "group; data sizes |M_k| are treated as public)",
        ),
    ] = "gdpfed+",
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds to run (≤ the plan's T; default T).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    *,
    groups: dict[str, Any],
) -> None:
    """Train a federated model under PLAN_FILE's noise (GDPFed Algorithms 1-2) and report accuracy and ε spent."""
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail(f"hdp-plan train needs PyTorch: {TORCH_HINT}")
    output, noise = groups["output"], groups["noise"]
    out = output.out
    if (output.plot or output.resume) and not out:
        _fail("--plot and --resume need --out DIR")
    from hdp_planner_train.run.noise import SEEDED_NOTE
    from hdp_planner_train.simulator.checkpoint import discard
    from hdp_planner_train.simulator.trainer import TrainConfig, run

    scratch = None if out else scratch_folder()  # no --out: the checkpoint kept in a folder of its own meanwhile
    if scratch is not None:  # nothing asked to be written: a seeded simulation unless told otherwise, as before
        noise = replace(noise, kind=noise.kind or "seeded")
    cfg = TrainConfig(method=method, rounds=rounds, seed=seed,
                      **{**groups, "noise": noise, "output": replace(output, out=out or str(scratch),
                                                                     progress=_out.is_terminal)})  # fmt: skip
    earlier = checkpoint_stamp(out or str(scratch))  # an earlier run's checkpoint there is not this run's
    try:
        metrics = run(cfg, plan_file)
    except (ValueError, OSError, KeyError) as exc:
        if scratch is not None:
            discard(scratch)
        _fail(str(exc) or type(exc).__name__)
        return
    except KeyboardInterrupt:
        interrupted(out or str(scratch), earlier=earlier, scratch=scratch is not None, noise=noise.kind)
    if scratch is not None:
        discard(scratch)
    eps = ", ".join(
        "∞" if e["epsilon_spent"] is None else f"{e['epsilon_spent']:.3g}" for e in metrics["epsilon_spent"]
    )
    diagnostics = (
        f"; Λ measured {metrics['noise_lambda_measured']:.4g} (planned {metrics['noise_lambda_planned']:.4g}); "
        f"median round {metrics['round_seconds_median']:.2f}s"
        if "noise_lambda_measured" in metrics
        else f"; Λ planned {metrics['noise_lambda_planned']:.4g}"
    )
    _out.print(
        f"{metrics['method']} on {metrics['dataset']}: accuracy {metrics['final_accuracy']:.2f}% after "
        f"{metrics['rounds']} rounds; ε spent per group: {eps}{diagnostics}",
        highlight=False,
    )
    if metrics.get("noise_source") == "seeded":
        _err.print(f"note: {SEEDED_NOTE}", highlight=False, soft_wrap=whole(_err))
    elif "ledger" in metrics:
        _out.print(f"privacy ledger {metrics['ledger']}", highlight=False, markup=False)
    if "group_accuracy" in metrics:
        accs = ", ".join(f"{a:.2f}%" for a in metrics["group_accuracy"])
        _out.print(f"accuracy on each group's classes: {accs}", highlight=False)
    if "client_privacy" in metrics:  # the selection paper's selection methods: both noise rules, ε spent per group
        for line in selection_lines(metrics):
            _out.print(line, highlight=False)
    if "audit" in metrics:
        from hdp_planner.audit import audit_lines

        for line in audit_lines(metrics["audit"]):
            _out.print(line, highlight=False)
    if out:
        _out.print(f"metrics written to {out}/metrics.json", highlight=False)
    else:
        typer.echo(json.dumps({k: metrics[k] for k in ("final_accuracy", "epsilon_spent")}))  # one parseable line


COMPARE_OUTPUT = OUTPUT.pick(
    "out",
    "resume",
    "overwrite",
    out=Opt(option("--out", str, "Folder for plan.json, one folder per run, results."), "runs/compare"),
    resume=Opt(option("--resume", bool, "Continue the grid in --out: reuse finished runs, resume an interrupted one."),
               False),
    overwrite=Opt(option("--overwrite", bool, "Replace the grid already in --out (its runs and results)."), False),
)  # fmt: skip
"""``compare``'s output: the grid's folder, continued or replaced as a whole."""


COMPARE_PLAN = PLAN.pick(
    "eps", "n", "sizes", "rounds", "q", "delta", "clip", "lr", "local_steps", "sparsity", "fixed_q", "accountant",
    "sigma_model", "min_share",
    eps=Opt(option("--eps", str | None, "ε per group [the paper's for the dataset].")),
    n=Opt(option("--n", int | None, "Clients n [the partition's].")),
    sizes=Opt(option("--sizes", str | None, "Clients per group [even split].")),
    rounds=Opt(Annotated[int | None, typer.Option("--rounds", "-T", help="Rounds T [the paper's].")]),
    q=Opt(option("--q", float | None, "Expected participation ratio q [the paper's].")),
    delta=Opt(option("--delta", float | None, "δ [1/n^1.1].")),
    clip=Opt(Annotated[float | None, typer.Option("--clip", "-C", help="Clipping threshold C [the paper's].")]),
    lr=Opt(option("--lr", float, "Local learning rate η."), 0.1),
    local_steps=Opt(option("--local-steps", int | None, "Local steps τ [the paper's].")),
    sparsity=Opt(option("--sparsity", str | None, "GDPFed+ k_m/d [0.7,0.8,0.9].")),
    fixed_q=Opt(option("--fixed-q", str | None, "GDPFed-op/+ q_m instead of Problem 1.")),
    accountant=Opt(option("--accountant", str, "rdp | pld | closed-form."), "rdp"),
    sigma_model=Opt(option("--sigma-model", str, "bound | accountant."), "bound"),
)  # fmt: skip
"""``compare``'s planning options: what is not given is the paper's for the dataset (or the partition's)."""


@with_groups(
    plan=COMPARE_PLAN,
    data=DATA.pick("dataset", "data_dir", "dirichlet", "shards"),
    model=MODEL.pick("model", "engine", "precision", "device"),
    noise=NOISE.pick("dropout"),
    trust=TRUST.pick("trust", "hide_sample", "max_cohort", "cohort_multiple", trust=Opt(option(
        "--trust", str, "server, or secagg: plan for secure aggregation and run every noised method through its exact "
        "integer pipeline (p-fedavg stays the non-private reference).",
    ), DEFAULT_TRUST)),
    audit=AUDIT.pick("audit"),
    ledger=LEDGER.pick("ledger", ledger=Opt(option(
        "--ledger", str | None, "Privacy ledger charging every run to the same clients: an SQLAlchemy URL or an SQLite "
        "file [off: the grid is a seeded simulation].",
    ))),
    output=COMPARE_OUTPUT,
)  # fmt: skip
def compare(
    methods: Annotated[
        str, typer.Option("--methods", help="Methods to train, comma-separated (train's --method names).")
    ] = "p-fedavg,dp-fedavg,gdpfed,pfa,idp-fedavg-sample,gdpfed+",
    seeds: Annotated[int, typer.Option("--seeds", help="Runs per method, seeds 0..S-1.")] = 3,
    *,
    groups: dict[str, Any],
    pfa_dim: Annotated[int, typer.Option("--pfa-dim", help="PFA: subspace dimension k.")] = 1,
    pfa_window: Annotated[int, typer.Option("--pfa-window", help="PFA: public noisy sums spanning it.")] = 10,
    pfa_subspace: Annotated[str, typer.Option("--pfa-subspace", help="PFA: lanczos | randomized.")] = "lanczos",
    saving_rounds: Annotated[
        int | None, typer.Option("--saving-rounds", help="Time-adaptive: saving rounds [T/2].")
    ] = None,
    saving_noise: Annotated[
        float, typer.Option("--saving-noise", help="Time-adaptive: σ multiplier while saving.")
    ] = 2.0,
    eval_every: Annotated[
        int | None,
        typer.Option("--eval-every", help="Evaluate every this many rounds, and after the last [T/10, at most 5]."),
    ] = None,
    bits: Bits = 20,
    survivors: Survivors = 0.9,
    colluders: Colluders = 0,
    participations: Participations = None,
) -> None:
    """Train several methods on one plan over several seeds and print GDPFed Table 2 (mean ± std), with a figure."""
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail(f"hdp-plan compare needs PyTorch: {TORCH_HINT}")
    plan, data, model, noise, trust, output = (groups[key] for key in ("plan", "data", "model", "noise", "trust",
                                                                       "output"))  # fmt: skip
    from hdp_planner_train.learning.engines import PRECISIONS
    from hdp_planner_train.learning.federated import load_federated
    from hdp_planner_train.learning.models import model_dim, model_name
    from hdp_planner_train.run.output import output_folder
    from hdp_planner_train.simulator.compare import (
        PAPER_SETTINGS,
        PAPER_SPARSITY,
        SIMULATION,
        CompareConfig,
        check_methods,
        prepare_plan,
        run_grid,
        summarize,
        write_results,
    )

    done: list[str] = []  # the runs finished (or reused) so far, for an interrupted grid's message
    total = 0
    dataset, out = data.dataset, output.out
    try:
        if dataset not in PAPER_SETTINGS:
            raise ValueError(f"--dataset must be one of {', '.join(PAPER_SETTINGS)}, got {dataset!r}")
        if seeds < 1:
            raise ValueError(f"--seeds must be ≥ 1, got {seeds}")
        if model.precision not in PRECISIONS:
            raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {model.precision!r}")
        if not 0 <= noise.dropout < 1:
            raise ValueError(f"--dropout must lie in [0, 1), got {noise.dropout}")
        secure = not trust_class(trust.kind).sees_updates  # the clients add the noise under secure aggregation
        if noise.dropout and not secure:
            raise ValueError("--dropout needs --trust secagg")
        chosen = check_methods(methods.split(","))
        total = seeds * len(chosen)
        model_name(dataset, model.name)
        paper = PAPER_SETTINGS[dataset]
        clients = None if plan.n is None or dataset == "shakespeare" else plan.n
        partition = load_federated(
            dataset, data.data_dir, clients=clients, dirichlet=data.dirichlet, shards=data.shards
        )
        d = model_dim(dataset, partition.num_classes, model.name) if secure else None
        request = TrustRequest(trust=trust.kind, bits=bits, survivors=survivors, colluders=colluders,
                               participations=participations, hide_sample=trust.hide_sample,
                               max_cohort=trust.max_cohort, cohort_multiple=trust.cohort_multiple)  # fmt: skip
        trust_model = request.requested(d)
        if output.resume and output.overwrite:
            raise ValueError("--resume continues the grid in --out, --overwrite replaces it: choose one")
        request = replace(
            plan,
            eps=plan.eps or ",".join(f"{e:g}" for e in paper["eps"]),
            n=partition.n_clients if plan.n is None else plan.n,
            rounds=paper["rounds"] if plan.rounds is None else plan.rounds,
            q=paper["q"] if plan.q is None else plan.q,
            clip=paper["clip"] if plan.clip is None else plan.clip,
            local_steps=paper["local_steps"] if plan.local_steps is None else plan.local_steps,
            sparsity=plan.sparsity or ",".join(map(str, PAPER_SPARSITY)),
        )
        plan_groups, config = request.build()
        _, options = BaselineRequest(pfa_dim=pfa_dim, pfa_window=pfa_window, pfa_subspace=pfa_subspace,
                                     saving_rounds=saving_rounds, saving_noise=saving_noise).build()  # fmt: skip
        if partition.n_clients != config.n:
            raise ValueError(f"--n {config.n} but the {dataset} partition has {partition.n_clients} clients")
        every = max(1, min(5, config.rounds // 10)) if eval_every is None else eval_every
        cfg = CompareConfig(methods=chosen, seeds=seeds, plan_trust=trust_model, data=data, model=model, noise=noise,
                            trust=trust, audit=groups["audit"], ledger=groups["ledger"],
                            output=replace(output, eval_every=every))  # fmt: skip

        def report(line: str) -> None:
            done.append(line)
            _out.print(line, highlight=False)

        with output_folder(out):
            plan_path = prepare_plan(cfg, plan_groups, config, options, partition.num_classes)
            _out.print(f"note: {SIMULATION}", highlight=False)
            rows = run_grid(cfg, plan_path, report)
            summary = summarize(dataset, cfg.methods, rows)
            paths = write_results(cfg, rows, summary)
    except (ValueError, OSError, KeyError, CliError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return
    except KeyboardInterrupt:
        _err.print(f"interrupted after {len(done)} of {total} runs; run the same command with --resume to continue",
                   highlight=False, markup=False)  # fmt: skip
        raise typer.Exit(130) from None

    console.print(render_summary(dataset, seeds, summary))
    for path in paths:
        console.print(f"written: {path}", highlight=False)


def selection_lines(metrics: dict[str, Any]) -> list[str]:
    """What ``train`` prints for a selection method: per group, the selection mass, both noise multipliers (median
    over the clients that trained) and the ε spent range."""
    lines = [f"privacy model: {metrics['privacy_model']}; noise rule {metrics['noise_rule']}"]
    for g in metrics["epsilon_spent"]:
        lines.append(
            f"group {g['group']} (ε = {g['epsilon_budget']:g}, {g['clients_trained']}/{g['clients']} clients trained): "
            f"Σp = {g['p_sum']:.3f} (unbiased {g['p_unbiased_sum']:.3f}); "
            f"z paper {g['noise_multiplier_paper_median']:.3g}, exact {g['noise_multiplier_exact_median']:.3g}; "
            f"ε spent {g['epsilon_spent_min']:.3g} to {g['epsilon_spent_max']:.3g}"
        )
    return lines


def render_summary(dataset: str, seeds: int, summary: list[dict]):
    """GDPFed Table 2 style: accuracy mean ± std beside the paper's, Λ, ε spent, time per run."""
    from rich import box
    from rich.table import Table

    rounds, paper_rounds = summary[0]["rounds"], summary[0]["paper_rounds"]
    spread = f"over {seeds} seeds (mean ± std)" if seeds > 1 else "one seed"
    shown = all(trust_class(s["trust"]).sees_updates for s in summary)
    secure = "" if shown else ", noised methods under secure aggregation"
    title = f"{dataset}: final test accuracy (%) after {rounds} rounds, {spread}{secure}"
    table = Table(box=box.SIMPLE_HEAD, title=title)
    if any(s["paper"] is not None for s in summary) and rounds != paper_rounds:
        table.caption = f"the paper's values are after {paper_rounds} rounds: compare the ranking, not the values"
    audited = any("epsilon_empirical" in s for s in summary)
    columns = ("method", "ours", "paper", "Λ measured / planned", "ε spent per group")
    for col in (*columns, *(("ε̂ audited (max upper)",) if audited else ()), "s per run"):
        table.add_column(col, justify="right", no_wrap=col == "method")
    optional_columns(table, "s per run", "Λ measured / planned")  # both in results.json
    for s in summary:
        eps = "∞ (no noise)" if s["epsilon_spent"] is None else ", ".join(f"{e:.3g}" for e in s["epsilon_spent"])
        lam = "—" if s["epsilon_spent"] is None else f"{s['lambda_measured']:.3g} / {s['lambda_planned']:.3g}"
        audit = (_audit_cell(s),) if audited else ()
        table.add_row(
            s["method"],
            f"{s['accuracy_mean']:.2f} ± {s['accuracy_std']:.2f}" if s["seeds"] > 1 else f"{s['accuracy_mean']:.2f}",
            "—" if s["paper"] is None else f"{s['paper']:.2f}",
            lam,
            eps,
            *audit,
            f"{s['wall_seconds_mean']:.0f}",
        )
    return table


def _audit_cell(s: dict) -> str:
    """Empirical ε per group (upper bound) and a flag when any seed's audit was not consistent."""
    if "epsilon_empirical" not in s:
        return "—"
    cells = [
        "—" if e is None else f"{e:.3g} ({'—' if u is None else f'{u:.3g}'})"
        for e, u in zip(s["epsilon_empirical"], s["epsilon_empirical_upper"])
    ]
    return ", ".join(cells) + (" UNDER-NOISED" if any(f.startswith("UNDER") for f in s["audit_flags"]) else "")


def scratch_folder():
    """A fresh folder for the checkpoint of a run without ``--out`` (its name is printed if the run is stopped)."""
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="hdp-train-"))


def checkpoint_stamp(out: str) -> tuple[int, int, int] | None:
    """Which checkpoint ``out`` holds (a save replaces the file: its inode, size and time change), None if none."""
    from pathlib import Path

    from hdp_planner_train.simulator.scaffold import CHECKPOINT

    saved = Path(out) / CHECKPOINT
    if not saved.is_file():
        return None
    stat = saved.stat()
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def interrupted(out: str, *, earlier: tuple[int, int, int] | None, scratch: bool, noise: str | None) -> None:
    """Ctrl-C or SIGTERM during ``train``: say in one line what this run kept (a checkpoint it wrote, never the one an
    earlier run left, stamped ``earlier``) and how to go on, exit status 130. A ``scratch`` folder (no ``--out``) is
    kept only if it holds a checkpoint, and named; resuming it takes the noise source it ran with."""
    from pathlib import Path

    from hdp_planner_train.simulator.checkpoint import discard

    if checkpoint_stamp(out) not in (None, earlier):
        source = f"--{noise or 'seeded'}-noise"
        again = f"add --out {out} --resume {source}" if scratch else "run the same command with --resume"
        message = f"interrupted: the rounds run are checkpointed in {out}; to continue, {again}"
    else:
        if scratch:
            discard(Path(out))
        message = "interrupted before the first round was checkpointed"
    _err.print(message, highlight=False, markup=False, soft_wrap=whole(_err))
    raise typer.Exit(130)
