"""``hdp-plan flower``: registered by :mod:`hdp_planner_cli.app`. Imports flwr and torch only when the command runs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hdp_planner_cli.console import fail as _fail
from hdp_planner_cli.console import result_out as _out
from hdp_planner_cli.option_blocks import Opt, option, with_groups
from hdp_planner_cli.options import PlanFile
from hdp_planner_cli.run_options import AUDIT, DATA, LEDGER, OUTPUT, TRUST


@with_groups(
    data=DATA.pick("dataset", "data_dir", "clients", "dirichlet"),
    trust=TRUST.pick("trust", "override_trust", "sparse_graph", trust=Opt(option(
        "--trust", str | None,
        "server: clients send clipped updates, the server sees them and adds the noise | secagg: Flower's SecAgg+ per "
        "group, clients add distributed discrete Gaussian shares; the server sees masked vectors and each group's "
        "noisy sum (needs a plan solved with --trust secagg) [the plan's]",
    ))),
    audit=AUDIT,
    ledger=LEDGER.pick(ledger=Opt(option(
        "--ledger", str, "Privacy ledger: an SQLAlchemy URL or SQLite file, none, or auto (the default).",
    ), "auto"), federation="flower"),
    output=OUTPUT.pick("out", "overwrite", out=Opt(option("--out", str | None, "Folder for metrics.json/.csv.")),
                       overwrite=Opt(option("--overwrite", bool, "Replace the finished run in --out."), False)),
)  # fmt: skip
def flower(
    plan_file: PlanFile,
    method: Annotated[
        str,
        typer.Option(
            "--method",
            help="dp-fedavg | gdpfed | gdpfed-op | gdpfed+ | pfa | idp-fedavg-sample | idp-fedavg-scale | "
            "time-adaptive | hdp-pooled (the plan's client-level rows)",
        ),
    ] = "gdpfed+",
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds to run (≤ the plan's T) [T].")] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="Data partition, initial model, local batches (never the noise).")
    ] = 0,
    cpus_per_client: Annotated[float, typer.Option("--cpus-per-client", help="Ray CPUs per virtual node.")] = 1.0,
    diagnostics: Annotated[
        bool,
        typer.Option(
            "--diagnostics",
            help="Simulation only: record per-round joined counts, measured noise and round times (they reveal who "
            "took part: never with a model you release).",
        ),
    ] = False,
    node_state: Annotated[
        str | None,
        typer.Option(
            "--node-state",
            help="secagg: folder where the simulated nodes keep their participation counts and spent budgets (each "
            "refuses past the plan's cap K or its budget, across runs) [$XDG_DATA_HOME/hdp-planner/nodes].",
        ),
    ] = None,
    in_process: Annotated[
        bool,
        typer.Option(
            "--in-process",
            help="Run every node in this process, one after another, instead of on Ray (the same ServerApp and "
            "ClientApp code; slower per round with many nodes, no start-up, easy to debug).",
        ),
    ] = False,
    no_masks: Annotated[
        bool,
        typer.Option(
            "--no-masks",
            help="secagg, simulations only (needs --diagnostics): the clients' messages summed in the clear instead "
            "of through SecAgg+, for long accuracy runs (the masks cancel exactly: the same sums, bit for bit).",
        ),
    ] = False,
    *,
    groups: dict[str, Any],
) -> None:
    """Train a plan's method through Flower's simulation engine (Ray), one virtual node per client; offline."""
    from hdp_planner_flower import require_flwr

    try:
        require_flwr()
        import torch  # noqa: F401
    except (RuntimeError, ImportError) as exc:
        _fail(str(exc) if isinstance(exc, RuntimeError) else "hdp-plan flower needs PyTorch: install the flower extra")
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_flower.simulation import run_flower

    out = groups["output"].out
    cfg = FlowerConfig(plan=plan_file, method=method, rounds=rounds, seed=seed, **groups,
                       cpus_per_client=cpus_per_client, diagnostics=diagnostics, node_state=node_state,
                       in_process=in_process, masks=not no_masks)  # fmt: skip
    try:
        metrics = run_flower(cfg, progress=lambda line: _out.print(line, highlight=False, markup=False))
    except (ValueError, OSError, KeyError) as exc:
        _fail(str(exc) or type(exc).__name__)
        return
    except KeyboardInterrupt:
        interrupted(out)
    eps = ", ".join(f"{e['epsilon_spent']:.3g}" for e in metrics["epsilon_spent"])
    if "secagg" in metrics:  # the distributed mechanism's accounting, against third parties and the server
        sa = metrics["secagg"]
        third = sa.get("epsilon_third_parties")  # a cohort run reports its ε against the server, its budget
        eps = ("" if third is None else ", ".join(f"{e:.3g}" for e in third) + " against third parties, ") + (
            ", ".join(f"{e:.3g}" for e in sa["epsilon_server"]) + " against the server"
            + (" (participation hidden)" if sa.get("hidden_participation") else "")
        )  # fmt: skip
    if "noise_lambda_measured" in metrics:  # --diagnostics (a simulation)
        lam = metrics["noise_lambda_measured"]
        noise = (
            f"Λ measured {'n/a (noise added by clients)' if lam is None else f'{lam:.4g}'} "
            f"(planned {metrics['noise_lambda_planned']:.4g}); median round {metrics['round_seconds_median']:.2f}s"
        )
    else:
        noise = f"Λ planned {metrics['noise_lambda_planned']:.4g}"
    _out.print(
        f"{metrics['method']} on {metrics['dataset']} (Flower {metrics['flwr_version']}, trust {metrics['trust']}): "
        f"accuracy {metrics['final_accuracy']:.2f}% after {metrics['rounds']} rounds; ε spent per group: {eps}; "
        + noise
        + (f"; {metrics['stopped']}" if metrics["stopped"] else ""),
        highlight=False,
        markup=False,
    )
    if "audit" in metrics:
        from hdp_planner.audit import audit_lines

        for line in audit_lines(metrics["audit"]):
            _out.print(line, highlight=False, markup=False)
    if out:
        _out.print(f"metrics written to {out}/metrics.json", highlight=False, markup=False)


def interrupted(out: str | None) -> None:
    """Ctrl-C or SIGTERM: Ray and every process it started are already stopped, the temporary folders removed; say
    so in one line and end the process now, with status 130. Flower's ServerApp thread waits for replies that will
    never come and would keep the interpreter alive, so the process exits directly."""
    import os
    import sys

    from hdp_planner_cli.console import err, whole

    where = f"; nothing was written to {out}" if out else ""
    err.print(f"interrupted: the Flower run stopped, its processes too{where}", highlight=False, markup=False,
              soft_wrap=whole(err))  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
