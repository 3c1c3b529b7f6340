"""The rules every plan row must follow: :func:`row_problems` checks each row against its method's definition (GDPFed
Table 3, Appendix B.2; the round rules and the ``check`` each method declares in :mod:`hdp_planner.methods.registry`):
DP-FedAvg is one group of all n clients at the plan's q, noised for the strictest ε; every other row has the plan's
groups; GDPFed, PFA, IDP-FedAvg-Scale and Time-adaptive sample every group at the plan's q; GDPFed+ has GDPFed-op's q
and σ; IDP-FedAvg-Sample has one σ; a pooled row has one noise std C_m·σ_m. What a row executes as is
:mod:`hdp_planner.planning.mechanism`.
"""

from __future__ import annotations

from hdp_planner.methods.method import all_close, close
from hdp_planner.methods.registry import REGISTRY, row_rules
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan


def pooled_problem(m: MethodNoise, default_clip: float) -> str | None:
    """Why a pooled row's C_m·σ_m differ (one noise draw has one std), or None."""
    std = [cm * s for cm, s in zip(m.clips(default_clip), m.noise_multiplier)]
    if m.pooled and not all(close(s, std[0]) for s in std):
        return "a pooled noise draw needs the same C_m·σ_m in every group"
    return None


def row_problems(plan: Plan) -> list[str]:
    """Where a row departs from its method's definition (empty: every row is what its method says)."""
    c, groups = plan.config, plan.groups
    problems = []
    for m in plan.methods:
        where = f"{m.name}"
        rules = row_rules(m.name)
        if rules is not None and rules.groups == "one":
            if m.size != (c.n,):
                problems.append(f"{where}: must be one group of all n = {c.n} clients, has sizes {list(m.size)}")
                continue
            if not close(m.epsilon[0], min(groups.epsilon)):
                problems.append(f"{where}: budget ε={m.epsilon[0]:g} is not the strictest ε={min(groups.epsilon):g}")
            if not close(m.q[0], c.q):
                problems.append(f"{where}: q = {m.q[0]:.6g} is not the plan's q = {c.q:.6g}")
            continue
        if m.size != groups.size or not all_close(m.epsilon, groups.epsilon):
            problems.append(f"{where}: its groups (ε, size) are not the plan's groups")
            continue
        if rules is not None and rules.sampling == "plan-q" and not all(close(q, c.q) for q in m.q):
            problems.append(f"{where}: every group must be sampled at the plan's q = {c.q:.6g}")
        own = next((x.check for x in REGISTRY.values() if x.row == m.name and x.check is not None), None)
        if own is not None and (problem := own(plan, m)):
            problems.append(f"{where}: {problem}")
        if pooled_problem(m, c.clip):
            problems.append(f"{where}: {pooled_problem(m, c.clip)}")
    return problems
