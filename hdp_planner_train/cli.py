"""``hdp-plan train``: registered by :mod:`hdp_planner.cli`. Imports torch only when the command runs."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from hdp_planner_train import TORCH_HINT

_err = Console(stderr=True)
_out = Console()


def _fail(message: str) -> None:
    _err.print(
        f"[bold red]error:[/] {message.splitlines()[0] if message else 'failed'}", highlight=False, soft_wrap=True
    )
    raise typer.Exit(2)


def train(
    plan_file: Annotated[str, typer.Argument(help="A plan.json written by `hdp-plan solve`.")],
    method: Annotated[
        str, typer.Option("--method", help="p-fedavg | dp-fedavg | gdpfed | gdpfed-op | gdpfed+")
    ] = "gdpfed+",
    dataset: Annotated[
        str, typer.Option("--dataset", help="fmnist | digits | cifar10 | svhn | shakespeare")
    ] = "fmnist",
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="Where the dataset's files are.")] = None,
    dirichlet: Annotated[
        float | None,
        typer.Option("--dirichlet", help="Dirichlet(α) label skew (default IID; natural for shakespeare)."),
    ] = None,
    clients: Annotated[
        int | None, typer.Option("--clients", help="Clients to split the data among (default: the paper's n).")
    ] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds to run (≤ the plan's T; default T).")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda")] = "auto",
    eval_every: Annotated[int, typer.Option("--eval-every", help="Evaluate every this many rounds.")] = 1,
    out: Annotated[str | None, typer.Option("--out", help="Folder for metrics.json/.csv, plot, checkpoint.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="vectorized (torch.func) | loop (reference)")] = "vectorized",
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Local batch (default per dataset).")] = None,
    momentum: Annotated[
        float | None, typer.Option("--momentum", help="Local SGD momentum (default per dataset).")
    ] = None,
    lr_decay: Annotated[float, typer.Option("--lr-decay", help="Learning rate × decay^round.")] = 0.99,
    plot: Annotated[bool, typer.Option("--plot", help="Write convergence.png to --out.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the checkpoint in --out.")] = False,
) -> None:
    """Train a federated model under PLAN_FILE's noise (GDPFed Algorithms 1-2) and report accuracy and ε spent."""
    try:
        import torch  # noqa: F401
    except ImportError:
        _fail(f"hdp-plan train needs PyTorch: {TORCH_HINT}")
    if (plot or resume) and not out:
        _fail("--plot and --resume need --out DIR")
    from hdp_planner_train.trainer import TrainConfig, run

    cfg = TrainConfig(
        plan=plan_file,
        method=method,
        dataset=dataset,
        data_dir=data_dir,
        dirichlet=dirichlet,
        rounds=rounds,
        seed=seed,
        device=device,
        eval_every=eval_every,
        out=out,
        engine=engine,
        batch_size=batch_size,
        momentum=momentum,
        lr_decay=lr_decay,
        clients=clients,
        plot=plot,
        resume=resume,
        progress=_out.is_terminal,
    )
    try:
        metrics = run(cfg)
    except (ValueError, OSError, KeyError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return
    eps = ", ".join(
        "∞" if e["epsilon_spent"] is None else f"{e['epsilon_spent']:.3g}" for e in metrics["epsilon_spent"]
    )
    _out.print(
        f"{metrics['method']} on {metrics['dataset']}: accuracy {metrics['final_accuracy']:.2f}% after "
        f"{metrics['rounds']} rounds; ε spent per group: {eps}; Λ measured {metrics['noise_lambda_measured']:.4g} "
        f"(planned {metrics['noise_lambda_planned']:.4g}); median round {metrics['round_seconds_median']:.2f}s",
        highlight=False,
    )
    if out:
        _out.print(f"metrics written to {out}/metrics.json", highlight=False)
    else:
        _out.print(json.dumps({k: metrics[k] for k in ("final_accuracy", "epsilon_spent")}), highlight=False)
