"""Sweeps (GDPFed Figure 2): the shape of optimal q_m against ε_1, the CSV, and the command's errors."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
from typer.testing import CliRunner

from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.report.sweep import Varied, parse_range, parse_values, parse_vary, sweep_plan
from hdp_planner_cli.app import app

runner = CliRunner()
FMNIST = (Groups.from_budgets((0.5, 1.5, 3.0), 6000), PlanConfig(n=6000, rounds=50, q=0.02, min_share=0.0))
CIFAR = (Groups.from_budgets((2.0, 6.0, 12.0), 600), PlanConfig(n=600, rounds=100, q=0.1, clip=1.5, min_share=0.0))
"""Figure 2's settings: the paper's Problem 1, without a share rule."""


@pytest.fixture(scope="module")
def fmnist_sweep():
    return sweep_plan(*FMNIST, vary="1", values=(0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0))


def test_figure_2_fmnist_shape(fmnist_sweep):
    """q_1 rises with ε_1, q_2 and q_3 fall, and q_1 = q_2 where ε_1 = ε_2 = 1.5."""
    q1, q2, q3 = (fmnist_sweep.q_of(m) for m in range(3))
    assert np.all(np.diff(q1) > 0)
    assert np.all(np.diff(q2) < 0) and np.all(np.diff(q3) < 0)
    at = fmnist_sweep.values.index(1.5)
    assert q1[at] == pytest.approx(q2[at], rel=1e-4)
    assert q1[at - 1] < q2[at - 1] and q1[at + 1] > q2[at + 1]
    # the ε held fixed stay fixed, Σ q_m|G_m| = qn at every point
    assert all(e[1:] == (1.5, 3.0) for e in fmnist_sweep.epsilons)
    for row in fmnist_sweep.q:
        assert sum(q * 2000 for q in row) == pytest.approx(120, rel=1e-6)


def test_figure_2_cifar_shape():
    result = sweep_plan(*CIFAR, vary=1, values=(2.0, 4.0, 6.0, 8.0))
    q1, q2, q3 = (result.q_of(m) for m in range(3))
    assert np.all(np.diff(q1) > 0) and np.all(np.diff(q2) < 0) and np.all(np.diff(q3) < 0)
    assert q1[2] == pytest.approx(q2[2], rel=1e-4)


def test_csv_columns_and_rows(fmnist_sweep):
    rows = list(csv.reader(fmnist_sweep.to_csv().splitlines()))
    assert rows[0] == [
        "eps_1", "q_1", "q_2", "q_3", "sigma2_1", "sigma2_2", "sigma2_3",
        "lambda_DP-FedAvg", "lambda_GDPFed", "lambda_GDPFed-op", "lambda_GDPFed+",
    ]  # fmt: skip
    assert len(rows) == 1 + len(fmnist_sweep.values)
    assert [float(r[0]) for r in rows[1:]] == list(fmnist_sweep.values)
    assert float(rows[1][1]) == fmnist_sweep.q[0][0]


@pytest.mark.parametrize(("vary", "values"), [("rounds", (20, 50)), ("q", (0.01, 0.05)), ("clip", (0.5, 2.0))])
def test_config_parameters_vary(vary, values):
    groups, config = FMNIST
    result = sweep_plan(groups, config, vary, values)
    assert result.varied == Varied(name=vary)
    assert len(result.q) == 2
    if vary == "clip":  # Λ scales with C², the sampling plan does not move
        assert result.q[0] == pytest.approx(result.q[1])
        assert result.lam[1][0] / result.lam[0][0] == pytest.approx(16.0)
    if vary == "q":
        assert sum(result.q[1]) > sum(result.q[0])


def test_parsers():
    assert parse_range("0.5:3:6") == pytest.approx((0.5, 1.0, 1.5, 2.0, 2.5, 3.0))
    assert parse_values("1,2.5") == (1.0, 2.5)
    groups = FMNIST[0]
    assert parse_vary("2", groups) == Varied(name="eps_2", group=1)
    for bad, message in [("0", "there are 3 groups"), ("4", "there are 3 groups"), ("lr", "--vary must be")]:
        with pytest.raises(ValueError, match=message):
            parse_vary(bad, groups)
    for bad, message in [("1:2", "a:b:steps"), ("1:2:1", "at least 2"), ("a:2:3", "a:b:steps"), ("1:inf:3", "finite")]:
        with pytest.raises(ValueError, match=message):
            parse_range(bad)
    with pytest.raises(ValueError, match="not a number"):
        parse_values("1,x")
    with pytest.raises(ValueError, match="whole numbers"):
        sweep_plan(*FMNIST, "rounds", (10, 10.5))
    with pytest.raises(ValueError, match="epsilon"):
        sweep_plan(*FMNIST, "1", (1.0, -1.0))


def test_sweep_keeps_sizes_and_other_options():
    groups = Groups.from_budgets((0.5, 1.5, 3.0), 6000, (1000, 2000, 3000))
    config = dataclasses.replace(FMNIST[1], sparsity=(0.7, 0.8, 0.9))
    result = sweep_plan(groups, config, "3", (2.0, 4.0))
    assert result.sizes == (1000, 2000, 3000)
    assert result.epsilons == ((0.5, 1.5, 2.0), (0.5, 1.5, 4.0))


BASE = ["sweep", "--eps", "0.5,1.5,3.0", "--n", "6000", "--rounds", "50", "--q", "0.02"]


def test_cli_sweep_writes_csv_and_figure(tmp_path):
    out_csv, out_png = tmp_path / "s.csv", tmp_path / "s.png"
    result = runner.invoke(app, [*BASE, "--range", "0.5:2.5:3", "--csv", str(out_csv), "--plot", str(out_png)])
    assert result.exit_code == 0, result.output
    assert "Sweep of" in result.output and "q_1" in result.output
    rows = list(csv.reader(out_csv.read_text().splitlines()))
    assert rows[0][0] == "eps_1" and len(rows) == 4
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--values", "1,2", "--range", "1:2:3"], "exactly one of"),
        ([], "exactly one of"),
        (["--values", "1,abc"], "not a number"),
        (["--values", "1,-2"], "epsilon"),
        (["--values", "1,2", "--vary", "7"], "there are 3 groups"),
        (["--values", "10,20.5", "--vary", "rounds"], "whole numbers"),
        (["--values", "1,2", "--plot", "x.jpg"], "figure format"),
        (["--values", "1,2", "--csv", "no/such/dir/s.csv"], "does not exist"),
    ],
)
def test_cli_sweep_errors_write_nothing(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*BASE, *args, "--csv", "s.csv"] if "--csv" not in args else [*BASE, *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not list(tmp_path.iterdir())
