"""The settings the run layer reads from a run's configuration (the trainer's ``TrainConfig`` has them all)."""

from __future__ import annotations

from typing import Protocol

from hdp_planner_train.run import options as run_options


class RunSettings(Protocol):
    """A run's configuration as the run layer reads it: the method, its seed and rounds, and the option groups. The
    plan is not a setting: a run follows a :class:`~.plan.RunPlan` bound once, beside its configuration."""

    method: str
    rounds: int | None
    seed: int
    data: run_options.DataOptions
    model: run_options.ModelOptions
    noise: run_options.NoiseOptions
    trust: run_options.TrustOptions
    audit: run_options.AuditOptions
    ledger: run_options.LedgerOptions
    output: run_options.OutputOptions
