"""One run of any trainer family, written once: resume, the privacy ledger, the rounds, checkpoints and metrics.

In the manner of pfl-research's ``FederatedAlgorithm.run``, a family (:mod:`.trainer`'s FedAvg, :mod:`.personal`,
:mod:`.private_selection`) supplies hooks (:class:`FamilyRun`): its round's step, its evaluation, its metrics, and
the state it keeps between rounds; its callbacks (:class:`Callback`: the privacy audit, the cohort memberships) carry
and checkpoint their own state, as Opacus's ``state_dict``/``load_state_dict`` do. :func:`run_family` does the rest
in one order for every family: the checkpoint a ``--resume`` continues (:func:`~.scaffold.resume_state`), the model
and data (:func:`~.scaffold.start_run`), every part's state back from it, the run's account in the privacy ledger,
the rounds (:func:`~.scaffold.train_rounds` under a progress bar, each followed by a checkpoint of θ, the run log,
the ledger's run and every part's state), then the metrics, the callbacks' added last.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.run.bound import BoundRun
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.ledger import LedgerRun, ledger_checkpoint, ledger_run
from hdp_planner_train.run.output import write_metrics
from hdp_planner_train.run.progress import round_description
from hdp_planner_train.simulator.scaffold import (
    RunStart,
    TrainConfig,
    global_evaluation,
    resume_state,
    run_identity,
    save_checkpoint,
    start_run,
    train_rounds,
)


class Callback(Protocol):
    """A part of a run that carries its own state between rounds and across a ``--resume``."""

    def state(self) -> dict[str, Any]:
        """Its entries in the checkpoint."""
        ...

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Back from a checkpoint (all of it); ValueError: one this run cannot continue (made by another version)."""
        ...

    def metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """What it adds to the run's finished ``metrics``."""
        ...


class FamilyRun:
    """The hooks of one trainer family, defaults for what the families share; :func:`run_family` calls them.

    Args:
        cfg: The run's configuration (checked).
        bound: The run bound to its plan.

    Attributes:
        identity: The family's settings beside :func:`~.scaffold.run_identity`'s that a checkpoint must match.
        ledger: Whether the run is charged to the privacy ledger (client-level DP runs).
        checkpoints: Whether the run writes checkpoints (in ``--out``).
        theta: θ, the flat global parameters (set by :meth:`begin`).
    """

    ledger = True
    checkpoints = True

    def __init__(self, cfg: TrainConfig, bound: BoundRun) -> None:
        self.cfg, self.bound = cfg, bound
        self.identity: dict[str, Any] = {}

    def begin(self, start: RunStart) -> Sequence[Callback]:
        """Build what needs the model and data of ``start``; returns the run's callbacks."""
        self.start, self.theta = start, start.theta
        return ()

    def step(self, r: int, lr: float) -> tuple[Any, Callable[[], None]]:
        """Round ``r`` at learning rate ``lr``: :data:`~hdp_planner_train.rounds.loop.Step`."""
        raise NotImplementedError

    def evaluate(self, r: int, lr: float) -> dict[str, Any] | None:
        """The evaluation after round ``r``: the global model on the test split."""
        return global_evaluation(self.start.model, self.start.x_test, self.start.y_test)(r, lr)

    def describe(self, done: int, entry: dict[str, Any]) -> str:
        """The progress line after an evaluation: accuracy, loss and the ε each group has spent."""
        plan, spec, rounds = self.bound.plan, self.bound.spec, self.bound.rounds
        return round_description(plan, spec, done=done, rounds=rounds, acc=entry["accuracy"], loss=entry["loss"])

    def state(self) -> dict[str, Any]:
        """The family's entries in the checkpoint beside θ and the run log."""
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """θ and the family's entries back from a checkpoint."""
        self.theta = state["theta"].to(self.bound.device)

    def metrics(self, log: RunLog, account: LedgerRun | None) -> dict[str, Any]:
        """The run's metrics after its rounds (``log``), its ``account`` in the privacy ledger."""
        raise NotImplementedError


def run_family(family: FamilyRun) -> dict[str, Any]:
    """Run ``family``'s rounds on its bound run: resume, ledger, rounds, checkpoints, metrics (module docstring).

    Args:
        family: The family's hooks, built on the checked configuration and bound run.

    Returns:
        The run's metrics, also written to ``--out``.

    Raises:
        TrainError: A checkpoint that cannot be resumed, a ledger that refuses the run, or a round it stops.
    """
    cfg, bound = family.cfg, family.bound
    identity = run_identity(cfg, bound, **family.identity)
    state = resume_state(cfg, identity, bound.rounds)
    start = start_run(cfg, bound)
    callbacks = tuple(family.begin(start))
    parts = (family, *callbacks)
    log = RunLog(diagnostics=start.kind == "seeded")
    if state is not None:
        log = RunLog.from_state(state)
        try:
            for part in parts:
                part.load_state(state)
        except ValueError as exc:
            raise TrainError(f"{start.out}: {exc}; rerun with --overwrite") from None
    account = ledger_run(cfg, bound, start=log.next_round, resumed=state) if family.ledger else None

    def checkpoint() -> None:
        entries = {key: value for part in parts for key, value in part.state().items()}
        save_checkpoint(start.out, identity, theta=family.theta, log=log, plan=bound.plan, spec=bound.spec,
                        **entries, **ledger_checkpoint(account))  # fmt: skip

    saving = checkpoint if start.out and family.checkpoints else None
    train_rounds(cfg, bound, log=log, account=account, step=family.step, evaluate=family.evaluate, checkpoint=saving,
                 describe=family.describe)  # fmt: skip
    metrics = family.metrics(log, account)
    for callback in callbacks:
        metrics.update(callback.metrics(metrics))
    if start.out:
        write_metrics(metrics, start.out, cfg.output.plot)
    return metrics
