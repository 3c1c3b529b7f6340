"""The trainer from Python: ``train(plan, method=…, dataset=…)`` returns a typed :class:`TrainResult`.

``hdp-plan train`` is a thin layer over the same call; every ``TrainConfig`` field is a keyword option here.

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

__all__ = ["GroupSpending", "RoundResult", "TrainResult", "train", "train_config"]


@dataclass(frozen=True)
class RoundResult:
    """One evaluation: the round it followed, the test accuracy (%) and loss."""

    round: int
    accuracy: float
    loss: float


@dataclass(frozen=True)
class GroupSpending:
    """What one group spent: ε at the plan's δ, against its budget (the selection family: its clients' largest ε, by
    example-level DP, and no count of rounds)."""

    group: int
    epsilon_budget: float
    epsilon_spent: float
    """inf for a method that adds no noise (p-fedavg)."""
    rounds: int | None


@dataclass(frozen=True)
class TrainResult:
    """What a run reports (the full ``metrics.json`` record in ``metrics``)."""

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
        return cls(
            method=str(metrics["method"]),
            dataset=str(metrics["dataset"]),
            rounds=int(metrics["rounds"]),
            final_accuracy=_number(metrics["final_accuracy"], math.nan),
            final_loss=_number(metrics["final_loss"], math.nan),  # null in metrics.json where the loss diverged
            history=tuple(
                RoundResult(int(h["round"]), float(h["accuracy"]), float(h["loss"])) for h in metrics["history"]
            ),
            epsilon_spent=tuple(
                GroupSpending(
                    int(g["group"]), float(g["epsilon_budget"]), _number(g["epsilon_spent"], math.inf), g.get("rounds")
                )
                for g in metrics["epsilon_spent"]
            ),
            privacy=str(metrics.get("privacy", "")),
            metrics=metrics,
        )


def _number(x: object, missing: float) -> float:
    return missing if x is None else float(x)  # type: ignore[arg-type]


def train(
    plan: str | os.PathLike[str] | Plan | RunPlan, *, method: str = "gdpfed+", dataset: str = "fmnist", **options: Any
) -> TrainResult:
    """Train ``method`` of ``plan`` on ``dataset``: a plan file's path, a :class:`~hdp_planner.planning.plan.Plan` (a
    trusted server's) or a :class:`~hdp_planner_train.run.plan.RunPlan` already read; ``options`` are
    :class:`~hdp_planner_train.simulator.scaffold.TrainConfig` fields (``rounds``, ``clients``, ``seed``, ``out``,
    ``noise``, ``trust``, …) or a family's own options, by name (``rho=0.05``) or whole
    (``personal=PersonalOptions(rho=0.05)``, :mod:`~hdp_planner_train.simulator.options`). Raises
    :class:`~hdp_planner_train.run.errors.TrainError` on bad input, with the one-line message the command
    line prints."""
    from hdp_planner.planning.plan import Plan
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.simulator.trainer import run

    options.setdefault("progress", False)
    bound = RunPlan.of(plan) if isinstance(plan, Plan) else plan if isinstance(plan, RunPlan) else None
    cfg = train_config(plan if bound is None else bound.source, method=method, dataset=dataset, **options)
    return TrainResult.from_metrics(run(cfg, bound))


def train_config(plan: str | os.PathLike[str], *, method: str = "gdpfed+", dataset: str = "fmnist", **options: Any):
    """The :class:`~hdp_planner_train.simulator.scaffold.TrainConfig` :func:`train` runs: ``options`` as there
    (a family's options by name gathered into its dataclass); unknown names are refused."""
    from hdp_planner_train.run.errors import TrainError
    from hdp_planner_train.simulator.options import gather_family_options
    from hdp_planner_train.simulator.scaffold import TrainConfig

    options = gather_family_options(options)
    unknown = sorted(set(options) - {f.name for f in dataclasses.fields(TrainConfig)})
    if unknown:
        raise TrainError(f"unknown training option(s): {', '.join(unknown)}")
    return TrainConfig(plan=os.fspath(plan), method=method, dataset=dataset, **options)
