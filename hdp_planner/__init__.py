"""hdp-planner: plan federated learning under heterogeneous DP budgets (GDPFed / GDPFed+).

The planning core's public API:

- Plans: :func:`plan` and :func:`solve_plan` solve one (:class:`Plan`, configured by :class:`PlanConfig`), and
  :func:`add_baselines` adds baseline rows; :func:`solve` does all of it with a trust model's sections (every row
  under secure aggregation, with cohorts hiding who contributes), verified, as ``hdp-plan solve`` does;
  :func:`save_plan` and :func:`load_plan` write and read plan files (a file holding a different plan is replaced
  only with ``overwrite=True``: :class:`EarlierResult`).
- Verification: :func:`verify` re-derives every group's ε from a plan and raises :class:`PlanVerificationError`
  carrying every problem, as :func:`load_plan` raises :class:`PlanFileError`; :func:`plan_problems` lists the
  problems instead (empty: the plan verifies).
- Accountants, behind one protocol (:class:`PrivacyAccountant`) and one registry: :func:`accountant_names`,
  :func:`get_accountant` (look one up by the name a plan stores), :func:`register_accountant`.
- Methods: :data:`METHOD_REGISTRY` (``--method`` key → :class:`Method`), read by the planner, ``verify``, the
  trainer and Flower.
- The privacy ledger: :class:`Ledger` (every client's spending over all its runs), :class:`ClientSpending`,
  :class:`LedgerError`.

>>> from hdp_planner import Groups, PlanConfig, plan, calibrate_sigma

A new method is one module and one registry entry. The module declares its :class:`Method` records, here a row
derived from GDPFed's (every group at the plan's q, its own σ_m):

    # hdp_planner/methods/toy.py
    from hdp_planner.methods.method import Method, RoundRules
    from hdp_planner.planning.rows import derived_row

    def build(plan, options):
        return derived_row("Toy", plan.method("GDPFed"), plan)

    METHODS = (Method(key="toy", row="Toy", rules=RoundRules(sampling="plan-q"), build=build, audit=True, flower=True),)

and its name joins ``MODULES`` in :mod:`hdp_planner.methods.registry`. From then on ``solve --methods toy`` plans
the row, ``verify`` checks it, and ``train --method toy`` and Flower run it; no other code names it. (In a notebook,
``METHOD_REGISTRY["toy"] = METHODS[0]`` registers it for the session.)
"""

from typing import TYPE_CHECKING

from hdp_planner.io.lazy import lazy_getattr

if TYPE_CHECKING:
    from hdp_planner.accounting.accountants import (
        PrivacyAccountant,
        accountant_names,
        get_accountant,
        register_accountant,
    )
    from hdp_planner.accounting.calibration import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
    from hdp_planner.io.overwrite import EarlierResult
    from hdp_planner.ledger.state import ClientSpending
    from hdp_planner.ledger.store import Ledger, LedgerError
    from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines
    from hdp_planner.methods.gdpfed import plan, solve_plan
    from hdp_planner.methods.method import Method, RoundRules
    from hdp_planner.methods.registry import REGISTRY as METHOD_REGISTRY
    from hdp_planner.planfile.document import (
        PlanFileError,
        PlanVerificationError,
        load_plan,
        plan_problems,
        plan_to_dict,
        save_plan,
        verify,
    )
    from hdp_planner.planning.config import PlanConfig
    from hdp_planner.planning.grouping import Groups
    from hdp_planner.planning.method_noise import MethodNoise
    from hdp_planner.planning.plan import METHODS, Plan, Trust
    from hdp_planner.solving import solve

SOURCES = {
    **dict.fromkeys(("PrivacyAccountant", "accountant_names", "get_accountant", "register_accountant"),
                    "hdp_planner.accounting.accountants"),
    **dict.fromkeys(("GaussianRounds", "calibrate_q", "calibrate_sigma", "epsilon_spent"),
                    "hdp_planner.accounting.calibration"),
    "ClientSpending": "hdp_planner.ledger.state",
    "EarlierResult": "hdp_planner.io.overwrite",
    "Ledger": "hdp_planner.ledger.store",
    "LedgerError": "hdp_planner.ledger.store",
    **dict.fromkeys(("BASELINES", "BaselineOptions", "add_baselines"), "hdp_planner.methods.baselines"),
    **dict.fromkeys(("plan", "solve_plan"), "hdp_planner.methods.gdpfed"),
    **dict.fromkeys(("Method", "RoundRules"), "hdp_planner.methods.method"),
    **dict.fromkeys(("PlanFileError", "PlanVerificationError", "load_plan", "plan_problems", "plan_to_dict",
                     "save_plan", "verify"), "hdp_planner.planfile.document"),
    "Groups": "hdp_planner.planning.grouping",
    "METHOD_REGISTRY": "hdp_planner.methods.registry:REGISTRY",
    **dict.fromkeys(("METHODS", "Plan", "Trust"), "hdp_planner.planning.plan"),
    "MethodNoise": "hdp_planner.planning.method_noise",
    "PlanConfig": "hdp_planner.planning.config",
    "solve": "hdp_planner.solving",
}  # fmt: skip
__getattr__ = lazy_getattr(__name__, SOURCES)
"""Every name of the API loads its module on first use: importing the package (as importing any of its modules does)
loads none of the accountants, SciPy or SQLAlchemy."""

__version__ = "0.1.0"
__all__ = [
    "BASELINES",
    "METHODS",
    "METHOD_REGISTRY",
    "BaselineOptions",
    "ClientSpending",
    "EarlierResult",
    "GaussianRounds",
    "Groups",
    "Ledger",
    "LedgerError",
    "Method",
    "MethodNoise",
    "Plan",
    "PlanConfig",
    "PlanFileError",
    "PlanVerificationError",
    "PrivacyAccountant",
    "RoundRules",
    "Trust",
    "__version__",
    "accountant_names",
    "add_baselines",
    "calibrate_q",
    "calibrate_sigma",
    "epsilon_spent",
    "get_accountant",
    "load_plan",
    "plan",
    "plan_problems",
    "plan_to_dict",
    "register_accountant",
    "save_plan",
    "solve",
    "solve_plan",
    "verify",
]
