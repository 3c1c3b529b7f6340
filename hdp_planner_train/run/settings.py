"""The settings the run layer reads from a run's configuration: :class:`RunSettings`, which Flower builds directly and
the simulator's ``TrainConfig`` extends with its trainer families' options."""

from __future__ import annotations

from dataclasses import dataclass, field

from hdp_planner_train.run import options as run_options


@dataclass(frozen=True, kw_only=True)
class RunSettings(run_options.RunConfig):
    """A run's configuration as the run layer reads it: :class:`~.options.RunConfig`'s fields, and how the clients
    train and where the noise comes from. The plan is not a setting: a run follows a :class:`~.plan.RunPlan` bound
    once, beside its configuration.

    Args:
        model: The model and its local optimisation.
        noise: Where the noise comes from.
    """

    model: run_options.ModelOptions = field(default_factory=run_options.ModelOptions)
    noise: run_options.NoiseOptions = field(default_factory=run_options.NoiseOptions)
