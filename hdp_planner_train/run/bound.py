"""A run validated and bound to its plan: the :class:`BoundRun` every trainer family reads, built once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hdp_planner.planning.plan import Plan
from hdp_planner_train.learning.federated import FederatedData
from hdp_planner_train.rules.specs import GroupSpec
from hdp_planner_train.run.plan import RunPlan

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True, kw_only=True)
class BoundRun:
    """Everything a run follows besides its configuration, checked before anything is written.

    Args:
        run_plan: The plan, read once (:class:`~.plan.RunPlan`).
        data: The federated data, split as the configuration says.
        spec: The method's groups under the trust model the run follows.
        rounds: The rounds to run (at most the plan's T).
        batch: B, the local batch.
        momentum: Local SGD momentum.
        device: Where to train.
    """

    run_plan: RunPlan
    data: FederatedData
    spec: GroupSpec
    rounds: int
    batch: int
    momentum: float
    device: torch.device

    @property
    def plan(self) -> Plan:
        """The plan the run follows."""
        return self.run_plan.plan
