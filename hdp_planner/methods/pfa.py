"""PFA (Liu et al., VLDB 2021) adapted to M groups as in GDPFed B.2: its plan row and round rules."""

from __future__ import annotations

from hdp_planner.methods.method import Method, RoundRules
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.method_noise import MethodNoise, Projection
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.rows import derived_row


def pfa(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """PFA (Liu et al., VLDB 2021, Algorithm 2-3) adapted to M groups as in GDPFed B.2.

    The highest-ε group is PFA's "public" group, the lowest-ε group is projected, the others are aggregated
    directly; sampling, noise and weights are GDPFed's (every group at q, σ_m for ε_m, ω_m = r_m/Σr²). As in
    PFA, whose clients all run DP with their own ε, the public group is noised for its own ε too. Each round the
    projected group's noisy sum y is replaced by V Vᵀ y, V the top-k left singular vectors of the public group's
    latest ``pfa_window`` noisy sums (released outputs, so the projection is post-processing and costs no
    privacy; PFA uses the public clients' individual updates, which client-level DP does not release). V does
    not depend on the projected group's noise, so it keeps k/d of that noise: k_m/d = k/d in Λ.
    """
    base = plan.method("GDPFed")
    eps = base.epsilon
    if len(eps) < 2 or max(eps) == min(eps):
        raise ValueError("pfa needs at least two groups with different ε (a public and a projected group)")
    if options.model_dim is None:
        raise ValueError("pfa needs the model's parameter count d for its noise (--model-dim)")
    public = max(range(len(eps)), key=lambda m: (eps[m], m))
    projected = min(range(len(eps)), key=lambda m: (eps[m], m))
    proj = Projection(
        public=public,
        projected=projected,
        dim=options.pfa_dim,
        window=options.pfa_window,
        subspace=options.pfa_subspace,
        model_dim=options.model_dim,
    )
    k = [1.0] * len(eps)
    k[projected] = options.pfa_dim / options.model_dim
    return derived_row("PFA", base, plan, k_ratio=tuple(k), projection=proj)


def two_budgets(epsilons: tuple[float, ...]) -> bool:
    """PFA needs a public and a projected group: at least two different ε."""
    return len(set(epsilons)) > 1


RULES = RoundRules(sampling="plan-q", projection=True)  # every group at the plan's q, one group's noisy sum projected
METHODS = (
    Method(
        key="pfa", row="PFA", rules=RULES, build=pfa, audit=True, flower=True, needs_model_dim=True, in_all=two_budgets
    ),
)
