"""Ctrl-C in ``hdp-plan flower`` gives back the rounds never released and finishes the run in the ledger, so a
rerun is not refused; its refusal names only options ``flower`` has."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from hdp_planner import plan, save_plan
from hdp_planner.ledger.store import Ledger
from hdp_planner_flower.preparation import FlowerConfig
from hdp_planner_flower.simulation import run_flower
from hdp_planner_train.run.options import configure

N, ROUNDS = 30, 6
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tight_plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan((1.0, 2.0, 4.0), N, rounds=ROUNDS, q=0.3, clip=1.0), path)
    return path


def _charged(ledger) -> set[tuple[int, int]]:
    return {(s.released_rounds, s.reserved_rounds) for s in Ledger(str(ledger)).spending()}


def _cfg(path, ledger, rounds=None):
    return configure(FlowerConfig, plan=str(path), dataset="digits", clients=N, rounds=rounds, in_process=True,
                        ledger=str(ledger))  # fmt: skip


def test_ctrl_c_in_flower_gives_back_the_rest_and_a_rerun_fits(tight_plan, tmp_path):
    """A real SIGINT after round 2's line: 2 rounds released, none reserved, the run finished; the 4 rounds left
    run; one more is refused with a hint that names no option ``flower`` lacks."""
    ledger = tmp_path / "l.sqlite"

    def progress(line: str) -> None:
        if line.startswith("round 2/"):
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        run_flower(_cfg(tight_plan, ledger), progress=progress)
    assert _charged(ledger) == {(2, 0)}
    assert [r.status for r in Ledger(str(ledger)).runs()] == ["finished"]
    assert run_flower(_cfg(tight_plan, ledger, ROUNDS - 2), progress=lambda line: None)["rounds"] == ROUNDS - 2
    assert _charged(ledger) == {(ROUNDS, 0)}
    with pytest.raises(ValueError, match="refused before round 1") as refused:
        run_flower(_cfg(tight_plan, ledger, 1), progress=lambda line: None)
    assert "--seeded-noise" not in str(refused.value) and "--ledger none" in str(refused.value)


@pytest.mark.slow  # Flower's simulation engine (Ray) in a real process: about a minute
def test_a_real_ctrl_c_to_flower_on_ray_strands_no_budget(tight_plan, tmp_path):
    ledger = tmp_path / "l.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    args = [sys.executable, "-m", "hdp_planner", "flower", str(tight_plan), "--dataset", "digits", "--clients",
            str(N), "--ledger", str(ledger)]  # fmt: skip
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    line = ""
    while proc.poll() is None and time.monotonic() < deadline and not line.startswith("round 2/"):
        line = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    charged = _charged(ledger)
    assert len(charged) == 1 and next(iter(charged))[1] == 0  # nothing left reserved
    released = next(iter(charged))[0]
    assert 2 <= released < ROUNDS
    done = subprocess.run([*args, "--rounds", str(ROUNDS - released), "--in-process"], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _charged(ledger) == {(ROUNDS, 0)}
