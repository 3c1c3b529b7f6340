"""``hdp-plan deploy local``: a plan on Flower's deployment engine, a SuperLink and one SuperNode per client as
separate processes on this machine (TLS, node authentication). Imports flwr and torch only when the command runs."""

from __future__ import annotations

from typing import Annotated

import typer

from hdp_planner_cli.command import PlainCommand
from hdp_planner_cli.console import fail as _fail
from hdp_planner_cli.console import result_out as _out
from hdp_planner_cli.options import DatasetOpt, GroupsFile, PlanFile

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None)


def _say(line: str) -> None:
    _out.print(line, highlight=False, markup=False)


@app.command("local", cls=PlainCommand)
def local(
    plan_file: PlanFile,
    nodes: Annotated[int, typer.Option("--nodes", help="SuperNodes to start: the plan's n, one per client.")],
    trust: Annotated[
        str,
        typer.Option("--trust", help="Trust models to run in turn, comma-separated: server, secagg [the plan's]."),
    ] = "",
    method: Annotated[str, typer.Option("--method", help="The plan's row to train.")] = "gdpfed+",
    dataset: DatasetOpt = "digits",
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds of each run (≤ the plan's T) [T].")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Data partition, initial model, local batches.")] = 0,
    groups: GroupsFile = None,
    folder: Annotated[
        str | None,
        typer.Option(
            "--folder",
            help="Where certificates, keys, logs and the app go [a temporary folder, removed "
            "after a run that succeeded].",
        ),
    ] = None,
    node_state: Annotated[
        str | None,
        typer.Option(
            "--node-state",
            help="The nodes' state folder: participation counts and spent budgets per client [with --groups: "
            "$XDG_DATA_HOME/hdp-planner/nodes; without, simulated clients of public data: --folder's nodes].",
        ),
    ] = None,
    out: Annotated[str | None, typer.Option("--out", help="Metrics of each run in OUT/TRUST/metrics.json.")] = None,
    ledger: Annotated[
        str,
        typer.Option(
            "--ledger",
            help="Privacy ledger: an SQLAlchemy URL or SQLite file, none, or auto (the default: "
            "none for simulated clients of public data, without --groups).",
        ),
    ] = "auto",
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace the metrics of earlier runs in --out.", show_default=False)
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each run may take.")] = 600.0,
    round_timeout: Annotated[
        float, typer.Option("--round-timeout", help="Seconds the server waits for a round's replies (then dropouts).")
    ] = 120.0,
    warm: Annotated[
        bool,
        typer.Option(
            "--warm/--no-warm",
            help="ClientApp processes forked from one process that has imported the node's app, or (--no-warm) a "
            "new Python process per message started by each SuperNode's own SuperExec, Flower's default.",
        ),
    ] = True,
) -> None:
    """Run a plan on Flower's deployment engine on this machine: a SuperLink and one SuperNode per client as
    separate processes over TLS with node authentication; every process stopped afterwards, by PID."""
    from hdp_planner_flower import require_flwr

    try:
        require_flwr()
        import torch  # noqa: F401
    except (RuntimeError, ImportError) as exc:
        _fail(str(exc) if isinstance(exc, RuntimeError) else "hdp-plan deploy needs PyTorch: install the flower extra")
    from hdp_planner_flower.deploy import DeployError
    from hdp_planner_flower.deploy_local import DeployConfig, deploy_local

    cfg = DeployConfig(plan=plan_file, nodes=nodes, trust=tuple(t.strip() for t in trust.split(",") if t.strip()),
                       method=method, dataset=dataset, rounds=rounds, seed=seed, groups=groups, folder=folder,
                       node_state=node_state, out=out, timeout=timeout, round_timeout=round_timeout,
                       ledger="" if ledger == "auto" else ledger, overwrite=overwrite, warm=warm)  # fmt: skip
    try:  # SIGTERM stops the command as Ctrl-C does (the app's): its processes too
        results = deploy_local(cfg, progress=_say)
    except (ValueError, OSError, DeployError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return
    except KeyboardInterrupt:
        _fail("interrupted: every process the deployment started was stopped")
        return
    dep = results.pop("deployment")
    for name, m in results.items():
        eps = ", ".join(f"{e['epsilon_spent']:.3g}" for e in m["epsilon_spent"])
        _say(f"{m['method']} on {m['dataset']}, {nodes} SuperNodes, trust {name}: accuracy "
             f"{m['final_accuracy']:.2f}% after {m['rounds']} rounds in {m['deployment_run_seconds']:.1f} s; "
             f"ε spent per group: {eps}")  # fmt: skip
    _say(f"stopped {dep['processes_stopped']} processes, by PID; {len(dep['processes_left'])} left"
         + (f"; metrics in {out}/TRUST/metrics.json" if out else ""))  # fmt: skip
