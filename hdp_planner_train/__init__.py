"""Optional PyTorch trainer for hdp-planner plans (GDPFed Algorithms 1-2): ``hdp-plan train PLAN.json``.

From Python: ``train(plan, method=…, dataset=…)`` returns a typed :class:`~.api.TrainResult` and raises
:class:`TrainError` (one line) for a run it refuses. The building blocks a new trainer or a Flower strategy reuses
are exported too: :func:`run_rounds` (the one round loop, with hooks) and :class:`GroupAggregator` (clip, noise and
aggregate one round's group updates). Importing this package does not import torch: the names that need it are
loaded on first use. Install with ``pip install torch==2.13.0 && pip install -e '.[train]'``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from hdp_planner_train.api import GroupSpending, RoundResult, TrainResult, train, train_config
from hdp_planner_train.run.errors import TrainError

if TYPE_CHECKING:
    from hdp_planner_train.rounds.loop import RunLog, Schedule, run_rounds
    from hdp_planner_train.rules.aggregate import GroupAggregator
    from hdp_planner_train.simulator.scaffold import TrainConfig

TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[train]'"

_LAZY = {
    "GroupAggregator": "hdp_planner_train.rules.aggregate",
    "RunLog": "hdp_planner_train.rounds.loop",
    "Schedule": "hdp_planner_train.rounds.loop",
    "TrainConfig": "hdp_planner_train.simulator.scaffold",
    "run_rounds": "hdp_planner_train.rounds.loop",
}


def __getattr__(name: str) -> Any:
    """The names that import torch, loaded when first asked for (PEP 562)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "TORCH_HINT",
    "GroupAggregator",
    "GroupSpending",
    "RoundResult",
    "RunLog",
    "Schedule",
    "TrainConfig",
    "TrainError",
    "TrainResult",
    "run_rounds",
    "train",
    "train_config",
]
