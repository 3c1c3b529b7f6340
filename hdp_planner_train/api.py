"""The trainer from Python: ``train(plan, method=…, dataset=…)`` returns a typed :class:`TrainResult`.

``hdp-plan train`` is a thin layer over the same call; every option of ``TrainConfig`` and its groups
(:mod:`hdp_planner_train.run.options`) is a keyword here, by its flat name or as a whole group.

>>> from hdp_planner_train import train  # doctest: +SKIP
>>> result = train("plan.json", method="gdpfed+", dataset="digits", clients=60, rounds=5)  # doctest: +SKIP
>>> result.final_accuracy, result.epsilon_spent  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hdp_planner.planning.plan import Plan
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.simulator.scaffold import TrainConfig

__all__ = ["GroupSpending", "RoundResult", "TrainResult", "train", "train_config"]


@dataclass(frozen=True, kw_only=True)
class RoundResult:
    """One evaluation of the global model.

    Args:
        round: The round it followed (1-based).
        accuracy: The test accuracy, in %.
        loss: The test loss.
    """

    round: int
    accuracy: float
    loss: float


@dataclass(frozen=True, kw_only=True)
class GroupSpending:
    """What one group spent, at the plan's δ, against its budget.

    Args:
        group: The group (1-based).
        epsilon_budget: Its budget ε (the selection family: its clients' largest ε, by example-level DP).
        epsilon_spent: ε spent; inf for a method that adds no noise (p-fedavg).
        rounds: The rounds run (None: the selection family, which counts no rounds).
    """

    group: int
    epsilon_budget: float
    epsilon_spent: float
    """inf for a method that adds no noise (p-fedavg)."""
    rounds: int | None


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """What a run reports.

    Args:
        method: The ``--method`` key trained.
        dataset: The dataset.
        rounds: The rounds run.
        final_accuracy: The last evaluation's test accuracy, in % (NaN: none).
        final_loss: The last evaluation's test loss (NaN: none, or the loss diverged).
        history: Every evaluation, in order.
        epsilon_spent: What each group spent.
        privacy: What the run guarantees, in words (e.g. "(ε, δ=…)-DP per group, rdp accountant, …").
        metrics: The full ``metrics.json`` record.
    """

    method: str
    dataset: str
    rounds: int
    final_accuracy: float
    final_loss: float
    history: tuple[RoundResult, ...]
    epsilon_spent: tuple[GroupSpending, ...]
    privacy: str
    metrics: dict[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_metrics(cls, metrics: dict[str, Any]) -> TrainResult:
        """The result a ``metrics.json`` record describes.

        Args:
            metrics: The record, as the trainer writes it.

        Returns:
            Its typed view (the record itself in ``metrics``).
        """
        return cls(
            method=str(metrics["method"]),
            dataset=str(metrics["dataset"]),
            rounds=int(metrics["rounds"]),
            final_accuracy=_number(metrics["final_accuracy"], math.nan),
            final_loss=_number(metrics["final_loss"], math.nan),  # null in metrics.json where the loss diverged
            history=tuple(
                RoundResult(round=int(h["round"]), accuracy=float(h["accuracy"]), loss=float(h["loss"]))
                for h in metrics["history"]
            ),
            epsilon_spent=tuple(
                GroupSpending(
                    group=int(g["group"]),
                    epsilon_budget=float(g["epsilon_budget"]),
                    epsilon_spent=_number(g["epsilon_spent"], math.inf),
                    rounds=g.get("rounds"),
                )
                for g in metrics["epsilon_spent"]
            ),
            privacy=str(metrics.get("privacy", "")),
            metrics=metrics,
        )


def _number(x: object, missing: float) -> float:
    return missing if x is None else float(x)  # type: ignore[arg-type]


def train(plan: str | os.PathLike[str] | Plan | RunPlan, *, method: str = "gdpfed+", **options: Any) -> TrainResult:
    """Train ``method`` of ``plan``, as ``hdp-plan train`` does (no progress bar unless ``progress=True``).

    Args:
        plan: A plan file's path, a :class:`~hdp_planner.planning.plan.Plan` (a trusted server's) or a
            :class:`~hdp_planner_train.run.plan.RunPlan` already read.
        method: A ``--method`` key of the plan.
        **options: As :func:`train_config` takes them (``dataset``, ``rounds``, ``clients``, ``seed``, ``out``,
            ``noise``, ``trust``, ``audit``, …), flat by name or as whole groups.

    Returns:
        What the run reports.

    Raises:
        TrainError: A setting the run refuses, with the one-line message the command line prints.
        PlanFileError: The plan file cannot be read or is inconsistent.
    """
    from hdp_planner_train.run.options import OutputOptions
    from hdp_planner_train.simulator.trainer import run

    if not isinstance(options.get("output"), OutputOptions):
        options.setdefault("progress", False)
    return TrainResult.from_metrics(run(train_config(method=method, **options), plan))


def train_config(*, method: str = "gdpfed+", **options: Any) -> TrainConfig:
    """The :class:`~hdp_planner_train.simulator.scaffold.TrainConfig` :func:`train` runs: its options, beside the plan.

    Args:
        method: A ``--method`` key of the plan.
        **options: The run's own fields (``rounds``, ``seed``) and the options of its groups
            (:mod:`hdp_planner_train.run.options`) and trainer families (:mod:`hdp_planner_train.simulator.options`),
            each by its flat name (``dataset="digits"``, ``audit=True``, ``rho=0.05``) or a group whole
            (``data=DataOptions(dataset="digits")``, ``personal=PersonalOptions(rho=0.05)``); flat names are merged
            into a group given whole (:func:`~hdp_planner_train.run.options.gather_options`).

    Returns:
        The run's configuration.

    Raises:
        TrainError: An unknown option name.
    """
    from hdp_planner_train.run.errors import TrainError
    from hdp_planner_train.run.options import gather_options
    from hdp_planner_train.simulator.scaffold import TrainConfig

    options = gather_options(TrainConfig, options)
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise TrainError(f"unknown training option(s): {', '.join(unknown)}")
    return TrainConfig(method=method, **options)
