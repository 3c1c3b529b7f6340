"""The round loop, written once for every run: the simulator's trainers and the Flower strategy drive it.

In the manner of pfl-research's ``FederatedAlgorithm.run``, what differs between runs is passed in as hooks: ``step``
(local training and the group aggregation of one round), ``evaluate`` (what a round is judged by), ``report``
(progress), ``checkpoint`` and ``stop`` (a reason to end before a round). What is the same is here: the learning
rate lr·decay^r of GDPFed Algorithm 2, the privacy ledger charged between a round's aggregation and its update
(before the round's model exists) and closed however the loop ends, timing, the evaluation cadence and the run's
per-round record (:class:`RunLog`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

Step = Callable[[int, float], tuple[Any, Callable[[], None]]]
"""Round r (0-based) at learning rate lr: train and aggregate; returns (its statistics, the function applying its
update)."""

Evaluate = Callable[[int, float], "dict[str, Any] | None"]
"""Round r at learning rate lr, after its update: the history entry (round, accuracy, loss, …), or None."""

Report = Callable[[int, "dict[str, Any] | None", Any, float], None]
"""After a round: (rounds done, its history entry or None, its statistics, its seconds)."""


class Account(Protocol):
    """A run's account in the privacy ledger (``hdp_planner_train.simulator.scaffold.LedgerRun``)."""

    def release(self, rnd: int) -> None: ...

    def finish(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """When a run's rounds happen: rounds 0..``rounds``−1 at learning rate lr·decay^r (GDPFed Algorithm 2), evaluated
    after every ``eval_every`` rounds and after the last.

    Args:
        rounds: How many rounds the run has.
        lr: The learning rate of round 0.
        lr_decay: The factor the learning rate is multiplied by each round.
        eval_every: Evaluate after every this many rounds (and after the last).
    """

    rounds: int
    lr: float = 0.0
    lr_decay: float = 1.0
    eval_every: int = 1

    def lr_at(self, r: int) -> float:
        """The learning rate lr·decay^r of round ``r`` (0-based)."""
        return self.lr * self.lr_decay**r

    def evaluates(self, r: int) -> bool:
        """Whether the model is evaluated after round ``r`` (0-based)."""
        return (r + 1) % self.eval_every == 0 or r + 1 == self.rounds


@dataclass(kw_only=True)
class RunLog:
    """What a run records round by round; checkpointed as is and summarized into the metrics.

    Args:
        next_round: The first round still to run (0-based; a resumed run's is where it stopped).
        history: One entry per evaluation (round, accuracy, loss, …).
        lambda_measured: Each round's measured Λ (with ``diagnostics``).
        lambda_applied: Each round's applied Λ (with ``diagnostics``).
        round_seconds: Each round's wall time (with ``diagnostics``).
        joined: Each round's joined clients per group (with ``diagnostics``).
        diagnostics: Record the per-round noise, joined counts and times: seeded (simulation) runs only, as they
            reveal who took part, so a secure run records none of them.
    """

    next_round: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    lambda_measured: list[float] = field(default_factory=list)
    lambda_applied: list[float] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)
    joined: list[list[int]] = field(default_factory=list)
    diagnostics: bool = True  # seeded (simulation) runs only: per-round noise, joined counts and times reveal
    # who took part, so a secure run records none of them

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunLog:
        """The log a checkpoint saved (its fields by name)."""
        return cls(**{f.name: state[f.name] for f in fields(cls)})

    def record(self, stats, seconds: float) -> None:
        """One round done: its aggregation statistics and wall time (kept only with ``diagnostics``)."""
        self.next_round += 1
        if not self.diagnostics:
            return
        self.round_seconds.append(seconds)
        self.lambda_measured.append(stats.lambda_measured)
        self.lambda_applied.append(stats.lambda_applied)
        self.joined.append(stats.joined)

    def summary(self) -> dict[str, Any]:
        """The run's metrics: the final accuracy and loss, the history and, with ``diagnostics``, their means."""
        last = self.history[-1] if self.history else {}
        head = {"final_accuracy": last.get("accuracy"), "final_loss": last.get("loss"), "history": self.history}
        if not self.diagnostics:
            return head
        return {
            **head,
            "simulation_diagnostics": "seeded run: per-round noise, joined counts and times (reveal who took part)",
            "noise_lambda_measured": float(np.mean(self.lambda_measured)) if self.lambda_measured else 0.0,
            "noise_lambda_applied": float(np.mean(self.lambda_applied)) if self.lambda_applied else 0.0,
            "joined_per_round_mean": np.mean(self.joined, axis=0).tolist() if self.joined else [],
            "round_seconds": self.round_seconds,
            "round_seconds_median": float(np.median(self.round_seconds)) if self.round_seconds else 0.0,
        }


def run_rounds(
    schedule: Schedule,
    log: RunLog,
    *,
    step: Step,
    evaluate: Evaluate | None = None,
    account: Account | None = None,
    report: Report | None = None,
    checkpoint: Callable[[], None] | None = None,
    stop: Callable[[int], str | None] | None = None,
) -> str | None:
    """Run rounds ``log.next_round``..``schedule.rounds``−1: the one round loop of the simulator and Flower.

    Each round: ``step(r, lr)``, the ledger's release of round r, the update applied, the round recorded in ``log``,
    ``evaluate`` on the schedule's cadence (its entry appended to ``log.history``), ``report`` and ``checkpoint``.
    The ledger's reservation is closed however the loop ends.

    Args:
        schedule: When the rounds happen, and their learning rates.
        log: What the run recorded so far; updated in place.
        step: Round r at learning rate lr: train and aggregate (:data:`Step`).
        evaluate: The evaluation after a round (:data:`Evaluate`; None: none).
        account: The run's account in the privacy ledger (None: no ledger).
        report: Called after every round (:data:`Report`; None: nothing reported).
        checkpoint: Called after every round to save the run (None: no checkpoints).
        stop: Asked before round r; a reason stops the run there (None: the run is never stopped).

    Returns:
        Why the run stopped early (``stop(r)``'s reason), or None when every round ran.
    """
    with contextlib.ExitStack() as stack:
        if account is not None:
            stack.callback(account.finish)
        for r in range(log.next_round, schedule.rounds):
            reason = stop(r) if stop is not None else None
            if reason is not None:
                return reason
            t0 = time.perf_counter()
            lr = schedule.lr_at(r)
            stats, apply_update = step(r, lr)
            if account is not None:
                account.release(r)
            apply_update()
            seconds = time.perf_counter() - t0
            log.record(stats, seconds)
            entry = evaluate(r, lr) if evaluate is not None and schedule.evaluates(r) else None
            if entry is not None:
                log.history.append(entry)
            if report is not None:
                report(r + 1, entry, stats, seconds)
            if checkpoint is not None:
                checkpoint()
    return None
