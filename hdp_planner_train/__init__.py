"""Optional PyTorch trainer for hdp-planner plans (GDPFed Algorithms 1-2): ``hdp-plan train PLAN.json``.

From Python: ``train(plan, method=…, dataset=…)`` returns a typed :class:`~.api.TrainResult` and raises
:class:`TrainError` (one line) for a run it refuses; its options are flat keywords or whole option groups
(:class:`DataOptions`, :class:`ModelOptions`, … of :mod:`.run.options`); the plan goes beside them, a path or a plan
in memory, bound once as a :class:`RunPlan`, and a validated run is a :class:`BoundRun`. The building blocks a new
trainer or a Flower strategy reuses are exported too: :func:`run_rounds` (the one round loop, with hooks) and
:class:`GroupAggregator` (clip, noise and aggregate one round's group updates), and the privacy audit's
:class:`CanaryAuditor` (canary clients in a run; ``train(…, audit=True)`` runs it) with :func:`auditable` (whether a
plan row can be audited). Importing this package does not import torch: the names that need it are loaded on first
use. Install with
``pip install torch==2.13.0 && pip install -e '.[train]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hdp_planner.io.lazy import lazy_getattr

if TYPE_CHECKING:
    from hdp_planner_train.api import GroupSpending, RoundResult, TrainResult, train, train_config
    from hdp_planner_train.audit.canaries import CanaryAuditor, auditable
    from hdp_planner_train.rounds.loop import RunLog, Schedule, run_rounds
    from hdp_planner_train.rules.aggregate import GroupAggregator
    from hdp_planner_train.run.bound import BoundRun
    from hdp_planner_train.run.errors import TrainError
    from hdp_planner_train.run.options import (
        AuditOptions,
        DataOptions,
        LedgerOptions,
        ModelOptions,
        NoiseOptions,
        OutputOptions,
        RunConfig,
        TrustOptions,
    )
    from hdp_planner_train.run.plan import RunPlan
    from hdp_planner_train.run.settings import RunSettings
    from hdp_planner_train.simulator.scaffold import TrainConfig

TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[train]'"

SOURCES = {
    **dict.fromkeys(("GroupSpending", "RoundResult", "TrainResult", "train", "train_config"),
                    "hdp_planner_train.api"),
    "TrainError": "hdp_planner_train.run.errors",
    **dict.fromkeys(("AuditOptions", "DataOptions", "LedgerOptions", "ModelOptions", "NoiseOptions",
                     "OutputOptions", "RunConfig", "TrustOptions"), "hdp_planner_train.run.options"),
    "RunSettings": "hdp_planner_train.run.settings",
    "BoundRun": "hdp_planner_train.run.bound",
    "CanaryAuditor": "hdp_planner_train.audit.canaries",
    "GroupAggregator": "hdp_planner_train.rules.aggregate",
    "RunLog": "hdp_planner_train.rounds.loop",
    "RunPlan": "hdp_planner_train.run.plan",
    "Schedule": "hdp_planner_train.rounds.loop",
    "TrainConfig": "hdp_planner_train.simulator.scaffold",
    "run_rounds": "hdp_planner_train.rounds.loop",
    "auditable": "hdp_planner_train.audit.canaries",
}  # fmt: skip
__getattr__ = lazy_getattr(__name__, SOURCES)
"""Every name loads its module when first asked for: importing the package (as importing any of its modules does)
imports neither torch nor the planner's accountants."""


__all__ = [
    "TORCH_HINT",
    "AuditOptions",
    "BoundRun",
    "CanaryAuditor",
    "DataOptions",
    "GroupAggregator",
    "GroupSpending",
    "LedgerOptions",
    "ModelOptions",
    "NoiseOptions",
    "OutputOptions",
    "RoundResult",
    "RunConfig",
    "RunLog",
    "RunPlan",
    "RunSettings",
    "Schedule",
    "TrainConfig",
    "TrainError",
    "TrainResult",
    "TrustOptions",
    "auditable",
    "run_rounds",
    "train",
    "train_config",
]
