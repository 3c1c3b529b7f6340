"""The plan a run follows, read once: a :class:`RunPlan` (the plan with its trust model, and the SHA-256 that names
it), and in one call (:func:`run_spec`) what a run follows of it, once it verifies: the rounds it runs and the
method's groups under the trust model the run follows."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from hdp_planner.ledger.runs import plan_clients
from hdp_planner.methods.registry import REGISTRY, planner
from hdp_planner.planfile.document import plan_from_dict, plan_problems, plan_to_dict
from hdp_planner.planfile.schema import PlanFileError, parse_document
from hdp_planner.planning.plan import Plan, Trust
from hdp_planner_train.rules.specs import METHOD_NAMES, GroupSpec, row_spec, trusted_spec
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings
from hdp_planner_train.run.trust import run_trust

IN_MEMORY = "the plan given"
"""The :attr:`RunPlan.source` of a plan given as a :class:`~hdp_planner.planning.plan.Plan`, not read from a file."""


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A plan bound for a run, read once: the plan (its trust model's sections included), where it came from, and the
    SHA-256 that names it (of the file's bytes: what a checkpoint matches and a secure-aggregation client pins).
    Everything a run needs of its plan comes from here, never from the file again.

    Args:
        source: Where the plan came from: its file's path, or :data:`IN_MEMORY`.
        plan: The plan.
        sha256: The SHA-256 that names the plan.
    """

    source: str
    plan: Plan
    sha256: str

    @property
    def trust(self) -> Trust:
        """The trust model the plan was solved for."""
        return self.plan.trust

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunPlan:
        """The plan file at ``path``, read and checked for consistency (PlanFileError otherwise), not yet verified."""
        path = Path(path)
        if not path.is_file():
            raise PlanFileError(f"plan file {path} not found")
        raw = path.read_bytes()
        plan = plan_from_dict(parse_document(raw, path))
        return cls(source=str(path), plan=plan, sha256=hashlib.sha256(raw).hexdigest())

    @classmethod
    def of(cls, plan: Plan) -> RunPlan:
        """A plan given in memory, named by the SHA-256 of its canonical JSON."""
        digest = hashlib.sha256(json.dumps(plan_to_dict(plan), sort_keys=True).encode()).hexdigest()
        return cls(source=IN_MEMORY, plan=plan, sha256=digest)

    @classmethod
    def bind(cls, plan: str | os.PathLike[str] | Plan | RunPlan) -> RunPlan:
        """``plan`` as a run follows it: a plan file's path read (:meth:`read`), a plan in memory (:meth:`of`), or a
        :class:`RunPlan` already bound, as it is."""
        if isinstance(plan, RunPlan):
            return plan
        return cls.of(plan) if isinstance(plan, Plan) else cls.read(plan)


def run_spec(cfg: RunSettings, run_plan: RunPlan, n_clients: int) -> tuple[int, GroupSpec]:
    """What a run of ``run_plan`` follows, in one call: the rounds it runs (``cfg.rounds``, by default the plan's T)
    once the plan verifies (its rows and its trust model's sections), and the groups of the plan's row that
    ``cfg.method`` runs (a selection method: the row of the method that plans it) under the trust model the run
    follows (:func:`~.trust.run_trust`), checked for ``--audit``. Refused (one line): a plan that fails verification, a
    data partition of another size than the plan's n, and a plan made from per-client budgets whose clients
    ``cfg.ledger.groups`` does not name."""
    plan, source = run_plan.plan, run_plan.source
    problems = plan_problems(plan)
    if problems:
        raise TrainError(f"plan {source} fails verification: {problems[0]}")
    t = plan.config.rounds
    rounds = t if cfg.rounds is None else cfg.rounds
    if not 1 <= rounds <= t:
        raise TrainError(f"--rounds must be between 1 and the plan's T = {t}, got {rounds}")
    if n_clients != plan.config.n:
        raise TrainError(
            f"plan has n = {plan.config.n} clients but the {cfg.data.dataset} partition gives n = {n_clients}: "
            f"re-plan with --n {n_clients} or train with --clients {plan.config.n}"
        )
    # a selection method: each client the ε of its group in its row, as the method planning that row executes it
    key = cfg.method if cfg.method in METHOD_NAMES else planner(REGISTRY[cfg.method].row)
    try:
        trust = run_trust(cfg, REGISTRY[key].private, run_plan.trust, source=source)
        row = plan.method(METHOD_NAMES[key])
        plan_clients(plan, row, cfg.ledger.groups)  # a plan made from per-client budgets: only with their groups file
        spec = trusted_spec(row_spec(row, plan.config, key), trust, row, plan.config, dropout=cfg.noise.dropout)
    except KeyError:
        raise TrainError(f"{source}: the plan has no {METHOD_NAMES[key]} noise: re-plan with hdp-plan solve --methods "
                         f"{key}") from None  # fmt: skip
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    if cfg.audit.enabled:
        from hdp_planner_train.audit.canaries import check_auditable

        try:
            check_auditable(spec)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    return rounds, spec
