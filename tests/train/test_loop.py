"""The round loop every run drives (simulator and Flower): order of a round's events, cadence, stop, ledger close."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner_train.rounds.loop import RunLog, Schedule, run_rounds


class Account:
    def __init__(self, events: list) -> None:
        self.events = events

    def release(self, rnd: int) -> None:
        self.events.append(("release", rnd))

    def finish(self) -> None:
        self.events.append(("finish",))


STATS = SimpleNamespace(lambda_measured=0.5, lambda_applied=0.25, joined=[1, 2])


def hooks(events: list):
    def step(r, lr):
        events.append(("step", r, lr))
        return STATS, lambda: events.append(("apply", r))

    def evaluate(r, lr):
        events.append(("evaluate", r))
        return {"round": r + 1, "accuracy": float(r), "loss": 1.0}

    return step, evaluate


def test_a_round_is_charged_before_its_update_and_the_ledger_is_closed_once():
    events: list = []
    step, evaluate = hooks(events)
    log = RunLog()
    reason = run_rounds(Schedule(rounds=2, lr=0.1, lr_decay=0.5), log, step=step, evaluate=evaluate,
                        account=Account(events), checkpoint=lambda: events.append(("checkpoint",)))  # fmt: skip
    assert reason is None
    assert events == [
        ("step", 0, 0.1), ("release", 0), ("apply", 0), ("evaluate", 0), ("checkpoint",),
        ("step", 1, 0.05), ("release", 1), ("apply", 1), ("evaluate", 1), ("checkpoint",),
        ("finish",),
    ]  # fmt: skip
    assert log.next_round == 2 and [h["round"] for h in log.history] == [1, 2] and log.joined == [[1, 2]] * 2


def test_a_failing_round_releases_nothing_and_still_closes_the_ledger():
    events: list = []

    def step(r, lr):
        raise RuntimeError("client crashed")

    with pytest.raises(RuntimeError):
        run_rounds(Schedule(rounds=3), RunLog(), step=step, account=Account(events))
    assert events == [("finish",)]


def test_stop_ends_the_run_before_the_round_it_names():
    events: list = []
    step, _ = hooks(events)
    log = RunLog(diagnostics=False)
    reason = run_rounds(Schedule(rounds=5), log, step=step, stop=lambda r: "over budget" if r == 3 else None)
    assert reason == "over budget" and log.next_round == 3 and [e[1] for e in events if e[0] == "step"] == [0, 1, 2]
    assert log.joined == [] and log.round_seconds == []  # a deployed run keeps nothing that reveals who took part


@settings(max_examples=30, deadline=None)
@given(rounds=st.integers(1, 30), every=st.integers(1, 10), start=st.integers(0, 30))
def test_evaluation_cadence_and_resume(rounds, every, start):
    """Evaluated after every ``eval_every`` rounds and after the last; a resumed log runs only the rounds left."""
    start = min(start, rounds)
    events: list = []
    step, evaluate = hooks(events)
    log = RunLog(next_round=start)
    reported: list = []
    run_rounds(Schedule(rounds=rounds, eval_every=every), log, step=step, evaluate=evaluate,
               report=lambda done, entry, stats, s: reported.append((done, entry is not None)))  # fmt: skip
    evaluated = [e[1] for e in events if e[0] == "evaluate"]
    assert evaluated == [r for r in range(start, rounds) if (r + 1) % every == 0 or r + 1 == rounds]
    assert [d for d, _ in reported] == list(range(start + 1, rounds + 1))
    assert [d - 1 for d, e in reported if e] == evaluated and log.next_round == rounds
