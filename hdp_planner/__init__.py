"""hdp-planner: plan federated learning under heterogeneous DP budgets (GDPFed / GDPFed+).

>>> from hdp_planner import Groups, PlanConfig, plan, calibrate_sigma
"""

from hdp_planner.accounting.calibration import GaussianRounds, calibrate_q, calibrate_sigma, epsilon_spent
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines
from hdp_planner.methods.gdpfed import plan, solve_plan
from hdp_planner.planfile.document import PlanFileError, load_plan, plan_to_dict, save_plan, verify
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import METHODS, MethodNoise, Plan, PlanConfig

__version__ = "0.1.0"
__all__ = [
    "BASELINES",
    "METHODS",
    "BaselineOptions",
    "GaussianRounds",
    "Groups",
    "MethodNoise",
    "Plan",
    "PlanConfig",
    "PlanFileError",
    "__version__",
    "add_baselines",
    "calibrate_q",
    "calibrate_sigma",
    "epsilon_spent",
    "load_plan",
    "plan",
    "plan_to_dict",
    "save_plan",
    "solve_plan",
    "verify",
]
