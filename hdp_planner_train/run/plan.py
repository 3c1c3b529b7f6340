"""The plan a run follows, read once: a :class:`RunPlan` (the plan, its document, SHA-256 and trust model), verified;
the rounds it runs, its clients, and the method's groups under the trust model the run follows."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hdp_planner.distributed.trust import TrustKind
from hdp_planner.ledger.runs import plan_clients
from hdp_planner.methods.registry import REGISTRY, planner
from hdp_planner.planfile.document import check_grouping, plan_from_dict, plan_problems, plan_to_dict
from hdp_planner.planfile.schema import PlanFileError, parse_document
from hdp_planner.planfile.trust import trust_from_dict
from hdp_planner.planning.plan import Plan
from hdp_planner_train.rules.cohort import planned_secure
from hdp_planner_train.rules.specs import METHOD_NAMES, GroupSpec, method_spec
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings
from hdp_planner_train.run.trust import run_trust

IN_MEMORY = "the plan given"
"""The :attr:`RunPlan.source` of a plan given as a :class:`~hdp_planner.planning.plan.Plan`, not read from a file."""


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """A plan bound for a run, read once: the plan, the document it was read from, the SHA-256 that names it (of the
    file's bytes: what a checkpoint matches and a secure-aggregation client pins) and the trust model it was solved
    for. Everything a run needs of its plan comes from here, never from the file again.

    Args:
        source: Where the plan came from: its file's path, or :data:`IN_MEMORY`.
        plan: The plan.
        document: The plan file's JSON document (the trust object and hidden participation included).
        sha256: The SHA-256 that names the plan.
        trust: The trust model the plan was solved for.
    """

    source: str
    plan: Plan
    document: dict[str, Any]
    sha256: str
    trust: TrustKind

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunPlan:
        """The plan file at ``path``, read and checked for consistency (PlanFileError otherwise), not yet verified."""
        path = Path(path)
        if not path.is_file():
            raise PlanFileError(f"plan file {path} not found")
        raw = path.read_bytes()
        return cls.of_document(parse_document(raw, path), source=str(path), sha256=hashlib.sha256(raw).hexdigest())

    @classmethod
    def of(cls, plan: Plan) -> RunPlan:
        """A plan given in memory (a trusted server's: a plan object holds no trust object), named by the SHA-256 of
        its canonical JSON."""
        doc = plan_to_dict(plan)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        return cls.of_document(doc, source=IN_MEMORY, sha256=digest)

    @classmethod
    def bind(cls, plan: str | os.PathLike[str] | Plan | RunPlan) -> RunPlan:
        """``plan`` as a run follows it: a plan file's path read (:meth:`read`), a plan in memory (:meth:`of`), or a
        :class:`RunPlan` already bound, as it is."""
        if isinstance(plan, RunPlan):
            return plan
        return cls.of(plan) if isinstance(plan, Plan) else cls.read(plan)

    @classmethod
    def of_document(cls, doc: dict[str, Any], *, source: str, sha256: str) -> RunPlan:
        plan = plan_from_dict(doc)
        check_grouping(plan, doc)
        return cls(source=source, plan=plan, document=doc, sha256=sha256, trust=trust_from_dict(doc).kind)


def verified_rounds(run_plan: RunPlan, rounds: int | None) -> int:
    """The rounds a run of ``run_plan`` runs (``rounds``, by default the plan's T), once the plan verifies."""
    problems = plan_problems(run_plan.plan)
    if problems:
        raise TrainError(f"plan {run_plan.source} fails verification: {problems[0]}")
    t = run_plan.plan.config.rounds
    rounds = t if rounds is None else rounds
    if not 1 <= rounds <= t:
        raise TrainError(f"--rounds must be between 1 and the plan's T = {t}, got {rounds}")
    return rounds


def check_clients(cfg: RunSettings, plan: Plan, n_clients: int) -> None:
    """Refuse a data partition of another size than the plan's n."""
    if n_clients != plan.config.n:
        raise TrainError(
            f"plan has n = {plan.config.n} clients but the {cfg.data.dataset} partition gives n = {n_clients}: "
            f"re-plan with --n {n_clients} or train with --clients {plan.config.n}"
        )


def method_groups(cfg: RunSettings, run_plan: RunPlan) -> GroupSpec:
    """The groups of the plan's row that ``cfg.method`` runs (a selection method: the row of the method that plans
    it), refused where the plan was made from per-client budgets and ``cfg.ledger.groups`` does not name the clients."""
    plan = run_plan.plan
    try:
        # a selection method: each client the ε of its group in its row, as the method planning that row executes it
        spec = method_spec(plan, cfg.method if cfg.method in METHOD_NAMES else planner(REGISTRY[cfg.method].row))
    except ValueError as exc:
        raise TrainError(f"{run_plan.source}: {exc}") from None
    try:  # a plan made from per-client budgets runs only with the clients' own groups file
        plan_clients(plan, METHOD_NAMES[spec.method], run_plan.document, cfg.ledger.groups)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    return spec


def secagg_spec(cfg: RunSettings, run_plan: RunPlan, spec: GroupSpec) -> GroupSpec:
    """The method's groups under the plan's ``secagg`` trust object (verified, :func:`~hdp_planner_train.rules.secagg.
    planned_groups`), or its public cohorts and private coins where it was solved with ``--hide-sample``
    (:func:`~hdp_planner_train.rules.cohort.planned_cohorts`), and the simulated dropout rate."""
    if not 0 <= cfg.noise.dropout < 1:
        raise TrainError(f"--dropout must lie in [0, 1), got {cfg.noise.dropout}")
    try:
        return planned_secure(run_plan.document, run_plan.plan, spec, METHOD_NAMES[spec.method], cfg.noise.dropout)
    except ValueError as exc:
        raise TrainError(str(exc).replace("this plan", run_plan.source)) from None


def trusted_groups(cfg: RunSettings, run_plan: RunPlan, spec: GroupSpec) -> GroupSpec:
    """``spec`` under the trust model the run follows (:func:`~.trust.run_trust`), checked for ``--audit``."""
    if run_trust(cfg, spec, run_plan.trust, source=run_plan.source) == "secagg":
        spec = secagg_spec(cfg, run_plan, spec)
    if cfg.audit.enabled:
        from hdp_planner_train.audit.canaries import check_auditable

        try:
            check_auditable(spec)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    return spec
