"""Start-up: each command imports what it needs when it runs, so ``--version`` and ``--help`` stay instant and the
planning commands load neither the ledger's database layer nor torch, flwr or matplotlib."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ("torch", "flwr", "matplotlib", "sqlalchemy", "hdp_planner.ledger", "hdp_planner_train")
"""Loaded by no planning command: training, drawing and the privacy ledger."""
PLANNING = ("hdp_planner", "numpy", "scipy", "dp_accounting", "rich.table", *TRAINING)
"""Loaded by nothing that only prints the version or the command list."""


def loaded(*invocations: list[str], watch: tuple[str, ...]) -> list[str]:
    """The modules of ``watch`` that a fresh interpreter holds after running ``invocations`` of ``hdp-plan``."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from hdp_planner_cli.app import app\n"
        f"for args in {list(invocations)!r}:\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    assert r.exit_code == 0, (args, r.output)\n"
        f"print(sorted(m for m in {watch!r} if m in sys.modules))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    return eval(res.stdout.strip().splitlines()[-1])  # a printed list of names


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_no_command(args):
    assert loaded(args, watch=PLANNING) == []


def test_solve_and_verify_load_neither_ledger_nor_training(tmp_path):
    plan = str(tmp_path / "plan.json")
    solve = ["solve", "--eps", "1,2", "--n", "200", "--rounds", "10", "-o", plan]
    assert loaded(solve, ["verify", plan], ["solve", "--help"], watch=TRAINING) == []


def test_the_watch_sees_a_loaded_module():
    assert {"hdp_planner.ledger", "sqlalchemy"} <= set(loaded(["ledger", "--help"], watch=TRAINING))


def test_the_version_is_the_package_version():
    from typer.testing import CliRunner

    from hdp_planner import __version__
    from hdp_planner_cli.app import app

    assert CliRunner().invoke(app, ["--version"]).output == f"hdp-plan {__version__}\n"
