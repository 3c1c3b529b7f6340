"""The FedAvg family's callbacks (:class:`~.template.Callback`): who joins each round, and the privacy audit.

Each carries its own state between rounds and writes it to the checkpoint (``state``/``load_state``), so the run's
skeleton (:func:`~.template.run_family`) and the family's round know nothing of which one they hold:

- the round's clients: :class:`PoissonSampling` (each group's clients, and the audit's canaries among them, sampled at
  q_m; nothing to keep) or, for a plan with hidden participation, :class:`CohortMemberships` (the public cohort
  rule's cohorts and every client's memberships so far, the rule's seed checkpointed);
- the audit: :class:`CanaryAudit` (its canaries join the rounds, their state is checkpointed, its report is the
  metrics' ``audit`` section) or :class:`NoAudit` (the same round hooks, doing nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from hdp_planner_train.audit.canaries import CanaryAuditor
from hdp_planner_train.rules.aggregate import Observers, RoundStats
from hdp_planner_train.rules.cohort import cohort_round, simulated_rule
from hdp_planner_train.rules.sampling import sample_round
from hdp_planner_train.rules.specs import GroupSpec
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.progress import status
from hdp_planner_train.simulator.scaffold import TrainConfig


class NoAudit:
    """A run without the audit: :class:`CanaryAudit`'s round hooks, doing nothing; its checkpoint entry is None.

    Args:
        groups: The number of groups.
    """

    observers = Observers()

    def __init__(self, groups: int) -> None:
        self.extra = (0,) * groups

    def take(self, sampled: list[np.ndarray], offsets: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
        return sampled

    def insert(self, deltas: torch.Tensor, group_of_row: np.ndarray, rnd: int) -> tuple[torch.Tensor, np.ndarray]:
        return deltas, group_of_row

    def insert_grouped(self, groups: list[torch.Tensor], rnd: int) -> list[torch.Tensor]:
        return groups

    def real_stats(self, stats: RoundStats) -> RoundStats:
        return stats

    def state(self) -> dict[str, Any]:
        return {"audit": None}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""

    def metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        return {}


class CanaryAudit:
    """The privacy audit (:class:`~hdp_planner_train.audit.canaries.CanaryAuditor`) as a run's callback.

    Args:
        auditor: The run's canaries.
        delta: The plan's δ, at which each group's ε is estimated.
        progress: Whether a status line shows while the report is computed.
    """

    def __init__(self, auditor: CanaryAuditor, *, delta: float, progress: bool) -> None:
        self.auditor, self.delta, self.progress = auditor, delta, progress
        self.observers = Observers(observe=auditor.observe, referee=auditor.referee, survivors=auditor.survivors)

    @property
    def extra(self) -> tuple[int, ...]:
        """The "in" canaries of each group, members of its population (:attr:`CanaryAuditor.extra`)."""
        return self.auditor.extra

    def take(self, sampled: list[np.ndarray], offsets: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
        """The real clients of a sample; the canaries who joined are kept (:meth:`CanaryAuditor.take`)."""
        return self.auditor.take(sampled, offsets, sizes)

    def insert(self, deltas: torch.Tensor, group_of_row: np.ndarray, rnd: int) -> tuple[torch.Tensor, np.ndarray]:
        """The round's updates with the joining canaries' rows among them (:meth:`CanaryAuditor.insert`)."""
        return self.auditor.insert(deltas, group_of_row, rnd)

    def insert_grouped(self, groups: list[torch.Tensor], rnd: int) -> list[torch.Tensor]:
        """:meth:`insert` on each group's update rows, the canaries going into their groups."""
        group_of_row = np.concatenate([np.full(r.shape[0], m) for m, r in enumerate(groups)]).astype(np.int64)
        deltas, group_of_row = self.insert(torch.cat(groups), group_of_row, rnd)
        return [deltas[torch.as_tensor(group_of_row == m)] for m in range(len(groups))]

    def real_stats(self, stats: RoundStats) -> RoundStats:
        """The round's statistics without the canaries (:meth:`CanaryAuditor.real_stats`)."""
        return self.auditor.real_stats(stats)

    def state(self) -> dict[str, Any]:
        return {"audit": self.auditor.state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if "clients" not in state["audit"]:
            raise ValueError("the checkpoint holds an earlier audit's state")
        self.auditor.load_state(state["audit"])

    def metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The ``audit`` section: each group's ε estimated from its canaries against the ε it spent."""
        planned = [e["epsilon_spent"] for e in metrics["epsilon_spent"]]
        with status(self.progress, "audit: estimating each group's ε from its canaries (PLD, bootstrap interval)…"):
            return {"audit": self.auditor.report(planned, self.delta)}


def run_audit(cfg: TrainConfig, spec: GroupSpec, *, d: int, delta: float) -> CanaryAudit | NoAudit:
    """The run's audit: canaries with ``--audit`` (TrainError: a method it cannot audit), else none."""
    if not cfg.audit.enabled:
        return NoAudit(len(spec.sizes))
    try:
        auditor = CanaryAuditor(spec, d, cfg.seed, cfg.audit.canaries)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    return CanaryAudit(auditor, delta=delta, progress=cfg.output.progress)


class PoissonSampling:
    """Each group's clients, followed by its ``extra`` canaries, Poisson-sampled at q_m every round
    (:func:`~hdp_planner_train.rules.sampling.sample_round`: from the seed, or the OS's CSPRNG); nothing to keep."""

    def __init__(self, spec: GroupSpec, *, seed: int, secure: bool, extra: Sequence[int]) -> None:
        self.spec, self.seed, self.secure, self.extra = spec, seed, secure, tuple(extra)

    def draw(self, rnd: int) -> list[np.ndarray]:
        """Global ids of the clients joining round ``rnd``, per group."""
        return sample_round(self.spec, seed=self.seed, rnd=rnd, secure=self.secure, extra=self.extra)

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Nothing to restore."""

    def metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        return {}


class CohortMemberships:
    """Hidden participation: each round the public rule's cohorts
    (:func:`~hdp_planner_train.rules.cohort.simulated_rule` over each group's clients followed by its ``extra``
    canaries), every member that its cap admits joining (:func:`~hdp_planner_train.rules.cohort.cohort_round`); the
    clients' memberships so far and the rule's seed are checkpointed, so a resumed run continues the same rotation."""

    def __init__(self, spec: GroupSpec, kind: str, *, seed: int, extra: Sequence[int]) -> None:
        self.spec = spec
        self.used = [np.zeros(s + e, np.int64) for s, e in zip(spec.sizes, extra)]  # members too: named like clients
        self.rule = simulated_rule(spec.secagg, [len(u) for u in self.used], kind, seed=seed)

    def draw(self, rnd: int) -> list[np.ndarray]:
        """Global ids of each group's members who join round ``rnd``; their memberships counted."""
        return cohort_round(self.spec.secagg, self.spec.offsets, self.used, self.rule, rnd)

    def state(self) -> dict[str, Any]:
        return {"cohort_memberships": [u.copy() for u in self.used], "cohort_seed": self.rule.seed.hex()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        if "cohort_seed" not in state:
            raise ValueError("the checkpoint holds no cohort rule's seed (an earlier version's)")
        self.used = [np.asarray(u, dtype=np.int64) for u in state["cohort_memberships"]]
        self.rule = replace(self.rule, seed=bytes.fromhex(state["cohort_seed"]))  # the rule the run began with

    def metrics(self, metrics: Mapping[str, Any]) -> dict[str, Any]:
        return {}


def round_sampling(
    spec: GroupSpec, kind: str, *, seed: int, extra: Sequence[int]
) -> CohortMemberships | PoissonSampling:
    """Who joins the run's rounds: the cohort rule's members for a plan with hidden participation, else Poisson
    sampling."""
    if spec.secagg is not None and spec.secagg.cohorts is not None:
        return CohortMemberships(spec, kind, seed=seed, extra=extra)
    return PoissonSampling(spec, seed=seed, secure=kind == "secure", extra=extra)
