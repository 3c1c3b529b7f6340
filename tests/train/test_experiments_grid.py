"""examples/experiments.py's long grids: the first seed of every row runs first, every finished run is recorded with
its load average as it ends, and a checkout without the runs' folders resumes from the committed record."""

from __future__ import annotations

import functools
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from hdp_planner.report.results import read_result, write_result

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def experiments(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("experiments_script", ROOT / "examples" / "experiments.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    results = tmp_path / "results"
    monkeypatch.setattr(module, "RESULTS_DIR", results)
    monkeypatch.setattr(module, "write_result", functools.partial(write_result, directory=results))
    calls: list[tuple[str, str]] = []

    def fake_hdp_plan(command: str, *args: str) -> None:
        if command == "solve":
            Path(args[-1]).write_text("{}")
            return
        assert command == "train"
        method, seed, out = (args[args.index(flag) + 1] for flag in ("--method", "--seed", "--out"))
        recorded = sorted(results.glob("*.json"))
        calls.append((method, seed, read_result(recorded[0]).tables[1].caption if recorded else ""))
        Path(out).mkdir(parents=True)
        accuracy = {"a": 70.0, "b": 60.0}[method] + int(seed)
        (Path(out) / "metrics.json").write_text(json.dumps({"final_accuracy": accuracy}))

    monkeypatch.setattr(module, "hdp_plan", fake_hdp_plan)
    grid = module.Experiment(
        title="a grid",
        plans={"plan": ("--eps", "1")},
        columns=("method", "trust", "per seed", "mean ± std"),
        rows=(
            module.Row(("a", "server"), "plan", ("--method", "a")),
            module.Row(("b", "secagg"), "plan", ("--method", "b"), seeds=(0,)),
        ),
        seeds=(0, 1),
        values=module.per_seed_cells,
        progressive=True,
    )
    monkeypatch.setitem(module.EXPERIMENTS, "grid", grid)
    return module, calls, results


def test_a_grid_runs_every_rows_first_seed_first_and_records_each_run(experiments, tmp_path):
    module, calls, results = experiments
    final = module.run("grid", tmp_path / "runs", resume=False, record=True)
    # one seed of every row before the second seeds; the record was rewritten after each run
    assert [c[:2] for c in calls] == [("a", "0"), ("b", "0"), ("a", "1")]
    assert [c[2] for c in calls] == [
        "",
        "runs finished: 1 of 3, in the order run",
        "runs finished: 2 of 3, in the order run",
    ]
    main, runs = read_result(results / "grid.json").tables
    assert main.rows == (("a", "server", "70.00, 71.00", "70.50 ± 0.71"), ("b", "secagg", "60.00", "60.00"))
    assert [r[:3] for r in runs.rows] == [("a / server", "0", "70.00"), ("b / secagg", "0", "60.00"),
                                          ("a / server", "1", "71.00")]  # fmt: skip
    assert all("→" in r[4] for r in runs.rows) and final.tables == (main, runs)


def test_a_partial_record_marks_pending_runs_and_a_fresh_checkout_resumes_from_it(experiments, tmp_path):
    module, calls, results = experiments
    module.run("grid", tmp_path / "runs", resume=False, record=True)
    recorded = read_result(results / "grid.json")
    shutil.rmtree(tmp_path / "runs")  # a fresh checkout: the committed record only
    calls.clear()
    again = module.run("grid", tmp_path / "runs", resume=True, record=True)
    assert calls == [] and again.tables == recorded.tables
    # a record that holds the first run only: the others run, the unfinished rows say so
    main, runs = recorded.tables
    write_result(module.Result(name="grid", title="a grid", tables=(main, type(runs)(
        caption=runs.caption, columns=runs.columns, rows=runs.rows[:1]))), results)  # fmt: skip
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
    partial = module.result("grid", module.EXPERIMENTS["grid"], {(0, 0): {"final_accuracy": 70.0}}, [runs.rows[0]])
    assert partial.tables[0].rows[0][2:] == ("70.00 (1 of 2 seeds; pending)", "70.00")
    assert partial.tables[0].rows[1][2:] == ("pending", "pending")
    module.run("grid", tmp_path / "runs", resume=True, record=True)
    assert [c[:2] for c in calls] == [("b", "0"), ("a", "1")]
