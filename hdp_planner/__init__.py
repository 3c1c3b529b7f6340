"""hdp-planner: plan federated learning under heterogeneous DP budgets (GDPFed / GDPFed+).

The planning core's public API: solving and verifying plans (:func:`plan`, :func:`verify`), plan files, the
accountants behind one protocol and registry (:func:`get_accountant`, :func:`register_accountant`), and the method
registry a new method joins with one :class:`Method` entry (:data:`METHOD_REGISTRY`).

>>> from hdp_planner import Groups, PlanConfig, plan, calibrate_sigma
"""

from hdp_planner.accounting.accountants import (
    PrivacyAccountant,
    accountant_names,
    get_accountant,
    register_accountant,
)
from hdp_planner.accounting.calibration import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines
from hdp_planner.methods.gdpfed import plan, solve_plan
from hdp_planner.methods.method import Method, RoundRules
from hdp_planner.methods.registry import REGISTRY as METHOD_REGISTRY
from hdp_planner.planfile.document import PlanFileError, load_plan, plan_to_dict, save_plan, verify
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import METHODS, MethodNoise, Plan, PlanConfig

__version__ = "0.1.0"
__all__ = [
    "BASELINES",
    "METHODS",
    "METHOD_REGISTRY",
    "BaselineOptions",
    "GaussianRounds",
    "Groups",
    "Method",
    "MethodNoise",
    "Plan",
    "PlanConfig",
    "PlanFileError",
    "PrivacyAccountant",
    "RoundRules",
    "__version__",
    "accountant_names",
    "add_baselines",
    "calibrate_q",
    "calibrate_sigma",
    "epsilon_spent",
    "get_accountant",
    "load_plan",
    "plan",
    "plan_to_dict",
    "register_accountant",
    "save_plan",
    "solve_plan",
    "verify",
]
