"""Every error message fits an 80-column terminal without breaking a word or an option name: wrapped at spaces there,
one whole line in a log or a pipe (where it is read and searched), the same words either way."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from typer.testing import CliRunner

from hdp_planner_cli import console
from hdp_planner_cli.app import app

runner = CliRunner()
TERMINAL = {"TTY_COMPATIBLE": "1", "NO_COLOR": "1", "COLUMNS": "80"}
"""An 80-column terminal, as rich sees one (escape codes aside)."""
ANSI = re.compile(r"\x1b\[[0-9;]*m")

BAD = [
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "1.5"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "-5"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000", "--q", "2"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000", "--rounds", "abc"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000", "--bogus"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000", "--hide-sample"],
    ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000", "--trust", "secagg"],
    ["solve", "--budgets", "missing-budgets.csv", "--eps", "1"],
    ["solve", "--eps", "1,2", "--n", "100", "--methods", "pfa,idp-fedavg-sample,idp-fedavg-scale,no-such-method"],
    ["verify", "no/such/plan.json"],
    ["sweep", "--eps", "0.5,1.5,3.0", "--n", "6000", "--vary", "1"],
    ["sweep", "--eps", "0.5,1.5,3.0", "--n", "6000", "--vary", "1", "--values", "1", "--plot", "figure.jpg"],
    ["plot", "no/such/plan.json"],
    ["assign", "no/such/plan.json", "budgets.csv"],
    ["select", "no/such/clients.csv"],
    ["fedsam-noise", "--clients", "10"],
    ["ledger", "show", "no/such/plan.json"],
    ["ledger", "check", "--head", "not-a-digest"],
    ["deploy", "local", "no/such/plan.json", "--nodes", "5"],
    ["deploy", "local", "plan.json"],
    ["nosuch"],
]
"""Bad input to every command: an unknown option or command, values out of range or of the wrong kind, missing files,
options that need each other."""

NEEDS_TORCH = [
    ["train", "plan.json", "--dataset", "digits", "--method", "no-such-method"],
    ["train", "plan.json", "--dataset", "digits", "--plot"],
    ["train", "plan.json", "--dataset", "no-such-dataset", "--data-dir", "a/folder/that/is/not/there"],
    ["compare", "--dataset", "digits", "--seeds", "0"],
    ["compare", "--dataset", "digits", "--dropout", "0.5"],
    ["flower", "plan.json", "--dataset", "digits", "--no-masks"],
]


def _lines(text: str) -> list[str]:
    return [ANSI.sub("", line).rstrip() for line in text.splitlines() if line.strip()]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["solve", "--eps", "1,2,4", "--n", "120", "--rounds", "4", "--q", "0.2", "-o",
                                 "plan.json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return tmp_path


def check_wrapped(args: list[str]) -> None:
    """The command fails with exit status 2 and one error: a whole line in a log, and in an 80-column terminal lines
    of at most 80 columns with the same words (none broken)."""
    logged = runner.invoke(app, args)
    shown = runner.invoke(app, args, env=TERMINAL)
    assert logged.exit_code == shown.exit_code == 2, (args, logged.output)
    whole, wrapped = _lines(logged.stderr), _lines(shown.stderr)
    assert len(whole) == 1 and whole[0].startswith("error: "), (args, whole)
    assert all(len(line) <= 80 for line in wrapped), (args, wrapped)
    assert " ".join(wrapped).split() == whole[0].split(), (args, wrapped)  # every word and option name whole


@pytest.mark.parametrize("args", BAD, ids=" ".join)
def test_every_error_fits_80_columns_without_breaking_a_word(args, folder):
    check_wrapped(args)


@pytest.mark.parametrize("args", NEEDS_TORCH, ids=" ".join)
def test_every_run_error_fits_80_columns_without_breaking_a_word(args, folder):
    pytest.importorskip("torch")
    if args[0] == "flower":
        pytest.importorskip("flwr")
    check_wrapped(args)


WORD = st.one_of(
    st.sampled_from(["--data-dir", "--overwrite", "--cohort-multiple", "idp-fedavg-scale", "hdp-plan", "ε", "0.5"]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789.", min_size=1, max_size=16),  # names, numbers, options
)


@settings(deadline=None)
@given(st.lists(WORD, min_size=1, max_size=40))
def test_any_message_wraps_at_spaces_only(words):
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, no_color=True, emoji=False)
    message = " ".join(words)
    previous, console.err = console.err, terminal
    try:
        console.print_error(message)
    finally:
        console.err = previous
    lines = _lines(terminal.file.getvalue())
    assert all(len(line) <= 80 for line in lines)
    assert " ".join(lines).split() == ["error:", *words]
