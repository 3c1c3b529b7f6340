"""Per-client privacy budgets: read them, group them, and assign clients to a plan's groups.

The public face of five modules, one idea each; callers import from here:

- :mod:`~hdp_planner.planning.budget_files`: reading budgets and groups files, the budgets digest, ``BudgetError``;
- :mod:`~hdp_planner.planning.budget_counts`: the streamed histogram of distinct budgets;
- :mod:`~hdp_planner.planning.budget_scoring`: the closed-form score H of a grouping (Problem 1 at φ = 0);
- :mod:`~hdp_planner.planning.budget_grouping`: the unique, quantile and optimal (DP) groupings;
- :mod:`~hdp_planner.planning.budget_assignment`: each client's group in a plan.

A group's ε is the minimum of its members' budgets, so no client's budget is ever exceeded: a client joins the
group whose ε is the largest ≤ its budget.
"""

from __future__ import annotations

from hdp_planner.planning.budget_assignment import Assignment, assign_to_groups
from hdp_planner.planning.budget_counts import budget_histogram
from hdp_planner.planning.budget_files import (
    BudgetError,
    budgets_digest,
    load_budget_columns,
    load_budgets,
    load_budgets_with_delta,
    read_assignment,
)
from hdp_planner.planning.budget_grouping import (
    GROUPINGS,
    MAX_GROUPS,
    groups_from_budgets,
    groups_from_histogram,
    parse_group_count,
)
from hdp_planner.planning.budget_scoring import (
    budget_score,
    closed_form_check,
    closed_form_noise_term,
    closed_form_objective,
    closed_form_q,
)
from hdp_planner.planning.grouping import Grouping

__all__ = [
    "GROUPINGS",
    "MAX_GROUPS",
    "Assignment",
    "BudgetError",
    "Grouping",
    "assign_to_groups",
    "budget_histogram",
    "budget_score",
    "budgets_digest",
    "closed_form_check",
    "closed_form_noise_term",
    "closed_form_objective",
    "closed_form_q",
    "groups_from_budgets",
    "groups_from_histogram",
    "load_budget_columns",
    "load_budgets",
    "load_budgets_with_delta",
    "parse_group_count",
    "read_assignment",
]
