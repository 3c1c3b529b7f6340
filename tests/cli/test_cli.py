"""The command line: solve, verify, and every bad input as a one-line error with no output file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from hdp_planner_cli.app import app

runner = CliRunner()
BASE = ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000"]


def test_solve_prints_groups_and_noise_table():
    result = runner.invoke(app, BASE)
    assert result.exit_code == 0, result.output
    for text in ("GDPFed+ plan", "spent", "DP-FedAvg", "GDPFed-op", "against", "Problem 1"):
        assert text in result.output


def test_solve_writes_verifiable_plan_and_json(tmp_path):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, [*BASE, "-o", str(out), "--json", "--sparsity", "0.7,0.8,0.9"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["groups"] == json.loads(out.read_text())["groups"]
    check = runner.invoke(app, ["verify", str(out)])
    assert check.exit_code == 0 and "within budget" in check.output


def test_solve_under_secagg_without_a_secure_form_fails_in_its_last_line_unless_it_may_fall_back(tmp_path):
    """Five clients in three groups are too few a round for secure aggregation: ``solve --trust secagg`` says so in
    its last line, exits 2 and writes nothing; with --trusted-fallback it writes a plan for a trusted server and says
    so in its last line."""
    args = ["solve", "--eps", "1,2,4", "--n", "5", "--rounds", "10", "--q", "0.8", "--clip", "1.0", "--methods",
            "gdpfed,gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", "0.75", "--model-dim",
            "2410"]  # fmt: skip
    out = tmp_path / "plan.json"
    res = runner.invoke(app, [*args, "-o", str(out)])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 2 and "no row of this plan has a secure form under --trust secagg" in last
    assert "--trusted-fallback" in last and "Traceback" not in res.output and not out.exists()
    res = runner.invoke(app, [*args, "--trusted-fallback", "-o", str(out)])
    last = res.output.strip().splitlines()[-1]
    assert res.exit_code == 0 and "written for a trusted server" in last and "clipped update" in last
    assert "trust" not in json.loads(out.read_text()) and runner.invoke(app, ["verify", str(out)]).exit_code == 0


def test_solve_plans_the_baselines_on_request(tmp_path):
    out = tmp_path / "plan.json"
    methods = "pfa,idp-fedavg-sample,idp-fedavg-scale,time-adaptive"
    args = [*BASE, "--rounds", "10", "--methods", methods, "--model-dim", "26010", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for text in ("PFA", "IDP-FedAvg-Sample", "IDP-FedAvg-Scale", "Time-adaptive", "projected onto the top-1", "→"):
        assert text in result.output
    check = runner.invoke(app, ["verify", str(out)])
    assert check.exit_code == 0 and "OK Time-adaptive" in check.output
    assert "PFA" not in runner.invoke(app, [*BASE, "--rounds", "10"]).output  # only on request


def test_verify_names_the_over_budget_group(tmp_path):
    out = tmp_path / "plan.json"
    runner.invoke(app, [*BASE, "-o", str(out)])
    doc = json.loads(out.read_text())
    g = doc["noise"]["GDPFed"]
    g["epsilon_spent"][0] = g["epsilon"][0] = 0.4  # claim a stricter budget than the noise gives
    doc["noise"]["DP-FedAvg"]["epsilon"][0] = 0.4
    for name in ("GDPFed-op", "GDPFed+"):
        doc["noise"][name]["epsilon"][0] = 0.4
    doc["groups"][0]["epsilon"] = 0.4
    out.write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", str(out)])
    assert result.exit_code == 1
    assert "group 1 (ε=0.4)" in result.output


BAD = [
    (["--eps", "0.5,abc", "--n", "100"], "not a number"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "gdpfed,[train]"], "unknown method '[train]'"),  # verbatim
    (["--eps", "0.5,-1", "--n", "100"], "epsilon"),
    (["--eps", "0.5,0", "--n", "100"], "epsilon"),
    (["--eps", "0.5,nan", "--n", "100"], "finite"),
    (["--eps", "0.5,1.5", "--n", "0"], "n must"),
    (["--eps", "0.5,1.5", "--n", "100", "--q", "0"], "q must"),
    (["--eps", "0.5,1.5", "--n", "100", "--q", "1.5"], "q must"),
    (["--eps", "0.5,1.5", "--n", "100", "--delta", "1.5"], "delta"),  # δ = 1 is vacuous but valid (one client)
    (["--eps", "0.5,1.5", "--n", "100", "--delta", "0"], "delta"),
    (["--eps", "0.5,1.5", "--n", "100", "--rounds", "0"], "rounds"),
    (["--eps", "0.5,1.5", "--n", "100", "--clip", "0"], "clip"),
    (["--eps", "0.5,1.5", "--n", "100", "--clip", "-1"], "clip"),
    (["--eps", "0.5,1.5", "--n", "100", "--sizes", "50"], "sizes"),
    (["--eps", "0.5,1.5", "--n", "100", "--sizes", "50,40"], "sum to"),
    (["--eps", "0.5,1.5", "--n", "100", "--sparsity", "0.5,1.2"], "sparsity"),
    (["--eps", "0.5,1.5", "--n", "100", "--sparsity", "0,0.5"], "sparsity"),
    (["--eps", "0.5,1.5", "--n", "100", "--fixed-q", "0.1"], "fixed-q"),
    (["--eps", "0.5,1.5", "--n", "100", "--fixed-q", "0.1,1.2"], "q_m"),
    (["--eps", "0.5,1.5", "--n", "100", "--accountant", "moments"], "accountant"),
    (["--eps", "0.5,1.5", "--n", "100", "--sigma-model", "x"], "sigma model"),
    (["--eps", "0.5,1.5", "--n", "100", "--lambda-convention", "x"], "lambda convention"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "gdpfed,fedprox"], "unknown method 'fedprox'"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "pfa"], "--model-dim"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "pfa", "--model-dim", "99", "--pfa-subspace", "qr"], "subspace"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "pfa", "--model-dim", "99", "--pfa-dim", "0"], "pfa dim"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "time-adaptive", "--saving-rounds", "50"], "saving rounds"),
    (["--eps", "0.5,1.5", "--n", "100", "--methods", "time-adaptive", "--saving-noise", "0.5"], "saving noise"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_solve_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", *args, "-o", str(out)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind either


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not found"),
        ('{"schema": "hdp-plan/2", "config": {', "not valid JSON"),
        ("hello", "not valid JSON"),
        ('{"schema": "other/1"}', "schema"),
        ('{"schema": "hdp-plan/4", "config": {"n": -5}}', "config"),
        ('{"schema": "hdp-plan/2", "config": {"n": 5}}', "re-create it with hdp-plan solve"),  # older files
    ],
)
def test_bad_plan_files(tmp_path, content, message):
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    result = runner.invoke(app, ["verify", str(path)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_real_process_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hdp_planner", "solve", "--eps", "0.5,x", "--n", "10"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_solve_imports_neither_torch_nor_matplotlib():
    code = (
        "import sys; from hdp_planner_cli.app import app; "
        "print(any(m.split('.')[0] in ('torch', 'matplotlib') for m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("command", ["solve", "compare", "train"])
def test_help_keeps_bracketed_defaults(command):
    """Defaults are written '[paper]', '[the paper's]': help must print them, not read them as markup tags."""
    res = runner.invoke(app, [command, "--help"], terminal_width=200)
    assert res.exit_code == 0
    expected = {"solve": "[Remark 3's closed form]", "compare": "[the paper's]", "train": "[paper]"}[command]
    assert expected in res.output
