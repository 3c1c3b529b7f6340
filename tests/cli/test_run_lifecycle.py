"""Runs that never lose work: finished results are never replaced without ``--overwrite``, an interrupted ``compare``
continues with ``--resume``, every output is checked before round 1 (and before the ledger is charged), a refused run
leaves no empty folder, and which runs the default privacy ledger charges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hdp_planner_cli.app import app

pytest.importorskip("torch")

runner = CliRunner()


def _one_line_error(result, needle: str) -> None:
    text = result.output.strip()
    assert result.exit_code == 2, text
    assert "Traceback" not in text and len(text.splitlines()) == 1 and text.startswith("error:"), text
    assert needle in text, text


@pytest.fixture
def digits_plan(tmp_path: Path) -> Path:
    path = tmp_path / "digits.json"
    args = ["solve", "--eps", "1,2,4", "--n", "120", "--rounds", "4", "--q", "0.2", "-o", str(path)]
    assert runner.invoke(app, args).exit_code == 0
    return path


def _spending(url: Path, federation: str) -> list:
    from hdp_planner.ledger.store import Ledger

    return Ledger(str(url)).spending(federation) if url.exists() else []


# ------------------------------------------------------------------ no silent overwrite


def test_train_refuses_a_finished_run_unless_overwrite(digits_plan, tmp_path):
    out = tmp_path / "run"
    base = ["train", str(digits_plan), "--dataset", "digits", "--rounds", "2", "--out", str(out)]
    assert runner.invoke(app, base).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    refused = runner.invoke(app, [*base, "--seeded-noise"])
    _one_line_error(refused, "--overwrite")
    assert "finished run" in refused.output
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing replaced
    replaced = runner.invoke(app, [*base, "--seeded-noise", "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert json.loads((out / "metrics.json").read_text())["noise_source"] == "seeded"


def test_a_refused_run_leaves_no_empty_out_folder(digits_plan, tmp_path):
    out = tmp_path / "deep" / "run"
    ledger = tmp_path / "l.sqlite"
    args = ["train", str(digits_plan), "--dataset", "digits", "--ledger", str(ledger)]
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "first")]).exit_code == 0  # spends the whole budget
    refused = runner.invoke(app, [*args, "--out", str(out)])
    _one_line_error(refused, "refused before round 1")
    assert not (tmp_path / "deep").exists()


# ------------------------------------------------------------------ outputs checked before round 1


UNWRITABLE = ["{tmp}/file/run"] + (["/proc/self"] if Path("/proc/self").is_dir() else [])
"""A folder that cannot be made (its parent is a file) and, on Linux, one that exists and takes no file, as a
read-only folder (even for root)."""


@pytest.mark.parametrize("target", UNWRITABLE)
def test_an_unwritable_train_out_fails_before_round_1_and_charges_nothing(digits_plan, tmp_path, target):
    (tmp_path / "file").write_text("not a folder")
    ledger = tmp_path / "l.sqlite"
    result = runner.invoke(app, ["train", str(digits_plan), "--dataset", "digits", "--ledger", str(ledger),
                                 "--out", target.format(tmp=tmp_path)])  # fmt: skip
    _one_line_error(result, "cannot write")
    assert "Errno" not in result.output and "round 1/" not in result.output
    assert _spending(ledger, "simulation") == []


def test_an_unwritable_compare_out_fails_before_round_1(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    result = runner.invoke(app, ["compare", "--dataset", "digits", "--methods", "dp-fedavg", "--seeds", "1",
                                 "--rounds", "2", "--out", str(tmp_path / "file" / "grid")])  # fmt: skip
    _one_line_error(result, "cannot write")
    assert "note: seeded" not in result.output


@pytest.mark.parametrize("target", UNWRITABLE)
def test_an_unwritable_flower_out_fails_before_training_and_charges_nothing(digits_plan, tmp_path, target):
    pytest.importorskip("flwr")
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_flower.simulation import run_flower
    from hdp_planner_train.run.options import configure

    (tmp_path / "file").write_text("not a folder")
    ledger = tmp_path / "l.sqlite"
    lines: list[str] = []
    cfg = configure(
        FlowerConfig,
        plan=str(digits_plan),
        dataset="digits",
        rounds=1,
        in_process=True,
        ledger=str(ledger),
        out=target.format(tmp=tmp_path),
    )
    with pytest.raises(ValueError, match="cannot write"):
        run_flower(cfg, progress=lines.append)
    assert lines == [] and _spending(ledger, "flower") == []


# ------------------------------------------------------------------ compare: overwrite, interrupt, resume


def _grid_args(out: Path, *extra: str) -> list[str]:
    return ["compare", "--dataset", "digits", "--methods", "dp-fedavg,gdpfed+", "--seeds", "1", "--rounds", "3",
            "--eps", "1,2,4", "--out", str(out), *extra]  # fmt: skip


def test_compare_interrupted_says_how_to_go_on_and_resume_continues(tmp_path, monkeypatch):
    """Ctrl-C in the second run of a grid: one line, status 130; ``--resume`` reuses the first run and continues the
    second from its checkpoint; a plain rerun is refused naming both flags, a resume under other settings too."""
    from hdp_planner_train.simulator import template

    out = tmp_path / "grid"
    saved = template.save_checkpoint
    calls = []

    def interrupt_in_second_run(*args, **kwargs):
        saved(*args, **kwargs)
        calls.append(1)
        if len(calls) == 4:  # the first run saved 3 rounds; the second has saved its round 1
            raise KeyboardInterrupt

    monkeypatch.setattr(template, "save_checkpoint", interrupt_in_second_run)
    stopped = runner.invoke(app, _grid_args(out))
    assert stopped.exit_code == 130
    assert stopped.output.strip().splitlines()[-1] == (
        "interrupted after 1 of 2 runs; run the same command with --resume to continue"
    )
    monkeypatch.setattr(template, "save_checkpoint", saved)

    again = runner.invoke(app, _grid_args(out))
    _one_line_error(again, "a compare grid of this plan: continue it with --resume")
    assert "--overwrite" in again.output
    for extra in ((), ("--resume",)):  # a grid of another plan: --resume is never the advice
        other = runner.invoke(app, _grid_args(out, *extra, "--q", "0.3"))
        _one_line_error(other, "a compare grid of another plan: replace it with --overwrite, or choose another --out")

    resumed = runner.invoke(app, _grid_args(out, "--resume"))
    assert resumed.exit_code == 0, resumed.output
    assert resumed.output.count("(reused)") == 1
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["method"], [h["round"] for h in r["history"]]) for r in runs] == [
        ("dp-fedavg", [1, 2, 3]),
        ("gdpfed+", [1, 2, 3]),
    ]
    replaced = runner.invoke(app, _grid_args(out, "--overwrite", "--eval-every", "5"))
    assert replaced.exit_code == 0, replaced.output
    assert "(reused)" not in replaced.output
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [[h["round"] for h in r["history"]] for r in runs] == [[3], [3]]  # the last round is always evaluated


# ------------------------------------------------------------------ which runs the default ledger charges


def test_a_secure_run_on_public_data_charges_no_default_ledger_and_says_why(digits_plan, tmp_path, monkeypatch):
    default = tmp_path / "default.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(default))
    base = ["train", str(digits_plan), "--dataset", "digits", "--rounds", "2"]
    result = runner.invoke(app, [*base, "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "privacy ledger not charged: digits is public data" in result.output
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())
    assert metrics["noise_source"] == "secure" and metrics["ledger"].startswith("not charged: digits is public")
    assert all(0 < e["epsilon_spent"] <= e["epsilon_budget"] for e in metrics["epsilon_spent"])  # still reported
    assert not default.exists()

    named = runner.invoke(app, [*base, "--out", str(tmp_path / "b"), "--federation", "hospital"])
    assert named.exit_code == 0, named.output
    assert "privacy ledger charged: the default ledger, federation hospital" in named.output
    assert {s.released_rounds for s in _spending(default, "hospital")} == {2}


def test_flower_on_public_data_charges_no_default_ledger_as_train(digits_plan, tmp_path, monkeypatch):
    """One rule in every command: Flower's virtual nodes on bundled public data are simulated clients too."""
    pytest.importorskip("flwr")
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_flower.simulation import run_flower
    from hdp_planner_train.run.options import configure

    default = tmp_path / "default.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(default))
    cfg = configure(FlowerConfig, plan=str(digits_plan), dataset="digits", rounds=1, in_process=True)
    metrics = run_flower(cfg, progress=lambda line: None)
    assert metrics["ledger"].startswith("not charged: digits is public data") and not default.exists()


def test_a_simulation_charged_by_name_is_never_written_beside_real_clients(digits_plan, tmp_path, monkeypatch):
    default = tmp_path / "default.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(default))
    budgets, groups, real_plan = tmp_path / "budgets.csv", tmp_path / "groups.csv", tmp_path / "real.json"
    budgets.write_text("client_id,epsilon\n" + "".join(f"{i},{(1, 2, 4)[i // 40]}\n" for i in range(120)))
    solve = ["solve", "--budgets", str(budgets), "--groups", "3", "--rounds", "4", "--q", "0.2", "-o", str(real_plan)]
    assert runner.invoke(app, solve).exit_code == 0
    assert runner.invoke(app, ["assign", str(real_plan), str(budgets), "-o", str(groups)]).exit_code == 0
    base = ["--dataset", "digits", "--rounds", "1"]
    real = runner.invoke(app, ["train", str(real_plan), *base, "--groups", str(groups), "--out", str(tmp_path / "r")])
    assert real.exit_code == 0, real.output
    named = runner.invoke(app, ["train", str(digits_plan), *base, "--federation", "hospital", "--out",
                               str(tmp_path / "h")])  # fmt: skip
    _one_line_error(named, "holds real clients (named by groups files): a simulation's clients 0..119 are never")
    assert len(_spending(default, "hospital")) == 0


def test_a_users_own_clients_always_charge_the_default_ledger(tmp_path, monkeypatch):
    default = tmp_path / "default.sqlite"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(default))
    budgets = tmp_path / "budgets.csv"
    budgets.write_text("client_id,epsilon\n" + "".join(f"c{i},{(1, 2, 4)[i % 3]}\n" for i in range(120)))
    plan_path, groups = tmp_path / "plan.json", tmp_path / "groups.csv"
    solve = ["solve", "--budgets", str(budgets), "--groups", "3", "--rounds", "4", "--q", "0.2", "-o",
             str(plan_path)]  # fmt: skip
    assert runner.invoke(app, solve).exit_code == 0
    assert runner.invoke(app, ["assign", str(plan_path), str(budgets), "-o", str(groups)]).exit_code == 0
    result = runner.invoke(app, ["train", str(plan_path), "--dataset", "digits", "--rounds", "1", "--groups",
                                 str(groups), "--out", str(tmp_path / "r")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "privacy ledger charged: the default ledger" in result.output
    assert len(_spending(default, "simulation")) == 120


# ------------------------------------------------------------------ a plan's trust model is followed


@pytest.fixture
def secagg_plan(tmp_path: Path) -> Path:
    from hdp_planner_train.learning.models import model_dim

    path = tmp_path / "digits-secagg.json"
    args = ["solve", "--eps", "1,2,4", "--n", "120", "--rounds", "3", "--q", "0.7", "--trust", "secagg",
            "--model-dim", str(model_dim("digits")), "-o", str(path)]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    return path


def test_train_follows_the_plans_trust_model_and_refuses_a_contradicting_flag(secagg_plan, tmp_path):
    base = ["train", str(secagg_plan), "--dataset", "digits", "--rounds", "1", "--seeded-noise"]
    followed = runner.invoke(app, [*base, "--out", str(tmp_path / "a")])
    assert followed.exit_code == 0, followed.output
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["trust"]["kind"] == "secagg"

    refused = runner.invoke(app, [*base, "--trust", "server", "--out", str(tmp_path / "b")])
    _one_line_error(refused, "--override-trust")
    assert not (tmp_path / "b").exists()
    overridden = runner.invoke(app, [*base, "--trust", "server", "--override-trust", "--out", str(tmp_path / "b")])
    assert overridden.exit_code == 0, overridden.output
    trust = json.loads((tmp_path / "b" / "metrics.json").read_text())["trust"]
    assert trust == {"kind": "server", "plan_trust": "secagg"}


def test_flower_follows_the_plans_trust_model(secagg_plan, digits_plan):
    pytest.importorskip("flwr")
    from hdp_planner_flower.preparation import FlowerConfig, prepare
    from hdp_planner_train.run.options import configure

    assert (
        prepare(configure(FlowerConfig, plan=str(secagg_plan), dataset="digits", rounds=1)).cfg.trust.kind == "secagg"
    )
    assert (
        prepare(configure(FlowerConfig, plan=str(digits_plan), dataset="digits", rounds=1)).cfg.trust.kind == "server"
    )
    with pytest.raises(ValueError, match="--override-trust"):
        prepare(configure(FlowerConfig, plan=str(secagg_plan), dataset="digits", rounds=1, trust="server"))
    chosen = prepare(configure(FlowerConfig, plan=str(secagg_plan), dataset="digits", rounds=1, trust="server",
                               override_trust=True))  # fmt: skip
    assert chosen.cfg.trust.kind == "server"


def test_convergence_panels_tick_whole_rounds():
    from hdp_planner.report.plots import pyplot, round_ticks

    plt = pyplot()
    fig, (plain, ticked) = plt.subplots(1, 2)
    for ax in (plain, ticked):
        ax.plot([1, 2, 3], [10.0, 40.0, 55.0], marker="o")
    round_ticks(ticked)
    fig.canvas.draw()
    assert not all(float(t).is_integer() for t in plain.get_xticks())  # matplotlib's default: 1.25, 1.5, …
    assert all(float(t).is_integer() for t in ticked.get_xticks())
    plt.close(fig)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs a folder no one can write into (Linux /proc)")
def test_an_unwritable_plot_folder_fails_before_any_figure(digits_plan, monkeypatch):
    """A folder that exists but takes no file (as a read-only one, even for root): refused before drawing."""
    from hdp_planner.report import plots

    drawn = []
    monkeypatch.setattr(plots, "draw_comparison", lambda *args: drawn.append(1))
    result = runner.invoke(app, ["plot", str(digits_plan), "--out", "/proc/self"])
    _one_line_error(result, "cannot write /proc/self")
    assert drawn == []


def test_secagg_counts_its_sample_against_the_grids_nodes():
    """SecAgg+ logs "sampled c clients (out of N)": N is the grid's node count, not the empty legacy client manager."""
    pytest.importorskip("flwr")
    from hdp_planner_flower.local import InProcessGrid
    from hdp_planner_flower.secagg_workflow import GridNodes

    assert GridNodes(InProcessGrid(None, 7)).num_available() == 7


@pytest.mark.parametrize(
    ("settings", "charged"),
    [
        ({}, False),  # public digits, the simulator's clients
        ({"dataset": "fmnist"}, False),
        ({"dataset": "shakespeare"}, False),
        ({"data_dir": "my-data"}, True),  # a user's own files, whatever the dataset's name
        ({"dataset": "cifar10", "data_dir": "cifar"}, True),
        ({"groups": "groups.csv"}, True),  # a user's own clients
        ({"federation": "hospital"}, True),
        ({"ledger": "mine.sqlite"}, True),  # explicit
        ({"ledger": "mine.sqlite", "noise": "seeded"}, True),
        ({"noise": "seeded", "federation": "hospital"}, False),  # a seeded simulation is never released
        ({"ledger": "none", "federation": "hospital"}, False),
    ],
)
def test_which_runs_the_ledger_charges(settings, charged, monkeypatch):
    from hdp_planner_train.run.ledger import ledger_target
    from hdp_planner_train.run.noise import noise_kind
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.scaffold import TrainConfig

    monkeypatch.setenv("HDP_PLANNER_LEDGER", "default.sqlite")
    cfg = configure(TrainConfig, dataset=settings.pop("dataset", "digits"), out="run", **settings)
    target, why = ledger_target(cfg, noise_kind(cfg) == "secure")
    assert (target is not None) == charged and why.startswith("charged" if charged else "not charged")


@pytest.mark.slow  # two real processes of a 20-round grid: about a minute
def test_compare_stopped_by_a_real_sigint_resumes_to_the_uninterrupted_result(tmp_path):
    """SIGINT to a real ``hdp-plan compare`` while its second run trains: exit status 130 and one line on stderr;
    ``--resume`` reuses the first run and continues the second from its checkpoint to the result of an uninterrupted
    grid (seeded noise: bit for bit)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    def grid(out: Path) -> list[str]:
        return [sys.executable, "-m", "hdp_planner", "compare", "--dataset", "digits", "--methods", "dp-fedavg,gdpfed+",
                "--seeds", "1", "--rounds", "20", "--eps", "1,2,4", "--out", str(out)]  # fmt: skip

    env = dict(os.environ, MPLBACKEND="Agg")
    whole = subprocess.run(grid(tmp_path / "whole"), capture_output=True, text=True, env=env, timeout=600)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "stopped"
    proc = subprocess.Popen(grid(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 600
    while not (out / "gdpfed+" / "seed0" / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert err.strip() == "interrupted after 1 of 2 runs; run the same command with --resume to continue"
    resumed = subprocess.run([*grid(out), "--resume"], capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("(reused)") == 1

    def histories(folder: Path) -> list:
        return [r["history"] for r in json.loads((folder / "results.json").read_text())["runs"]]

    assert histories(out) == histories(tmp_path / "whole")
