"""Turn the ``results.json`` of ``hdp-plan compare`` into a result file the documentation renders.

    python benchmarks/record_compare.py runs/table2/results.json --name table2_fmnist \
        --title "GDPFed Table 2 on Fashion-MNIST" --command "bash examples/reproduce_table2.sh"

The table holds, per method, the final test accuracy (mean ± sample std over seeds), the paper's value, the
exact noise Λ measured against planned, and the largest ε spent per group. ``--command`` is the command that
produced the runs (recorded as given, with this machine and the date of the results file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result


def table(summary: list[dict]) -> Table:
    rows = []
    for s in summary:
        spread = f" ± {s['accuracy_std']:.2f}" if s["seeds"] > 1 else ""
        lam = "no noise" if s["epsilon_spent"] is None else f"{s['lambda_measured']:.3g} / {s['lambda_planned']:.3g}"
        eps = "∞" if s["epsilon_spent"] is None else ", ".join(f"{e:.3g}" for e in s["epsilon_spent"])
        paper = "—" if s["paper"] is None else f"{s['paper']:.2f}"
        rows.append((s["method"], f"{s['accuracy_mean']:.2f}{spread}", paper, lam, eps))
    seeds = summary[0]["seeds"]
    return Table(
        caption=f"final test accuracy (%) after {summary[0].get('rounds', '?')} rounds, {seeds} seed(s) per method",
        columns=("method", "ours", "paper", "Λ measured / planned", "ε spent per group"),
        rows=tuple(rows),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="results.json written by hdp-plan compare")
    parser.add_argument("--name", required=True, help="result file name (benchmarks/results/NAME.json)")
    parser.add_argument("--title", required=True)
    parser.add_argument("--command", required=True, help="the command that produced the runs")
    parser.add_argument("--note", action="append", default=[], help="a note under the table (repeatable)")
    args = parser.parse_args()
    doc = json.loads(args.results.read_text())
    when = dt.datetime.fromtimestamp(args.results.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    result = Result(
        name=args.name,
        title=args.title,
        tables=(table(doc["summary"]),),
        notes=(f"noise source: {doc.get('noise_note', doc.get('noise_source'))}", *args.note),
        command=args.command,
        date=when,
        load_average=(),
    )
    print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
