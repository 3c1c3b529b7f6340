"""The plan a run follows: loaded and verified, the rounds it runs, its clients, and the method's groups under the
trust model the run follows."""

from __future__ import annotations

from hdp_planner.ledger.runs import plan_clients
from hdp_planner.methods.registry import REGISTRY, planner
from hdp_planner.planfile.document import load_plan, read_document, verify
from hdp_planner.planning.plan import Plan
from hdp_planner_train.rules.aggregate import METHOD_NAMES, GroupSpec, method_spec
from hdp_planner_train.rules.cohort import planned_secure
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings
from hdp_planner_train.run.trust import run_trust


def verified_plan(cfg: RunSettings) -> tuple[Plan, int]:
    """The plan of ``cfg.plan``, refused unless it verifies, and the rounds the run runs (``cfg.rounds``, by default
    the plan's T)."""
    plan = load_plan(cfg.plan)
    problems = verify(plan)
    if problems:
        raise TrainError(f"plan {cfg.plan} fails verification: {problems[0]}")
    t = plan.config.rounds
    rounds = t if cfg.rounds is None else cfg.rounds
    if not 1 <= rounds <= t:
        raise TrainError(f"--rounds must be between 1 and the plan's T = {t}, got {rounds}")
    return plan, rounds


def check_clients(cfg: RunSettings, plan: Plan, n_clients: int) -> None:
    """Refuse a data partition of another size than the plan's n."""
    if n_clients != plan.config.n:
        raise TrainError(
            f"plan has n = {plan.config.n} clients but the {cfg.dataset} partition gives n = {n_clients}: "
            f"re-plan with --n {n_clients} or train with --clients {plan.config.n}"
        )


def method_groups(cfg: RunSettings, plan: Plan) -> GroupSpec:
    """The groups of the plan's row that ``cfg.method`` runs (a selection method: the row of the method that plans
    it), refused where the plan was made from per-client budgets and ``cfg.groups`` does not name the clients."""
    try:
        # a selection method: each client the ε of its group in its row, as the method planning that row executes it
        spec = method_spec(plan, cfg.method if cfg.method in METHOD_NAMES else planner(REGISTRY[cfg.method].row))
    except ValueError as exc:
        raise TrainError(f"{cfg.plan}: {exc}") from None
    try:  # a plan made from per-client budgets runs only with the clients' own groups file
        plan_clients(plan, METHOD_NAMES[spec.method], read_document(cfg.plan), cfg.groups)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    return spec


def secagg_spec(cfg: RunSettings, plan: Plan, spec: GroupSpec) -> GroupSpec:
    """The method's groups under the plan's ``secagg`` trust object (verified, :func:`~hdp_planner_train.rules.secagg.
    planned_groups`), or its public cohorts and private coins where it was solved with ``--hide-sample``
    (:func:`~hdp_planner_train.rules.cohort.planned_cohorts`), and the simulated dropout rate."""
    if not 0 <= cfg.dropout < 1:
        raise TrainError(f"--dropout must lie in [0, 1), got {cfg.dropout}")
    try:
        return planned_secure(read_document(cfg.plan), plan, spec, METHOD_NAMES[spec.method], cfg.dropout)
    except ValueError as exc:
        raise TrainError(str(exc).replace("this plan", cfg.plan)) from None


def trusted_groups(cfg: RunSettings, plan: Plan, spec: GroupSpec) -> GroupSpec:
    """``spec`` under the trust model the run follows (:func:`~.trust.run_trust`), checked for ``--audit``."""
    if run_trust(cfg, spec) == "secagg":
        spec = secagg_spec(cfg, plan, spec)
    if cfg.audit:
        from hdp_planner_train.audit.canaries import check_auditable

        try:
            check_auditable(spec)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    return spec
