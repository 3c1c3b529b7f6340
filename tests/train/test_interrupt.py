"""Interrupted runs never strand budget: Ctrl-C in ``train`` or ``flower`` gives back the rounds never released and
finishes the run in the ledger, so a rerun is not refused, and ``train --resume`` after Ctrl-C always continues:
a Ctrl-C between a round's release and its checkpoint is held until the checkpoint is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.ledger.store import Ledger  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator import checkpoint, template  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, run  # noqa: E402

ROUNDS = 6


@pytest.fixture(scope="module")
def tight_plan(tmp_path_factory):
    """A plan whose T rounds spend each group's whole budget: one extra round charged is refused."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=ROUNDS, q=0.2, clip=1.0), path)
    return path


def _charged(ledger) -> set[tuple[int, int]]:
    return {(s.released_rounds, s.reserved_rounds) for s in Ledger(str(ledger)).spending()}


def test_ctrl_c_between_a_release_and_its_checkpoint_is_held_and_resume_continues(tight_plan, tmp_path, monkeypatch):
    """A real SIGINT while round 3's progress line is written (after its release, before its checkpoint): the
    checkpoint holds round 3, the ledger released exactly 3 rounds and gave back the rest, and ``--resume``
    finishes the plan within the budget."""
    out, ledger = tmp_path / "run", tmp_path / "l.sqlite"
    describe = template.round_description

    def interrupting(plan_, spec, *, done, rounds, acc, loss):
        if done == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return describe(plan_, spec, done=done, rounds=rounds, acc=acc, loss=loss)

    monkeypatch.setattr(template, "round_description", interrupting)
    cfg = configure(TrainConfig, dataset="digits", out=str(out), ledger=str(ledger), progress=False)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, tight_plan)
    assert checkpoint.load(out)["next_round"] == 3
    assert _charged(ledger) == {(3, 0)}
    assert [r.status for r in Ledger(str(ledger)).runs()] == ["finished"]
    monkeypatch.setattr(template, "round_description", describe)
    resumed = run(configure(TrainConfig, dataset="digits", out=str(out), ledger=str(ledger),
                              progress=False, resume=True), str(tight_plan))  # fmt: skip
    assert resumed["rounds"] == ROUNDS and _charged(ledger) == {(ROUNDS, 0)}


def test_ctrl_c_during_a_round_gives_back_the_rounds_never_released(tight_plan, tmp_path, monkeypatch):
    """Ctrl-C while a round trains, without --out: nothing is left reserved, and a full rerun fits the budget."""
    ledger = tmp_path / "l.sqlite"
    evaluate = template.global_evaluation

    def interrupting(model, x, y):
        entry = evaluate(model, x, y)

        def at(r, lr):
            if r == 1:
                raise KeyboardInterrupt
            return entry(r, lr)

        return at

    monkeypatch.setattr("hdp_planner_train.simulator.template.global_evaluation", interrupting)
    cfg = configure(TrainConfig, dataset="digits", noise="secure", ledger=str(ledger), progress=False)
    with pytest.raises(KeyboardInterrupt):
        run(cfg, tight_plan)
    assert _charged(ledger) == {(2, 0)}
    monkeypatch.undo()
    assert run(configure(TrainConfig, dataset="digits", noise="secure", ledger=str(ledger),
                           progress=False, rounds=ROUNDS - 2), str(tight_plan))["rounds"] == ROUNDS - 2  # fmt: skip
    assert _charged(ledger) == {(ROUNDS, 0)}


@pytest.mark.slow  # a real `hdp-plan train` process interrupted several times: about a minute
def test_a_real_ctrl_c_at_any_moment_then_resume_always_continues(tight_plan, tmp_path):
    """SIGINT to a real ``hdp-plan train`` at several moments after its first checkpoint, each followed by
    ``--resume``: every resume continues, and at the end the ledger has released exactly the plan's rounds."""
    out, ledger = tmp_path / "run", tmp_path / "l.sqlite"
    args = [sys.executable, "-m", "hdp_planner", "train", str(tight_plan), "--dataset", "digits", "--ledger",
            str(ledger), "--out", str(out), "--rounds", str(ROUNDS)]  # fmt: skip
    for i, delay in enumerate((0.0, 0.15, 0.3)):
        proc = subprocess.Popen([*args, *(["--resume"] if i else [])], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        start = checkpoint.load(out)["next_round"] if i else 0
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if (out / checkpoint.CHECKPOINT).exists() and checkpoint.load(out)["next_round"] > start:
                break
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        finished = (out / "metrics.json").is_file()  # a SIGINT that lands while the interpreter shuts down after a
        # finished run finds Python's handler gone (the default kills): the run is whole, nothing is left to continue
        assert proc.returncode in (0, 130) or (finished and proc.returncode == -signal.SIGINT), err
        saved = checkpoint.load(out)["next_round"]
        assert {(r, 0) for r in [saved]} == _charged(ledger), err  # released = checkpointed, nothing reserved
        if proc.returncode == 0 or finished:
            break
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 or "already ran" in done.stderr, done.stderr
    assert _charged(ledger) == {(ROUNDS, 0)}
