"""The run scaffold every trainer family of the simulator shares: the run's configuration, its identity and
checkpoints, the model and data it starts from, its metrics and its rounds under a progress bar (GDPFed Algorithm
2's bookkeeping). The run layer it builds on (the bound run, noise source, privacy ledger, metrics, output) is
:mod:`hdp_planner_train.run`, shared with Flower.

Imports no trainer: the dispatcher (:mod:`.trainer`) and the method families (:mod:`.personal`,
:mod:`.private_selection`) import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from hdp_planner_train.learning.engines import ClientData, LocalTraining
from hdp_planner_train.learning.models import make_model, model_name
from hdp_planner_train.rounds.loop import Evaluate, RunLog, Schedule, Step, run_rounds
from hdp_planner_train.run import options as run_options
from hdp_planner_train.run.bound import BoundRun
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.interrupts import HeldInterrupt
from hdp_planner_train.run.ledger import privacy_ledger
from hdp_planner_train.run.metrics import base_metrics
from hdp_planner_train.run.noise import noise_kind
from hdp_planner_train.run.progress import progress_bar
from hdp_planner_train.run.settings import RunSettings
from hdp_planner_train.simulator import checkpoint
from hdp_planner_train.simulator.checkpoint import CHECKPOINT
from hdp_planner_train.simulator.options import PersonalOptions, SelectionOptions


@dataclass(frozen=True, kw_only=True)
class TrainConfig(RunSettings):
    """A simulator run (``hdp-plan train``); :func:`hdp_planner_train.api.train_config` builds one from flat keywords.

    The plan is not part of it: a run follows a :class:`~hdp_planner_train.run.plan.RunPlan` bound once, beside it.
    Besides :class:`~hdp_planner_train.run.settings.RunSettings`' fields (method, rounds, seed, and the data, model,
    noise, trust, audit, ledger and output groups):

    Args:
        personal: The DP²-FedSAM family's own options (:mod:`.options`).
        selection: The client-selection family's own options.
    """

    personal: PersonalOptions = field(default_factory=PersonalOptions)  # the DP²-FedSAM family's options
    selection: SelectionOptions = field(default_factory=SelectionOptions)  # the client-selection family's options

    def __repr__(self) -> str:
        """The settings that differ from their defaults (the method always)."""
        return f"TrainConfig({run_options.changed_fields(self, ('method',))})"


def run_identity(cfg: TrainConfig, bound: BoundRun, **extra: Any) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the plan's SHA-256 and every setting that changes the run."""
    return {
        "plan_sha256": bound.run_plan.sha256,
        "method": cfg.method,
        "dataset": cfg.data.dataset,
        "model": model_name(cfg.data.dataset, cfg.model.name),
        "seed": cfg.seed,
        "dirichlet": cfg.data.dirichlet,
        "shards": cfg.data.shards,
        "iid_share": cfg.data.iid_share,
        **({"group_classes": cfg.data.group_classes} if cfg.data.group_classes is not None else {}),
        **({"precision": cfg.model.precision} if cfg.model.precision != "fp32" else {}),
        "clients": bound.data.n_clients,
        "batch_size": bound.batch,
        "momentum": bound.momentum,
        "lr_decay": cfg.model.lr_decay,
        **({"weights": cfg.model.weights} if cfg.model.weights != "plan" else {}),
        "noise_source": noise_kind(cfg),  # a seeded checkpoint never continues as a secure run, nor back
        **extra,
    }


def resume_state(cfg: TrainConfig, identity: dict[str, Any], rounds: int) -> dict[str, Any] | None:
    """The checkpoint in ``cfg.output.out`` with ``--resume`` (refused if it was made with other settings), else None
    (a folder holding a run was refused before: :func:`~hdp_planner_train.run.output.check_finished`)."""
    if not cfg.output.resume:
        return None
    path = Path(cfg.output.out) / CHECKPOINT if cfg.output.out else None
    if path is None or not path.is_file():
        raise TrainError(f"--resume: no {CHECKPOINT} in {cfg.output.out}")
    try:
        state = checkpoint.load(path.parent)
    except checkpoint.CheckpointError as exc:
        raise TrainError(f"--resume: {exc}") from None
    diff = [k for k, v in identity.items() if state["identity"].get(k) != v]
    if diff:
        raise TrainError(f"--resume: the checkpoint in {cfg.output.out} was made with a different {', '.join(diff)}")
    if state["next_round"] > rounds:
        raise TrainError(f"--resume: the checkpoint already ran {state['next_round']} rounds > --rounds {rounds}")
    return state


class CheckpointedRelease:
    """A run's account whose every release holds Ctrl-C (:class:`HeldInterrupt`) until :meth:`checkpointed`: an
    interrupt never falls between a round charged in the ledger and the checkpoint that records it, so the ledger
    never holds more released rounds than the checkpoint and ``--resume`` continues."""

    def __init__(self, account, held: HeldInterrupt) -> None:
        self.account, self.held = account, held

    def release(self, rnd: int) -> None:
        self.held.hold()
        self.account.release(rnd)

    def finish(self) -> None:
        self.account.finish()

    def checkpointed(self, checkpoint: Callable[[], None]) -> Callable[[], None]:
        """``checkpoint``, then the Ctrl-C held since the release, if any."""

        def write() -> None:
            checkpoint()
            self.held.let_go()

        return write


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """What every family starts from: the output folder, the noise's kind, the model initialised from the seed, its
    flat parameters θ and the data on the device.

    Args:
        out: The ``--out`` folder (None: nothing is written).
        kind: Where the noise comes from (:func:`~hdp_planner_train.run.noise.noise_kind`).
        model: The model, its parameters θ.
        theta: θ, the flat parameters.
        x_train: The training inputs.
        y_train: The training labels.
        x_test: The test inputs.
        y_test: The test labels.
        clients: Each client's indices into the training set.
    """

    out: Path | None
    kind: str
    model: nn.Module
    theta: torch.Tensor
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    clients: list[np.ndarray]

    @property
    def train(self) -> ClientData:
        """The clients' training examples on the device."""
        return ClientData(self.x_train, self.y_train, self.clients)


def start_run(cfg: TrainConfig, bound: BoundRun) -> RunStart:
    """The model of ``cfg`` initialised from the run's seed, on the bound run's device with its data.

    Args:
        cfg: The run's configuration.
        bound: The run bound to its plan.

    Returns:
        The run's start.
    """
    data, device = bound.data, bound.device
    torch.manual_seed(cfg.seed)
    model = make_model(cfg.data.dataset, data.num_classes, cfg.model.name).to(device)
    x_train, y_train, x_test, y_test = (
        torch.as_tensor(a, device=device) for a in (data.x_train, data.y_train, data.x_test, data.y_test)
    )
    return RunStart(
        out=Path(cfg.output.out) if cfg.output.out else None, kind=noise_kind(cfg), model=model,
        theta=parameters_to_vector(model.parameters()).detach(), x_train=x_train, y_train=y_train, x_test=x_test,
        y_test=y_test, clients=data.clients,
    )  # fmt: skip


def local_training(cfg: TrainConfig, bound: BoundRun, *, lr: float, rho: float = 0.0) -> LocalTraining:
    """How the run's sampled clients train at learning rate ``lr`` (this round's): the plan's local steps τ, the bound
    batch and momentum, SAM radius ``rho``, and the ``--engine``, ``--chunk`` and ``--precision`` asked for."""
    m = cfg.model
    return LocalTraining(steps=bound.plan.config.local_steps, batch=bound.batch, lr=lr, momentum=bound.momentum,
                         rho=rho, engine=m.engine, chunk=m.chunk, precision=m.precision)  # fmt: skip


def run_metrics(cfg: TrainConfig, bound: BoundRun, *, d: int, log: RunLog, account=None) -> dict[str, Any]:
    """:func:`~hdp_planner_train.run.metrics.base_metrics` of the bound run, its model of ``d`` parameters, its
    ``account`` in the privacy ledger."""
    model = model_name(cfg.data.dataset, cfg.model.name)
    return base_metrics(cfg, bound, rounds=bound.rounds, d=d, log=log, model=model, account=account)


def save_checkpoint(out: Path, identity, *, theta: torch.Tensor, log: RunLog, plan, spec, **extra: Any) -> None:
    """Write θ, the run log, the privacy ledger and ``extra`` as the run's authenticated checkpoint
    (:mod:`.checkpoint`)."""
    state = {
        "identity": identity,
        "theta": theta.cpu(),
        **asdict(log),
        "privacy_ledger": privacy_ledger(plan, spec, log.next_round) if spec.private else None,
        **extra,
    }
    checkpoint.save(out, state)


def global_evaluation(model, x_test: torch.Tensor, y_test: torch.Tensor) -> Callable[[int, float], dict[str, Any]]:
    """:func:`run_rounds`' ``evaluate`` for a global model: its accuracy and loss on the test split."""
    from hdp_planner_train.learning.engines import evaluate

    def entry(r: int, lr: float) -> dict[str, Any]:
        acc, loss = evaluate(model, x_test, y_test)
        return {"round": r + 1, "accuracy": acc, "loss": loss}

    return entry


def train_rounds(
    cfg: TrainConfig,
    bound: BoundRun,
    *,
    log: RunLog,
    account,
    step: Step,
    evaluate: Evaluate,
    checkpoint: Callable[[], None] | None,
    describe: Callable[[int, dict[str, Any]], str],
) -> None:
    """A simulator run's rounds: :func:`~hdp_planner_train.rounds.loop.run_rounds` on the schedule of ``cfg``
    (lr·decay^r, ``--eval-every``) with a progress bar whose line is ``describe(done, entry)``; a round released in
    the ledger holds Ctrl-C until its ``checkpoint`` is written (:class:`CheckpointedRelease`)."""
    rounds = bound.rounds
    schedule = Schedule(rounds=rounds, lr=bound.plan.config.lr, lr_decay=cfg.model.lr_decay,
                        eval_every=cfg.output.eval_every)  # fmt: skip
    progress = progress_bar(cfg.output.progress)
    task = progress.add_task("training", total=rounds, completed=log.next_round)

    def report(done: int, entry: dict[str, Any] | None, stats, seconds: float) -> None:
        if entry is not None:
            progress.update(task, description=describe(done, entry))
        progress.update(task, completed=done)

    held = HeldInterrupt()
    if account is not None and checkpoint is not None:
        account = CheckpointedRelease(account, held)
        checkpoint = account.checkpointed(checkpoint)
    with progress, held:
        run_rounds(schedule, log, step=step, evaluate=evaluate, account=account, report=report, checkpoint=checkpoint)
