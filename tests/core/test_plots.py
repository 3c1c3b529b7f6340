"""Figures: a plan's three figures, the sweep figure, headless rendering, and matplotlib kept out of `solve`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hdp_planner import plan as make_plan
from hdp_planner.report.plots import figure_format, plot_plan, save_sweep
from hdp_planner.report.sweep import sweep_plan
from hdp_planner_cli.app import app

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "figure2.py"


@pytest.fixture(scope="module")
def small_plan():
    return make_plan((0.5, 1.5, 3.0), 600, rounds=20, q=0.05)


def test_plot_plan_writes_three_figures(tmp_path, small_plan):
    paths = plot_plan(small_plan, tmp_path / "figs")
    assert sorted(p.name for p in paths) == ["comparison.png", "epsilon_spent.png", "sigma_vs_q.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    assert not [p for p in (tmp_path / "figs").iterdir() if p.name.startswith(".")]  # no temporary files left


def test_plot_plan_svg(tmp_path, small_plan):
    paths = plot_plan(small_plan, tmp_path, fmt="svg")
    assert all(p.suffix == ".svg" and p.read_text().lstrip().startswith("<?xml") for p in paths)


def test_figure_formats(tmp_path, small_plan):
    assert figure_format("a/b.PDF") == "pdf"
    with pytest.raises(ValueError, match="figure format"):
        figure_format("x.jpg")
    result = sweep_plan(small_plan_groups(), small_plan.config, "1", (0.5, 1.0))
    pdf = save_sweep(result, tmp_path / "s.pdf")
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="does not exist"):
        save_sweep(result, tmp_path / "missing" / "s.png")


@pytest.mark.parametrize(
    ("vary", "values", "title"),
    [
        ("1", (0.5, 1.0), r"Optimal $q_m$ ($n$ = 600, $T$ = 20, $q$ = 0.05)"),
        ("clip", (0.5, 1.0), r"Optimal $q_m$ ($n$ = 600, $T$ = 20, $q$ = 0.05)"),
        ("rounds", (10, 20), r"Optimal $q_m$ ($n$ = 600, $q$ = 0.05)"),
        ("q", (0.05, 0.1), r"Optimal $q_m$ ($n$ = 600, $T$ = 20)"),
    ],
)
def test_the_sweep_title_names_every_fixed_setting_and_not_the_varied_one(small_plan, vary, values, title):
    from hdp_planner.report.plots import draw_sweep, pyplot

    result = sweep_plan(small_plan_groups(), small_plan.config, vary, values)
    fig, ax = pyplot().subplots()
    try:
        draw_sweep(ax, result)
        assert ax.get_title() == title
        draw_sweep(ax, result, "given")
        assert ax.get_title() == "given"
    finally:
        pyplot().close(fig)


def small_plan_groups():
    from hdp_planner.planning.grouping import Groups

    return Groups.from_budgets((0.5, 1.5, 3.0), 600)


def test_cli_plot(tmp_path):
    plan_path = tmp_path / "plan.json"
    assert (
        runner.invoke(app, ["solve", "--eps", "1,2", "--n", "500", "--rounds", "10", "-o", str(plan_path)]).exit_code
        == 0
    )
    result = runner.invoke(app, ["plot", str(plan_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "comparison.png", "epsilon_spent.png", "sigma_vs_q.png",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [(["missing.json"], "not found"), (["plan.json", "--format", "jpg"], "--format must be")],
)
def test_cli_plot_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan.json").write_text("{}")
    result = runner.invoke(app, ["plot", *args, "--out", "figs"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "figs").exists()


def test_solve_does_not_import_matplotlib():
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from hdp_planner_cli.app import app\n"
        "r = CliRunner().invoke(app, ['solve', '--eps', '0.5,1.5', '--n', '200', '--rounds', '5'])\n"
        "assert r.exit_code == 0, r.output\n"
        "assert 'matplotlib' not in sys.modules, 'solve imported matplotlib'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_example_figure2_draws_both_panels(tmp_path):
    out = tmp_path / "figure2.png"
    subprocess.run([sys.executable, str(EXAMPLE), "--out", str(out)], check=True, capture_output=True)
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 50_000
