"""The measured tables of the tutorials, rerun from scratch: each experiment plans, trains every row with
``hdp-plan train`` (seeded simulations) or ``hdp-plan flower`` and records its table into
``benchmarks/results/NAME.json``.

    python examples/experiments.py --list
    python examples/experiments.py personal-digits [--record] [--out runs/experiments] [--resume]

Every number in the table is read from the runs' ``metrics.json``; the paper values printed beside some rows are
the papers' own, as targets. A long grid (``table2-paper-cnn``) records every finished run as it goes: with
``--record`` its result file is rewritten after each run, with the run's accuracy, minutes and load average in a
table of runs, and ``--resume`` takes a run from that table when its folder is gone, so a fresh checkout continues
from the committed record.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hdp_planner.report.results import RESULTS_DIR, Result, Table, read_result, render_result, write_result
from hdp_planner_train.learning.models import model_dim
from hdp_planner_train.simulator.compare import paper_accuracy

ROOT = Path(__file__).resolve().parents[1]
FMNIST_PLAN = ("--eps", "0.5,1.5,3.0", "--n", "6000", "--rounds", "50", "--q", "0.02", "--clip", "1.5",
               "--local-steps", "5", "--sparsity", "0.7,0.8,0.9", "--min-share", "0", "--methods", "all")  # fmt: skip
SKEW_PLAN = ("--eps", "0.5,1.5,3.0", "--n", "3000", "--rounds", "30", "--q", "0.02", "--clip", "1.5", "--local-steps",
             "5", "--sparsity", "0.7,0.8,0.9", "--min-share", "0", "--methods", "all",
             "--model-dim", "26010")  # fmt: skip
SKEW = ("--dataset", "fmnist", "--clients", "3000", "--group-classes", "0,1,2,3/4,5,6/7,8,9")
SECAGG_PLAN = (*FMNIST_PLAN[:-2], "--methods", "gdpfed+", "--trust", "secagg", "--bits", "20", "--model-dim", "26010")
SECAGG = ("--method", "gdpfed+", "--dataset", "fmnist", "--trust", "secagg")
PAPER_CNN_DIM = model_dim("fmnist", model="cnn2-paper")
PAPER_CNN = ("--dataset", "fmnist", "--model", "cnn2-paper", "--eval-every", "5")
SMALL_CNN = ("--dataset", "fmnist", "--eval-every", "5")
TABLE2_ROWS = ("p-fedavg", "dp-fedavg", "gdpfed", "gdpfed-op", "gdpfed+", "pfa", "idp-fedavg-sample",
               "idp-fedavg-scale", "hdp-pooled")  # fmt: skip


def points_from(paper: str, ours: str) -> str:
    """``ours`` (a mean, or "mean ± std") less ``paper``, in points; "—" where either is missing."""
    try:
        return f"{float(ours.split(' ')[0]) - float(paper):+.2f}"
    except ValueError:
        return "—"


def table2_cells(method: str, trust: str) -> tuple[str, ...]:
    """A Table 2 row's leading cells: the method, the trust model, the paper's FMNIST accuracy, ours with the small
    CNN (the ``table2_fmnist`` result file, or ``secagg-bits`` for a secure row, read when the table is built) and its
    distance from the paper's."""
    paper = paper_accuracy("fmnist", method)
    paper_cell, small = "—" if paper is None else f"{paper:.2f}", "—"
    name, pick = ("table2_fmnist", lambda r: r[1]) if trust == "server" else ("secagg-bits", lambda r: r[-1])
    path = RESULTS_DIR / f"{name}.json"
    if path.is_file():
        rows = [r for t in read_result(path).tables for r in t.rows if r[0] == method]
        small = next((pick(r) for r in rows if trust == "server" or r[1] == trust), "—")
    return method, trust, paper_cell, small, points_from(paper_cell, small)


def table2_row(
    method: str, trust: str, plan: str, extra: tuple[str, ...], seeds: tuple[int, ...] | None = None, model=PAPER_CNN
) -> Row:
    """A row of Table 2: ``method`` with ``model``'s arguments (the paper's CNN) under ``plan``, its cells
    (:func:`table2_cells`), then the accuracy per seed, their mean and its distance from the paper's."""
    cells = table2_cells(method, trust)

    def values(runs: list[dict]) -> tuple[str, ...]:
        per_seed, mean = per_seed_cells(runs)
        return per_seed, mean, points_from(cells[2], mean)

    return Row(cells, plan, ("--method", method, *model, *extra), seeds=seeds, values=values)


@dataclass(frozen=True)
class Row:
    """One table row: its leading cells, the plan it trains from and the command's arguments (seed excepted):
    ``train`` (seeded noise) or ``flower`` (secure noise, as always on Flower); ``seeds`` and ``values`` its own (None:
    the experiment's)."""

    cells: tuple[str, ...]
    plan: str
    args: tuple[str, ...]
    command: str = "train"
    seeds: tuple[int, ...] | None = None
    values: Callable[[list[dict]], tuple[str, ...]] | None = None  # None: the experiment's


@dataclass(frozen=True)
class Experiment:
    title: str
    plans: dict[str, tuple[str, ...]]
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    values: Callable[[list[dict]], tuple[str, ...]]
    """The value cells of a row from the ``metrics.json`` of its seeds."""
    notes: tuple[str, ...] = ()
    progressive: bool = False
    """Run the first seed of every row before any row's second seed, keep a table of runs and, with ``--record``,
    write the result after every run (pending runs marked); ``values`` must read ``final_accuracy`` only, all a
    recorded run keeps."""


def mean_std(xs: Sequence[float]) -> str:
    return f"{statistics.mean(xs):.2f} ± {statistics.stdev(xs):.2f}" if len(xs) > 1 else f"{xs[0]:.2f}"


def accuracy(runs: list[dict]) -> tuple[str, ...]:
    return (mean_std([m["final_accuracy"] for m in runs]),)


def selection_cells(runs: list[dict]) -> tuple[str, ...]:
    """Accuracy, the paper's noise multiplier over the exact one (median over clients and seeds), and the share of
    each group's budget spent (largest over seeds)."""
    ratio = statistics.median(
        c["noise_multiplier_paper"] / c["noise_multiplier_exact"] for m in runs for c in m["client_privacy"]
    )
    groups = runs[0]["epsilon_spent"]
    spent = [max(m["epsilon_spent"][g]["epsilon_spent"] for m in runs) / groups[g]["epsilon_budget"]
             for g in range(len(groups))]  # fmt: skip
    return (*accuracy(runs), f"{ratio:.2f}", " / ".join(f"{100 * x:.0f}%" for x in spent))


def skew_cells(runs: list[dict]) -> tuple[str, ...]:
    (m,) = runs
    acc = f"{m['final_accuracy']:.2f}" + (" (diverged)" if m.get("diverged") else "")
    joined = m.get("joined_per_round_mean") or []
    return (
        " / ".join(f"{j:.3g}" for j in joined) or "—",
        f"{m['noise_lambda_planned']:.3g}",
        acc,
        " / ".join(f"{a:.1f}" for a in m.get("group_accuracy", [])),
    )


def per_seed_cells(runs: list[dict]) -> tuple[str, ...]:
    return (", ".join(f"{m['final_accuracy']:.2f}" for m in runs), mean_std([m["final_accuracy"] for m in runs]))


PERSONAL = (("dp-fedavg", "global model"), ("dp-fedsam", "global model"), ("dp-fedavg-ft", "per client, fine-tuned"),
            ("centaur", "per client, personal head"), ("dp2-fedsam", "per client, personal head"))  # fmt: skip
SELECTION = ("privacy-aware", "unbiased", "power-of-choice")
PARTITIONS = (("IID", ()), ("20% IID, rest label-sorted", ("--iid-share", "0.2")))
SKEW_ROWS = (("P-FedAvg (no noise)", "p-fedavg"), ("DP-FedAvg", "dp-fedavg"), ("GDPFed", "gdpfed"),
             ("GDPFed-op", "gdpfed-op"), ("GDPFed+", "gdpfed+"), ("PFA", "pfa"), ("Time-adaptive", "time-adaptive"),
             ("IDP-FedAvg-Sample", "idp-fedavg-sample"), ("IDP-FedAvg-Scale", "idp-fedavg-scale"),
             ("HDP-Pooled", "hdp-pooled"))  # fmt: skip

EXPERIMENTS: dict[str, Experiment] = {
    "personal-digits": Experiment(
        title="DP²-FedSAM family on digits (n = 120 clients of 2 classes, T = 50, q = 0.2, ε = 2)",
        plans={"plan": ("--eps", "2", "--n", "120", "-T", "50", "--q", "0.2")},
        columns=("method", "evaluation", "accuracy (%)"),
        rows=tuple(Row((m, ev), "plan", ("--method", m, "--dataset", "digits", "--shards", "2")) for m, ev in PERSONAL),
        seeds=(0, 1, 2),
        values=accuracy,
    ),
    "selection-digits": Experiment(
        title="Privacy-aware client selection on digits (n = 20 in groups ε = 0.5, 1.5, 3; K = 5, T = 30, τ = 5)",
        plans={"plan": ("--eps", "0.5,1.5,3.0", "--n", "20", "-T", "30", "--q", "0.25")},
        columns=(
            "noise rule",
            "partition",
            "method",
            "accuracy (%)",
            "z paper / z exact (median)",
            "ε spent / budget per group",
        ),
        rows=tuple(
            Row(
                (rule, part, m),
                "plan",
                (
                    "--method",
                    m,
                    "--dataset",
                    "digits",
                    "--clients",
                    "20",
                    "--batch-size",
                    "16",
                    "--noise-rule",
                    rule,
                    *extra,
                ),
            )
            for rule in ("paper", "exact")
            for part, extra in PARTITIONS
            for m in SELECTION
        ),
        seeds=(0, 1, 2),
        values=selection_cells,
        notes=("noise rule paper: the selection paper's eqs. 6-7; exact: this package's RDP accountant",),
    ),
    "group-skew": Experiment(
        title="Group-skewed labels on Fashion-MNIST (group m's clients hold only group m's classes; n = 3000, T = 30)",
        plans={"min share 0": SKEW_PLAN, "min share 1": (*SKEW_PLAN, "--min-share", "1")},
        columns=(
            "row",
            "plan",
            "clients/round (measured)",
            "exact Λ",
            "accuracy (%)",
            "accuracy on ε = 0.5 / 1.5 / 3 classes",
        ),
        rows=(
            *(Row((label, "min share 0"), "min share 0", ("--method", m, *SKEW)) for label, m in SKEW_ROWS),
            Row(("GDPFed+", "min share 1"), "min share 1", ("--method", "gdpfed+", *SKEW)),
            Row(("HDP-Pooled", "min share 1"), "min share 1", ("--method", "hdp-pooled", *SKEW)),
        ),
        seeds=(0,),
        values=skew_cells,
        notes=("one seed: differences of a few points are within seed noise",),
    ),
    "paper-cnn": Experiment(
        title="The paper's 2-layer CNN (d = 1,663,370) on the FMNIST Table 2 plan, on CPU",
        plans={"plan": FMNIST_PLAN},
        columns=("method", "paper", "accuracy per seed (%)", "mean ± std"),
        rows=(
            Row(
                ("p-fedavg", "78.96"), "plan", ("--method", "p-fedavg", "--dataset", "fmnist", "--model", "cnn2-paper")
            ),
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
    ),
    "table2-paper-cnn": Experiment(
        title="GDPFed Table 2 on Fashion-MNIST with the paper's CNN (d = 1,663,370), on CPU",
        plans={
            "server": (*FMNIST_PLAN, "--model-dim", str(PAPER_CNN_DIM)),
            "secagg": (
                *FMNIST_PLAN[:-2],
                "--methods",
                "gdpfed+",
                "--trust",
                "secagg",
                "--bits",
                "20",
                "--model-dim",
                str(PAPER_CNN_DIM),
            ),
        },
        columns=(
            "method",
            "trust",
            "paper",
            "small CNN",
            "small CNN − paper",
            "paper CNN, per seed (%)",
            "paper CNN",
            "paper CNN − paper",
        ),
        rows=(
            *(table2_row(m, "server", "server", ()) for m in TABLE2_ROWS),
            table2_row("gdpfed+", "secagg, b = 20", "secagg", ("--trust", "secagg"), seeds=(0,)),
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
        notes=(
            "The FMNIST Table 2 plan (ε = 0.5, 1.5, 3; n = 6000; T = 50; q = 0.02; C = 1.5; τ = 5; k_m/d = 0.7, "
            "0.8, 0.9), every row trained with McMahan et al.'s CNN on 2 CPU cores, the test set evaluated every 5 "
            "rounds and after the last; the small CNN column is the same plan with the small CNN (d = 26,010).",
            "The paper's IDP-FedAvg row does not say which variant it is: shown for both.",
            "The secure row runs GDPFed+, the best row with a distributed form (the pooled rows, IDP-FedAvg and "
            "HDP-Pooled, draw one noise for all groups and have none), through the exact integer pipeline at "
            "b = 20 bits with survivors F = 0.9; its noise is seeded too (a simulation).",
        ),
        progressive=True,
    ),
    "table2-paper-weights": Experiment(
        title="GDPFed's own group weights on the FMNIST Table 2 plan (small CNN): train --weights paper",
        plans={"server": (*FMNIST_PLAN, "--model-dim", str(model_dim("fmnist")))},
        columns=(
            "method",
            "trust",
            "paper",
            "small CNN, the plan's weights",
            "− paper",
            "small CNN, the paper's weights, per seed (%)",
            "the paper's weights",
            "− paper",
        ),
        rows=tuple(
            table2_row(m, "server", "server", ("--weights", "paper"), model=SMALL_CNN)
            for m in ("gdpfed", "gdpfed+", "pfa")
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
        notes=(
            "The grouped rows with GDPFed B.2's weights ω_m = (1/qn)·r_m²/Σr² on the group sums (shares ∝ r_m³, a step "
            "Σω_m·r_m of 1/3 for GDPFed's equal groups, about one half for GDPFed+'s) instead of the plan's "
            "(shares ∝ r_m², a step of 1); every other setting as the small-CNN Table 2 (evaluated every 5 rounds).",
        ),
        progressive=True,
    ),
    "secagg-bits": Experiment(
        title="The price of distrust in accuracy: the FMNIST Table 2 plan with a trusted server and under secure "
        "aggregation at b = 12, 16, 20 bits",
        plans={
            "server": FMNIST_PLAN[:-2],
            **{
                f"b{b}": (*FMNIST_PLAN[:-2], "--trust", "secagg", "--bits", str(b), "--model-dim", "26010")
                for b in (12, 16, 20)
            },
        },
        columns=("method", "trust", "accuracy per seed (%)", "mean ± std"),
        rows=tuple(
            Row((m, trust), plan, ("--method", m, "--dataset", "fmnist", *(("--trust", "secagg") if b else ())))
            for m in ("gdpfed+", "dp-fedavg")
            for trust, plan, b in (
                ("server", "server", None),
                *((f"secagg, b = {b}", f"b{b}", b) for b in (12, 16, 20)),
            )
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
        notes=(
            "Every secagg row runs at the z its plan calibrates (survivors F = 0.9, colluders k = 0): the full price "
            "of distrust, discretization, survivor margin and accounting together.",
        ),
    ),
    "secagg-discretization": Experiment(
        title="The cost of discretization alone: the FMNIST Table 2 plan under secure aggregation at b = 20 with every "
        "sampled client surviving (F = 1), against a trusted server",
        plans={
            "server": FMNIST_PLAN[:-2],
            "exact": (
                *FMNIST_PLAN[:-2],
                "--trust",
                "secagg",
                "--bits",
                "20",
                "--survivors",
                "1",
                "--model-dim",
                "26010",
            ),
        },
        columns=("method", "trust", "accuracy per seed (%)", "mean ± std"),
        rows=tuple(
            Row((m, trust), plan, ("--method", m, "--dataset", "fmnist", *extra))
            for m in ("gdpfed+", "dp-fedavg")
            for trust, plan, extra in (
                ("server", "server", ()),
                ("secagg, b = 20, F = 1", "exact", ("--trust", "secagg")),
            )
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
        notes=(
            "With F = 1 no survivor margin is added: DP-FedAvg's distributed noise multiplier equals the server's σ "
            "(1.748), so its row differs only by the rounding, the discrete noise and the modular sum; GDPFed+'s z "
            "are 1-10% above the server's σ_m, what the distributed accounting needs for its smaller groups.",
        ),
    ),
    "secagg-flower": Experiment(
        title="GDPFed+ of the FMNIST Table 2 plan under secure aggregation: the simulator against Flower",
        plans={"plan": SECAGG_PLAN},
        columns=("runtime", "accuracy per seed (%)", "mean ± std"),
        rows=(
            Row(("simulator: train --trust secagg",), "plan", SECAGG),
            Row(
                ("Flower: flower --trust secagg --in-process --no-masks",),
                "plan",
                (*SECAGG, "--in-process", "--no-masks", "--diagnostics", "--ledger", "none"),
                command="flower",
            ),
        ),
        seeds=(0, 1, 2),
        values=per_seed_cells,
        notes=(
            "Both rows run the same integer pipeline (the share mod's client_message, modular sum, release); on Flower "
            "the clients' messages are summed in the clear instead of through SecAgg+, whose masks cancel exactly "
            "(the sums are equal bit for bit: tests/flower/test_flower_secagg.py). With SecAgg+ a round of this plan "
            "takes about two minutes in one process (bench_flower_secagg), too long for 50-round runs here.",
            "The simulator's noise is seeded, Flower's comes from the OS; the sampling and local batches differ too, "
            "so single seeds differ by chance.",
            "The same plan under a trusted server is the gdpfed+ row of table2_fmnist: secure aggregation's noise is "
            "larger (each client's share is an integer vector, and t of c shares must carry the whole noise).",
        ),
    ),
}


def hdp_plan(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-m", "hdp_planner", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: hdp-plan {' '.join(args)}\n{done.stderr.strip()[-2000:]}")


def row_seeds(exp: Experiment, row: Row) -> tuple[int, ...]:
    return row.seeds if row.seeds is not None else exp.seeds


def row_key(row: Row) -> str:
    """A row's name in the table of runs: its first two cells."""
    return " / ".join(row.cells[:2])


RUN_COLUMNS = ("row", "seed", "accuracy (%)", "minutes", "load average (1 min) at start → end", "finished")


def recorded_runs(name: str) -> dict[tuple[str, int], tuple[str, ...]]:
    """The table of runs of ``benchmarks/results/NAME.json`` by (row, seed): what a fresh checkout resumes from."""
    path = RESULTS_DIR / f"{name}.json"
    if not path.is_file():
        return {}
    tables = [t for t in read_result(path).tables if t.columns == RUN_COLUMNS]
    return {(r[0], int(r[1])): r for t in tables for r in t.rows}


def run(name: str, out: Path, resume: bool, seeds: tuple[int, ...] | None = None, record: bool = False) -> Result:
    exp = EXPERIMENTS[name]
    if seeds is not None:
        exp = dataclasses.replace(exp, seeds=seeds, rows=tuple(dataclasses.replace(r, seeds=None) for r in exp.rows))
    out.mkdir(parents=True, exist_ok=True)
    plans = {}
    for key, args in exp.plans.items():
        plans[key] = out / f"{key.replace(' ', '-')}.json"
        if not (resume and plans[key].is_file()):
            hdp_plan("solve", *args, "-o", str(plans[key]))
    pairs = [(i, seed) for i, row in enumerate(exp.rows) for seed in row_seeds(exp, row)]
    if exp.progressive:  # every row's first seed, then every row's second, ...
        pairs.sort(key=lambda p: (row_seeds(exp, exp.rows[p[0]]).index(p[1]), p[0]))
    recorded = recorded_runs(name) if resume and exp.progressive else {}
    done: dict[tuple[int, int], dict] = {}
    log: dict[tuple[int, int], tuple[str, ...]] = {}
    for i, seed in pairs:
        folder, was = out / f"row{i}-seed{seed}", recorded.get((row_key(exp.rows[i]), seed))
        if resume and (folder / "metrics.json").is_file():
            done[i, seed] = json.loads((folder / "metrics.json").read_text())
        elif was is not None:
            done[i, seed] = {"final_accuracy": float(was[2])}
        if was is not None:
            log[i, seed] = was
    for i, seed in pairs:
        if (i, seed) in done:
            continue
        row, folder = exp.rows[i], out / f"row{i}-seed{seed}"
        load, t0 = os.getloadavg()[0], time.monotonic()
        print(f"  {' / '.join(row.cells)}, seed {seed} (load average {load:.2f})", flush=True)
        if row.command == "flower":
            hdp_plan("flower", str(plans[row.plan]), *row.args, "--seed", str(seed), "--out", str(folder))
        else:
            hdp_plan("train", str(plans[row.plan]), *row.args, "--seed", str(seed), "--seeded-noise", "--overwrite",
                     "--out", str(folder))  # fmt: skip
        done[i, seed] = json.loads((folder / "metrics.json").read_text())
        if exp.progressive:
            finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            minutes, loads = f"{(time.monotonic() - t0) / 60:.1f}", f"{load:.2f} → {os.getloadavg()[0]:.2f}"
            log[i, seed] = (row_key(row), str(seed), f"{done[i, seed]['final_accuracy']:.2f}", minutes, loads, finished)
            print(f"    {log[i, seed][2]}% in {log[i, seed][3]} min", flush=True)
            if record:
                write_result(result(name, exp, done, [log[p] for p in pairs if p in log]))
    return result(name, exp, done, [log[p] for p in pairs if p in log])


def result(name: str, exp: Experiment, done: dict[tuple[int, int], dict], log: list[tuple[str, ...]]) -> Result:
    """The experiment's result from the runs ``done`` so far (rows with pending runs marked) and, for a progressive
    experiment, its table of runs ``log``."""
    table = []
    width = len(exp.columns) - len(exp.rows[0].cells)
    for i, row in enumerate(exp.rows):
        wanted = row_seeds(exp, row)
        runs = [done[i, s] for s in wanted if (i, s) in done]
        cells = (row.values or exp.values)(runs) if runs else ("pending",) * width
        if runs and len(runs) < len(wanted):
            cells = (f"{cells[0]} ({len(runs)} of {len(wanted)} seeds; pending)", *cells[1:])
        table.append((*row.cells, *cells))
    flower = any(row.command == "flower" for row in exp.rows)
    noise = "seeded noise in simulations, secure noise on Flower" if flower else "seeded noise (simulations)"
    seeds = f"seeds {', '.join(map(str, exp.seeds))}" if len(exp.seeds) > 1 else f"seed {exp.seeds[0]}"
    own = {row_key(r): row_seeds(exp, r) for r in exp.rows if row_seeds(exp, r) != exp.seeds}
    seeds += "".join(f"; {k}: seed {', '.join(map(str, v))}" for k, v in own.items())
    tables = [Table(caption=f"{seeds}; {noise}", columns=exp.columns, rows=tuple(table))]
    if exp.progressive:
        total = sum(len(row_seeds(exp, r)) for r in exp.rows)
        tables.append(Table(caption=f"runs finished: {len(log)} of {total}, in the order run", columns=RUN_COLUMNS,
                            rows=tuple(log)))  # fmt: skip
    return Result(name=name, title=exp.title, tables=tuple(tables), notes=exp.notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted(EXPERIMENTS), help="the experiment to run")
    parser.add_argument("--list", action="store_true", help="list the experiments")
    parser.add_argument("--out", type=Path, default=Path("runs/experiments"), help="runs go to OUT/NAME")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs in OUT/NAME")
    parser.add_argument("--seeds", help="comma-separated seeds instead of the experiment's own")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/NAME.json")
    args = parser.parse_args()
    if args.list or args.name is None:
        for name, exp in EXPERIMENTS.items():
            print(f"{name:<18} {exp.title} ({sum(len(row_seeds(exp, r)) for r in exp.rows)} runs)")
        return
    seeds = None if args.seeds is None else tuple(int(x) for x in args.seeds.split(","))
    final = run(args.name, args.out / args.name, args.resume, seeds, args.record)
    print(render_result(final))
    if args.record:
        print(f"written to {write_result(final)}")


if __name__ == "__main__":
    main()
