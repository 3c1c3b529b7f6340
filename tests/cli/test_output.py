"""What ``hdp-plan`` prints: tables and the progress bar in an 80-column terminal (split or wrapped on purpose,
never cut to "…"), numbers and paths as they are, and one-line errors for bad input and failing files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from hdp_planner_cli import app as app_module
from hdp_planner_cli import console
from hdp_planner_cli.app import app
from hdp_planner_cli.plan_render import spent_of_budget

runner = CliRunner()
ROWS = ("DP-FedAvg", "GDPFed", "GDPFed-op", "GDPFed+")
SOLVE = ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000"]


@pytest.fixture
def narrow(monkeypatch):
    """The result console as in an 80-column terminal."""
    monkeypatch.setattr(console.out, "width", 80)


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_fits(text: str, width: int = 80) -> list[str]:
    """Every table line within ``width`` and nothing cut to "…"; the lines, split into their cells."""
    assert "…" not in text
    lines = text.splitlines()
    table_lines = [line for line in lines if "  " in line.strip()]  # table rows space their cells; prose is whole
    assert table_lines and all(len(line) <= width for line in table_lines), max(table_lines, key=len)
    return [line.split() for line in table_lines if line.strip()]


def test_solve_fits_80_columns_with_every_name_and_number_whole(narrow, tmp_path):
    out = run(*SOLVE, "-o", str(tmp_path / "plan.json"))
    cells = assert_fits(out)
    doc = json.loads((tmp_path / "plan.json").read_text())
    for name in ROWS:  # the name and its Λ whole, on one row
        assert any(row[0] == name and f"{doc['noise'][name]['lambda']:.4g}" in row for row in cells), name


def test_secagg_table_fits_80_columns_and_names_every_method(narrow):
    out = run(*SOLVE, "--trust", "secagg", "--model-dim", "26010", "--methods", "all")
    cells = assert_fits(out)
    methods = {row[0] for row in cells if row}
    assert set(ROWS) | {"PFA"} <= methods
    for name in ("IDP-FedAvg-Sample", "IDP-FedAvg-Scale", "Time-adaptive", "HDP-Pooled"):
        assert f"{name}: not planned under secagg" in out  # a line of its own, not a squeezed cell
    assert out.count("price of") == 1 and out.count("z") >= 1


def test_verify_and_sweep_fit_80_columns(narrow, tmp_path):
    plan = str(tmp_path / "plan.json")
    run(*SOLVE, "--accountant", "pld", "-o", plan)
    assert all(len(line) <= 80 for line in run("verify", plan).splitlines()[:-1])
    out = run("sweep", "--eps", "0.5,1.5,3.0", "--n", "6000", "--values", "0.2,0.6,1")
    cells = assert_fits(out)
    assert sum(row[:1] == ["0.6"] for row in cells) == 1  # one table, never split into parts that repeat a column
    assert "(80 columns: σ²_1, σ²_2, σ²_3 left out; a wider terminal shows them)" in out


def test_compare_summary_fits_80_columns(narrow, capsys):
    from hdp_planner_cli.train import render_summary

    row = {"rounds": 50, "paper_rounds": 50, "trust": "secagg", "seeds": 3, "accuracy_mean": 71.234,
           "accuracy_std": 0.512, "epsilon_spent": [0.5, 1.5, 3.0], "lambda_measured": 1.172e-4,
           "lambda_planned": 1.171e-4, "wall_seconds_mean": 812.0}  # fmt: skip
    methods = ("DP-FedAvg", "GDPFed", "GDPFed-op", "GDPFed+", "IDP-FedAvg-Sample")
    summary = [dict(row, method=name, paper=71.88 if name == "DP-FedAvg" else None) for name in methods]
    console.out.print(render_summary("fmnist", 3, summary))
    cells = assert_fits(capsys.readouterr().out)
    assert all(any(row[:1] == [name] for row in cells) for name in methods)


def test_a_wide_table_stays_one_table_leaving_out_its_optional_columns_by_name():
    from rich import box

    table = Table(title="wide", box=box.SIMPLE_HEAD)
    for i in range(12):
        table.add_column(f"col {i:02d}", justify="right")
    for r in range(3):
        table.add_row(f"row-{r}", *(f"{r}.{i:06d}" for i in range(1, 12)))
    console.optional_columns(table, "col 11", "col 10", "col 09", "col 08", "col 07")  # 4 too many for 80
    target = Console(width=80, file=io.StringIO(), record=True)
    parts = console.fit_table(target, table)
    assert target.measure(parts[0]).maximum <= 80
    target.print(*parts)
    text = target.export_text()
    assert "…" not in text and text.count("row-1") == 1  # one table: the key column is never repeated
    assert all(f"1.{i:06d}" in text for i in range(1, 8)) and "1.000008" not in text  # every cell kept is whole
    said = " ".join(text.split())
    assert "(80 columns: col 11, col 10, col 09, col 08 left out; a wider terminal shows them)" in said
    assert console.fit_table(Console(width=200, file=io.StringIO()), table) == [table]


def test_progress_bar_stacks_its_description_in_80_columns():
    from hdp_planner_train.run.progress import progress_bar

    target = Console(width=80, file=io.StringIO(), record=True)  # not a terminal: the last frame only
    line = "round 12/50 acc 81.25% loss 0.512 ε spent/budget 0.213/0.5 0.64/1.5 1.28/3"
    with progress_bar(True, console=target) as bar:
        task = bar.add_task(line, total=50)
        bar.update(task, completed=12)
    description, progress = target.export_text().splitlines()
    assert description == line and "12/50" in progress and "ETA" in progress and len(progress) <= 80


def test_paths_are_printed_as_typed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a short path as typed: a long one wraps at 80 columns
    path = Path("[bold]plan.json")
    assert f"plan written to {path}" in run(*SOLVE, "-o", str(path))
    assert f"{path}: all 3 groups within budget" in run("verify", str(path))


def test_numbers_read_as_they_are():
    assert console.pct(1.0) == "100" and console.pct(0.3333) == "33" and console.pct(0.006265, 4) == "0.6265"
    assert console.pct(2e-9) != "0" and float(console.pct(2e-9)) == pytest.approx(2e-7)
    assert spent_of_budget(8.470899, 8.4709) == "8.4709 ≤ 8.4709"  # 4 digits would read 8.471, over the budget
    assert spent_of_budget(1e-7, 1e-6) == "1e-07 ≤ 1e-06"
    assert spent_of_budget(1 + 5e-10, 1.0) == "= 1 (to 9 digits)"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["groups"][2].update(epsilon=10.0), "groups[2].epsilon was edited (10; the plan was solved for 3"),
        (
            lambda d: d["noise"]["GDPFed+"]["epsilon"].__setitem__(2, 10.0),
            "noise.GDPFed+.epsilon[2] was edited (10; the other rows were solved for 3)",
        ),
    ],
)
def test_a_hand_edited_epsilon_is_named_with_the_fix(tmp_path, edit, message):
    path = tmp_path / "plan.json"
    run(*SOLVE, "-o", str(path))
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    result = runner.invoke(app, ["verify", str(path)])
    assert result.exit_code == 2
    assert message in result.stderr and "re-run hdp-plan solve" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_n_in_scientific_notation():
    assert run(*SOLVE[:-1], "6e3") == run(*SOLVE)
    result = runner.invoke(app, [*SOLVE[:-1], "1.5"])
    assert result.exit_code == 2 and "'1.5' is not a whole number" in result.stderr


def test_an_unwritable_output_is_one_line():
    result = runner.invoke(app, [*SOLVE, "-o", "/sys/plan.json"])  # read-only, or not ours to write
    assert result.exit_code == 2 and "Errno" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: cannot write /sys/plan.json: ")


def test_an_unwritable_figure_folder_is_one_line(tmp_path):
    plan = str(tmp_path / "plan.json")
    run(*SOLVE, "-o", plan)
    (tmp_path / "file").write_text("")
    folder = tmp_path / "file" / "figures"
    result = runner.invoke(app, ["plot", plan, "--out", str(folder)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"error: cannot write {folder}: a part of the path is not a directory"]


def test_an_os_error_no_command_caught_is_one_line(monkeypatch, capsys):
    def broken() -> None:
        raise OSError(30, "Read-only file system", "runs/out")

    monkeypatch.setattr(app_module, "app", broken)
    with pytest.raises(SystemExit) as exit_:
        app_module.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == "error: runs/out: the file system is read-only"


def test_an_os_error_passed_on_as_text_is_worded():
    text = str(FileExistsError(17, "File exists", "README.md"))
    assert console.error_line(text) == "README.md: it already exists"
    assert console.error_line("plain [bold]text[/]") == "plain [bold]text[/]"


def test_no_command_replaces_a_different_earlier_result_unless_asked(tmp_path, monkeypatch):
    """solve -o, assign -o, sweep --csv/--plot and plot --out: the same result written again is fine, a different
    one is refused (one line naming --overwrite, every file as it was) and replaced with --overwrite, said so."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "budgets.csv").write_text("client_id,epsilon\n" + "".join(f"c{i},{1 + i % 3}\n" for i in range(30)))
    sweep = ["sweep", "--eps", "1,2", "--n", "100", "--vary", "1", "--values"]
    commands = [
        ["solve", "--eps", "1,2", "--n", "100", "-o", "p.json"],
        ["assign", "p.json", "budgets.csv", "-o", "g.csv"],
        [*sweep, "1,2", "--csv", "s.csv", "--plot", "s.png"],
        ["plot", "p.json", "--out", "figs"],
    ]
    for args in commands:
        assert runner.invoke(app, args).exit_code == 0
        again = runner.invoke(app, args)
        assert again.exit_code == 0 and "(the same" in again.stdout, again.output
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    changed = [
        ["solve", "--eps", "1,2", "--n", "120", "-o", "p.json"],
        [*sweep, "1,3", "--csv", "s.csv", "--plot", "s.png"],
        ["solve", "--eps", "1,3", "--n", "100", "-o", "q.json"],
    ]
    for args in changed[:2]:
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and refused.stderr.startswith("error: "), refused.output
        assert "holds a different" in refused.stderr and "--overwrite replaces it" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing replaced
    replaced = runner.invoke(app, [*changed[0], "--overwrite"])
    assert replaced.exit_code == 0 and "plan written to p.json (it replaced a different plan)" in replaced.stdout
    assert runner.invoke(app, ["plot", "p.json", "--out", "figs"]).exit_code == 2  # its figures now differ


def test_save_plan_replaces_a_different_plan_only_when_asked(tmp_path):
    from hdp_planner import EarlierResult, load_plan, plan, save_plan

    path = tmp_path / "plan.json"
    save_plan(plan([1.0, 2.0], n=100), path)
    save_plan(plan([1.0, 2.0], n=100), path)  # the same plan: written again
    with pytest.raises(EarlierResult, match="holds a different plan: save_plan"):
        save_plan(plan([1.0, 2.0], n=120), path)
    assert load_plan(path).config.n == 100
    save_plan(plan([1.0, 2.0], n=120), path, overwrite=True)
    assert load_plan(path).config.n == 120
