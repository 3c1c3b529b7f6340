"""Rough edges a new user hits: help and version, error messages, file modes, and what `solve` advises."""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner_cli.app import app

runner = CliRunner()


def test_version_is_printed():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"hdp-plan \d+\.\d+\.\d+\n", result.output)


def test_a_typo_suggests_the_command_once():
    result = runner.invoke(app, ["solv"])
    assert result.exit_code == 2
    assert result.output.count("Did you mean") == 1 and "'solve'" in result.output


def test_command_list_is_not_cut():
    result = runner.invoke(app, ["--help"], terminal_width=100)
    commands = result.output.split("Commands:")[1]
    assert "..." not in commands
    for name in ("solve", "verify", "train", "flower"):
        assert re.search(rf"^\s+{name}\s+\S", commands, re.M), name


def test_option_values_are_named_and_defaults_plain():
    result = runner.invoke(app, ["solve", "--help"], terminal_width=120)
    assert result.exit_code == 0
    assert "TEXT" not in result.output and "<str>" not in result.output
    assert "--eps E1,E2,…" in result.output and "--clip CLIP" in result.output
    assert "[default: 50]" in result.output and "\\[" not in result.output


@pytest.mark.parametrize(
    ("target", "reason"),
    [("{tmp}", "it is a directory"), ("{tmp}/missing/plan.json", "does not exist")],
)
def test_write_errors_name_the_file_and_the_reason(tmp_path, target, reason):
    path = target.format(tmp=tmp_path)
    result = runner.invoke(app, ["solve", "--eps", "0.5,1", "--n", "100", "-o", path])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: cannot write {path}: ") and reason in result.output
    assert "Errno" not in result.output and len(result.output.strip().splitlines()) == 1
    assert not [p for p in tmp_path.rglob(".*")]  # no temporary file left behind


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_folder_is_a_clean_error(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    result = runner.invoke(app, ["solve", "--eps", "0.5,1", "--n", "100", "-o", str(folder / "plan.json")])
    assert result.exit_code == 2 and "permission denied" in result.output and "Errno" not in result.output


def test_colons_are_not_emoji():
    result = runner.invoke(app, ["sweep", "--eps", "0.5,1", "--n", "100", "--vary", "1", "--range", "1:2"])
    assert result.exit_code == 2 and "a:b:steps" in result.output


def test_figures_get_the_mode_of_a_plain_write(tmp_path):
    plan_file = tmp_path / "plan.json"
    assert runner.invoke(app, ["solve", "--eps", "0.5,1", "--n", "100", "-o", str(plan_file)]).exit_code == 0
    old = os.umask(0o022)
    try:
        result = runner.invoke(app, ["plot", str(plan_file), "--out", str(tmp_path / "figs")])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    figures = list((tmp_path / "figs").iterdir())
    assert figures and all(stat.S_IMODE(f.stat().st_mode) == 0o644 for f in figures)


def test_solve_explains_problem_1_in_words():
    result = runner.invoke(app, ["solve", "--eps", "0.5,1.5,3.0", "--n", "6000"], terminal_width=200)
    assert "μ4·Σω" not in result.output and "bound on the training error" in result.output


def test_starved_group_advice_fits_the_sigma_model():
    """Without the share rule (min_share 0: a group can starve), the advice names the σ model the plan lacks."""
    bound = plan([0.5, 10.0], n=200, q=0.02, sigma_model="bound", min_share=0)
    for note in bound.notes:
        assert "--sigma-model bound" not in note
    exact = plan([0.5, 1.5, 3.0], n=6000, sigma_model="accountant", min_share=0)
    assert any("starved" in n and "--sigma-model bound" in n for n in exact.notes)


def test_negligible_sparsity_is_said():
    dense = plan([0.5, 1.5, 3.0], n=6000)
    assert min(dense.method("GDPFed+").k_ratio) >= 0.999
    assert any("GDPFed+ is GDPFed-op here" in n for n in dense.notes)
    sparse = plan([0.5, 1.5, 3.0], n=6000, sparsity=(0.7, 0.8, 0.9))
    assert not any("GDPFed+ is GDPFed-op" in n for n in sparse.notes)


def test_plot_draws_every_row_of_the_plan(tmp_path):
    from hdp_planner import add_baselines
    from hdp_planner.report import plots

    p = add_baselines(plan([0.5, 1.5, 3.0], n=6000, clip=1.5), ("HDP-Pooled", "IDP-FedAvg-Scale"))
    plt = plots.pyplot()
    fig = plots.draw_comparison(plt, p)
    drawn = [t.get_text() for t in fig.axes[1].get_yticklabels()]
    plt.close(fig)
    assert sorted(drawn) == sorted(m.name for m in p.methods) and "HDP-Pooled" in drawn
    assert (tmp_path / "comparison.png") in plots.plot_plan(p, tmp_path)


def test_sweep_title_does_not_fix_the_varied_parameter():
    from hdp_planner import Groups, PlanConfig
    from hdp_planner.report.plots import draw_sweep, pyplot
    from hdp_planner.report.sweep import sweep_plan

    config = PlanConfig(n=600, q=0.1)
    result = sweep_plan(Groups.from_budgets((2.0, 6.0, 12.0), 600), config, "rounds", [50, 100])
    plt = pyplot()
    fig, ax = plt.subplots()
    draw_sweep(ax, result)
    assert "T =" not in ax.get_title() and "n = 600" in ax.get_title().replace("$", "")
    plt.close(fig)


def test_flower_environment_leaves_no_temporary_home(monkeypatch):
    from hdp_planner_flower import offline_environment

    monkeypatch.delenv("FLWR_HOME", raising=False)
    with pytest.raises(KeyboardInterrupt), offline_environment() as chosen:
        home = chosen["FLWR_HOME"]
        assert os.path.isdir(home) and os.environ["FLWR_HOME"] == home
        raise KeyboardInterrupt
    assert not os.path.exists(home) and "FLWR_HOME" not in os.environ


@pytest.mark.slow
def test_ctrl_c_stops_a_flower_run_within_seconds(tmp_path):
    """SIGINT during `hdp-plan flower`: exit 130 in seconds, Ray shut down, no temporary Flower home left."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    pytest.importorskip("flwr")
    plan_file = tmp_path / "digits.json"
    assert runner.invoke(app, ["solve", "--eps", "1,2,4", "--n", "120", "--rounds", "30", "--q", "0.2",
                               "-o", str(plan_file)]).exit_code == 0  # fmt: skip
    before = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("hdp-flwr-")}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plan_file.parents[0]), *sys.path]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "hdp_planner", "flower", str(plan_file), "--dataset", "digits"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        for line in proc.stdout:  # wait until rounds are running
            if line.startswith("round 2/"):
                break
        proc.send_signal(signal.SIGINT)
        start = time.monotonic()
        code = proc.wait(timeout=60)
        elapsed = time.monotonic() - start
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert code == 130 and elapsed < 15, (code, elapsed)
    assert "interrupted" in proc.stderr.read()
    after = {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("hdp-flwr-")}
    assert after <= before
    deadline, leftovers = time.monotonic() + 10, ["?"]
    while leftovers and time.monotonic() < deadline:  # Ray's helpers exit a moment after its shutdown call
        time.sleep(0.5)
        found = subprocess.run(["pgrep", "-a", "-s", str(proc.pid)], capture_output=True, text=True)
        leftovers = found.stdout.splitlines()
    assert not leftovers, f"processes of the run still alive: {leftovers}"


def test_progress_line_names_every_groups_spending():
    pytest.importorskip("torch")
    from hdp_planner_train.rules.specs import method_spec
    from hdp_planner_train.run.progress import round_description

    p = plan([0.5, 1.5, 3.0], n=600, rounds=10, q=0.1)
    line = round_description(p, method_spec(p, "gdpfed+"), done=10, rounds=10, acc=50.0, loss=1.0)
    spent = re.search(r"ε spent/budget (\S+) (\S+) (\S+)$", line)
    assert spent, line
    assert [float(x.split("/")[1]) for x in spent.groups()] == [0.5, 1.5, 3.0]
    assert all(float(a) <= float(b) for a, b in (x.split("/") for x in spent.groups()))


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_a_budgets_file_saved_with_a_byte_order_mark_is_read(tmp_path, suffix):
    from hdp_planner.planning.budgets import load_budgets

    path = tmp_path / f"clients{suffix}"
    text = "client_id,epsilon\nc1,0.5\nc2,1.5\n" if suffix == ".csv" else '{"c1": 0.5, "c2": 1.5}'
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    ids, eps = load_budgets(path)
    assert list(ids) == ["c1", "c2"] and list(eps) == [0.5, 1.5]


def digits_plan(tmp_path):
    plan_file = tmp_path / "digits.json"
    args = ["solve", "--eps", "1,2,4", "--n", "120", "--rounds", "3", "--q", "0.2", "-o", str(plan_file)]
    assert runner.invoke(app, args).exit_code == 0
    return plan_file


def test_an_unfinished_run_is_not_overwritten_silently(tmp_path):
    pytest.importorskip("torch")
    plan_file, out = digits_plan(tmp_path), tmp_path / "run"
    base = ["train", str(plan_file), "--dataset", "digits", "--rounds", "2", "--out", str(out), "--seeded-noise"]
    assert runner.invoke(app, base).exit_code == 0
    (out / "metrics.json").unlink()  # as a run stopped after its last checkpoint leaves it
    before = (out / "checkpoint.pt").read_bytes()
    refused = runner.invoke(app, base)
    assert refused.exit_code == 2 and "unfinished run" in refused.output and "--resume" in refused.output
    assert (out / "checkpoint.pt").read_bytes() == before
    assert runner.invoke(app, [*base, "--resume"]).exit_code == 0
    (out / "metrics.json").unlink()
    assert runner.invoke(app, [*base, "--overwrite"]).exit_code == 0


def test_ctrl_c_in_train_says_how_to_resume(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from hdp_planner_train.simulator import trainer

    plan_file, out = digits_plan(tmp_path), tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)  # a short path as typed: the message wraps at 80 columns, not inside this check

    def starting(cfg, plan):  # stopped before its first round: the checkpoint there is an earlier run's
        raise KeyboardInterrupt

    def running(cfg, plan):  # stopped after this run checkpointed a round
        (Path(cfg.output.out) / "checkpoint.pt").write_bytes(b"round 1")
        raise KeyboardInterrupt

    args = ["train", str(plan_file), "--dataset", "digits", "--out", "run", "--overwrite"]
    monkeypatch.setattr(trainer, "run", starting)
    result = runner.invoke(app, args)
    assert result.exit_code == 130 and result.output.strip() == "interrupted before the first round was checkpointed"
    monkeypatch.setattr(trainer, "run", running)
    result = runner.invoke(app, args)
    assert result.exit_code == 130 and "checkpointed in run; to continue, run the same command with --resume" in (
        result.output
    )
    bare = runner.invoke(app, args[:4])  # no --out: the checkpoint kept in a folder of its own, named
    kept = Path(bare.output.split("checkpointed in ")[1].split(";")[0])
    assert bare.exit_code == 130 and f"add --out {kept} --resume --seeded-noise" in bare.output
    assert (kept / "checkpoint.pt").is_file()
    shutil.rmtree(kept)


def test_bench_vs_pfl_without_pfl_says_how_to_set_it_up(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_vs_pfl.py"
    done = subprocess.run(
        [sys.executable, str(script), "--pfl-python", str(tmp_path / "no-python")], capture_output=True, text=True
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "pfl is not importable" in done.stderr and "pip install torch==2.13.0 'pfl[pytorch]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
