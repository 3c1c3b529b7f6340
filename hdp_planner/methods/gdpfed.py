"""GDPFed's methods (GDPFed Table 3/5) and the solver that plans their rows together.

- DP-FedAvg: all n clients one group at rate q, noised for the strictest ε;
- GDPFed: every group at rate q, each noised for its own ε_m;
- GDPFed-op: Problem 1's q_m (or ``fixed_q``), each group noised for ε_m at q_m;
- GDPFed+: GDPFed-op plus Top-k sparsification at k_m (``sparsity`` or Remark 3's closed form);
- p-fedavg: DP-FedAvg's rounds without clipping or noise (the accuracy ceiling; it trains from DP-FedAvg's row).

:func:`solve_plan` solves Problem 1 once and builds the four rows from it (GDPFed+ shares GDPFed-op's q_m and σ_m),
so no entry has a row builder of its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import closed_form_sigma2
from hdp_planner.methods.method import Method, RoundRules, all_close
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import PLANNED_METHOD, Plan
from hdp_planner.planning.problem import SamplingProblem, closed_form_k_ratio, reweighting
from hdp_planner.planning.rows import method_noise, sigma2_model

STARVED_CLIENTS = 0.5
"""A group expecting fewer clients per round than this is reported as starved by Problem 1."""
NEGLIGIBLE_SPARSITY = 0.999
"""Remark 3's k_m/d at or above this in every group makes GDPFed+ GDPFed-op in all but name (reported)."""


def plan(epsilons: Sequence[float], n: int, sizes: Sequence[int] | None = None, **options: object) -> Plan:
    """Plan GDPFed+ for groups with budgets ``epsilons`` over ``n`` clients, as ``hdp-plan solve`` does.

    Example: ``plan([0.5, 1.5, 3.0], n=6000)``.

    Args:
        epsilons: ε_m of every group.
        n: the number of clients.
        sizes: |G_m| of every group, summing to n; None splits n evenly.
        **options: :class:`~hdp_planner.planning.plan.PlanConfig`'s fields (rounds, q, delta, clip, lr,
            local_steps, accountant, sigma_model, lambda_convention, sparsity, fixed_q, min_share).

    Returns:
        The solved plan (see :func:`solve_plan`).

    Raises:
        ValueError: an invalid budget, size or option (one line).
    """
    return solve_plan(Groups.from_budgets(epsilons, n, sizes), PlanConfig(n=n, **options))  # type: ignore[arg-type]


def solve_plan(groups: Groups, config: PlanConfig) -> Plan:
    """Solve GDPFed+ for ``groups`` under ``config`` and compare it with DP-FedAvg, GDPFed and GDPFed-op.

    The q_m solve Problem 1 (or are ``config.fixed_q``); every row's σ_m is calibrated by the plan's accountant so
    that group m spends at most ε_m over T rounds at its sampling ratio; k_m follows Remark 3 (or
    ``config.sparsity``).

    Args:
        groups: the groups' ε_m and |G_m|.
        config: the plan's settings; ``config.n`` must be the groups' total size.

    Returns:
        The plan with its four rows, Problem 1's objective at the chosen and at uniform q, and notes.

    Raises:
        ValueError: sizes that do not sum to n, or sparsity or fixed q of the wrong length (one line).
    """
    if groups.n != config.n:
        raise ValueError(f"group sizes sum to {groups.n}, not n = {config.n}")
    m = groups.count
    for name, values in (("sparsity", config.sparsity), ("fixed q", config.fixed_q)):
        if values is not None and len(values) != m:
            raise ValueError(f"{name} has {len(values)} values for {m} groups")
    notes: list[str] = []
    coef = config.coefficients
    sigma2_of = sigma2_model(groups, config)
    eps, sizes = groups.epsilons, groups.sizes
    uniform = [config.q] * m

    problem = SamplingProblem(sizes=sizes, q=config.q, sigma2_of=sigma2_of, coef=coef, min_share=config.min_share)
    if config.fixed_q is not None:
        q_op = list(config.fixed_q)
        total = sum(q * s for q, s in zip(q_op, sizes))
        if not math.isclose(total, config.q * config.n, rel_tol=1e-6):
            notes.append(f"fixed q gives {total:.4g} expected clients per round, not q·n = {config.q * config.n:.4g}")
        obj, uni = problem.value(q_op), problem.value(uniform)
    else:
        sol = problem.solve()
        q_op, obj, uni = list(sol.q), sol.objective, sol.uniform_objective
        for qm, e, size in zip(q_op, eps, sizes):
            if qm >= 1.0 - 1e-9:
                notes.append(f"group ε={e:g} is sampled with q = 1 (every client, every round)")
            elif qm * size < STARVED_CLIENTS:
                keep = (
                    "--sigma-model bound, --fixed-q or --min-share"
                    if config.sigma_model == "accountant"
                    else ("--fixed-q or --min-share")
                )
                notes.append(
                    f"group ε={e:g} is starved: q = {qm:.2g} ({qm * size:.2g} expected clients per round); "
                    "Problem 1 prefers the looser groups and has no term for what this group's data adds. "
                    f"Keep it with {keep}"
                )

    ones = [1.0] * m
    op = _row(OP, epsilons=eps, sizes=sizes, q=q_op, k_ratio=ones, config=config)
    if config.sparsity is not None:
        k_plus = list(config.sparsity)
    else:
        k_arr, clamped = closed_form_k_ratio(
            weight=reweighting(op.expected_clients),
            sigma2=np.asarray(op.sigma2),
            expected_clients=np.asarray(op.expected_clients),
            coef=coef,
        )
        k_plus = k_arr.tolist()
        for e, c in zip(eps, clamped):
            if c:
                notes.append(f"Remark 3 gives k/d ≤ 0 for group ε={e:g}; clamped to k/d = {k_arr.min():g}")
        if min(k_plus) >= NEGLIGIBLE_SPARSITY:
            notes.append(
                f"Remark 3's closed form keeps nearly every coordinate (k_m/d ≥ {min(k_plus):.4f} in every group), "
                "so GDPFed+ is GDPFed-op here to within 0.1% of Λ; give --sparsity to sparsify anyway"
            )
    methods = (
        _row(DP_FEDAVG, epsilons=[min(eps)], sizes=[groups.n], q=[config.q], k_ratio=[1.0], config=config),
        _row(GDPFED, epsilons=eps, sizes=sizes, q=uniform, k_ratio=ones, config=config),
        op,
        _row(
            PLUS, epsilons=eps, sizes=sizes, q=q_op, k_ratio=k_plus, config=config, noise_multiplier=op.noise_multiplier
        ),
    )
    if get_accountant(config.accountant).rule:
        notes.extend(_theorem1_shortfalls(methods, config))
    return Plan(config=config, methods=methods, objective=float(obj), uniform_objective=float(uni), notes=tuple(notes))


def _row(method: Method, **kwargs) -> MethodNoise:
    """``method``'s row (its name and Table 5 weights) by :func:`~hdp_planner.planning.rows.method_noise`."""
    return method_noise(method.row, paper_weights=method.paper_weights, **kwargs)


def _theorem1_shortfalls(methods: Sequence[MethodNoise], config: PlanConfig) -> list[str]:
    """Where Theorem 1's σ spends more than ε by the exact accountant (and so was raised to RDP's σ)."""
    notes = []
    for m in methods[:3]:  # GDPFed+ shares GDPFed-op's σ
        for e, q, sigma in zip(m.epsilon, m.q, m.noise_multiplier):
            theorem1 = closed_form_sigma2(epsilon=e, delta=config.delta, q=q, rounds=config.rounds)
            if sigma**2 > theorem1 * (1 + 1e-9):
                notes.append(
                    f"{m.name}, ε={e:g}, q={q:.4g}: Theorem 1's σ²={theorem1:.4g} would overspend ε; "
                    f"raised to the exact RDP σ²={sigma**2:.4g}"
                )
    return notes


def op_check(p: Plan, m: MethodNoise) -> str | None:
    """GDPFed-op samples at the plan's fixed q when one is given.

    Args:
        p: the plan.
        m: its GDPFed-op row.

    Returns:
        What is wrong with the row, or None.
    """
    if p.config.fixed_q is not None and not all_close(m.q, p.config.fixed_q):
        return "q must be the plan's fixed q"
    return None


def plus_check(p: Plan, m: MethodNoise) -> str | None:
    """GDPFed+ is GDPFed-op's q_m and σ_m with Top-k.

    Args:
        p: the plan.
        m: its GDPFed+ row.

    Returns:
        What is wrong with the row, or None.
    """
    op = p.method("GDPFed-op")
    if not (all_close(m.q, op.q) and all_close(m.noise_multiplier, op.noise_multiplier)):
        return "q and σ must be GDPFed-op's"
    return None


TOP_K = RoundRules(sampling="per-group-q", top_k=True)  # GDPFed-op's rounds, Top-k_m of each group's noisy sum
DP_FEDAVG = Method(key="dp-fedavg", row="DP-FedAvg", rules=RoundRules(sampling="plan-q", groups="one"), audit=True,
                   flower=True, paper_weights="uniform")  # fmt: skip
GDPFED = Method(
    key="gdpfed", row="GDPFed", rules=RoundRules(sampling="plan-q"), audit=True, flower=True, paper_weights="uniform"
)
OP = Method(key="gdpfed-op", row="GDPFed-op", rules=RoundRules(sampling="per-group-q"), audit=True, flower=True,
            check=op_check, paper_weights="participation")  # fmt: skip
PLUS = Method(key="gdpfed+", row=PLANNED_METHOD, rules=TOP_K, audit=True, flower=True, check=plus_check,
              paper_weights="participation")  # fmt: skip
METHODS = (
    Method(key="p-fedavg", row="DP-FedAvg", private=False),  # trains from DP-FedAvg's row without noise
    DP_FEDAVG,
    GDPFED,
    OP,
    PLUS,
)
