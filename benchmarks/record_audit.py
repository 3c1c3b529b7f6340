"""Turn the ``metrics.json`` of audited runs (``hdp-plan train --audit``) into a result file the documentation renders.

    python benchmarks/record_audit.py runs/audit-*/metrics.json --name audit_fmnist \
        --title "Canary audit of the FMNIST Table 2 plan" --command "bash examples/audit_table2.sh"

One row per run and group: the planned ε, the PLD ε of the planned σ (what ε̂ estimates when the run is correct),
ε̂ with its 95% interval, the one-run lower bound, σ planned against σ̂, q planned against observed, the canaries'
insertions, the lag-1 correlation of the null canaries and the verdict. ``--command`` is the command that produced
the runs (recorded as given, with this machine and the date of the newest metrics file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from hdp_planner.report.results import Result, Table, write_result

COLUMNS = ("method", "group", "ε planned", "PLD ε at planned σ", "ε̂ [95% interval]", "lower bound",
           "σ planned / σ̂", "q planned / canaries / clients", "insertions", "lag-1 corr. ± se", "verdict")  # fmt: skip


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.3g}%"


def rows(metrics: dict) -> list[tuple[str, ...]]:
    """The audit table's rows of one run."""
    out = []
    for g in metrics["audit"]["groups"]:
        interval = g["epsilon_empirical_interval"]
        emp = "—" if interval is None else f"{_g(g['epsilon_empirical'])} [{_g(interval[0])}, {_g(interval[1])}]"
        out.append((
            metrics["method"], str(g["group"]), _g(g["epsilon_planned"]), _g(g["epsilon_pld_of_planned_sigma"]), emp,
            _g(g["epsilon_lower_bound"]),
            f"{_g(g['noise_multiplier_planned'])} / {_g(g['noise_multiplier_empirical'])}",
            f"{_pct(g['sampling_rate_planned'])} / {_pct(g['sampling_rate_observed'])} / "
            f"{_pct(g['sampling_rate_clients'])}",
            str(g["insertions"]),
            f"{g['lag1_correlation']:.3f} ± {g['lag1_correlation_se']:.3f}", g["verdict"],
        ))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, nargs="+", help="metrics.json of runs made with --audit")
    parser.add_argument("--name", required=True, help="result file name (benchmarks/results/NAME.json)")
    parser.add_argument("--title", required=True)
    parser.add_argument("--command", required=True, help="the command that produced the runs")
    parser.add_argument("--note", action="append", default=[], help="a note under the table (repeatable)")
    args = parser.parse_args()
    runs = [json.loads(p.read_text()) for p in args.metrics]
    missing = [str(p) for p, m in zip(args.metrics, runs) if "audit" not in m]
    if missing:
        parser.error(f"no audit in {', '.join(missing)} (run with --audit)")
    newest = max(p.stat().st_mtime for p in args.metrics)
    accuracy = "; ".join(f"{m['method']} {m['final_accuracy']:.2f}%" for m in runs)
    canaries = runs[0]["audit"]["canaries_per_group"]
    result = Result(
        name=args.name,
        title=args.title,
        tables=(
            Table(
                caption=f"per group, {canaries} canaries per group",
                columns=COLUMNS,
                rows=tuple(r for m in runs for r in rows(m)),
            ),
        ),
        notes=(f"final test accuracy with canaries: {accuracy}", *args.note),
        command=args.command,
        date=dt.datetime.fromtimestamp(newest, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        load_average=(),
    )
    print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
