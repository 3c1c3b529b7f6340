"""The baselines of GDPFed (Section 2, Appendix B.2), planned on the same groups, sampling, clipping and noise.

Each is a :class:`~hdp_planner.plan.MethodNoise` added to a solved plan by :func:`add_baselines`, checked by the
same accountant, written to and verified from the same plan file, and trained by ``hdp-plan train --method``:

- ``pfa``: Projected Federated Averaging (Liu et al., VLDB 2021), adapted to three groups as in B.2;
- ``idp-fedavg-sample`` / ``idp-fedavg-scale``: individualized DP-SGD (Boenisch et al., NeurIPS 2023) at client
  level as in B.2 (following Kiani et al.), with the IDP-SGD authors' rules for q_m and C_m;
- ``time-adaptive``: time-adaptive privacy spending (Kiani et al., ICLR 2025) as a per-round σ schedule;
- ``hdp-pooled``: per-group q_m and C_m with one pooled draw, chosen for the least error (:mod:`hdp_planner.pooled`).

Every row is calibrated with the plan's accountant (time-adaptive composes RDP curves and stays RDP).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from hdp_planner.accounting import calibrate_q
from hdp_planner.noise import pooled_weights
from hdp_planner.plan import MethodNoise, Phase, Plan, Projection, calibrated_sigma, derived_row, planned_epsilon
from hdp_planner.pooled import NAME as POOLED
from hdp_planner.pooled import hdp_pooled
from hdp_planner.schedule import calibrate_schedule, schedule_epsilon

BASELINES: dict[str, str] = {
    "pfa": "PFA",
    "idp-fedavg-sample": "IDP-FedAvg-Sample",
    "idp-fedavg-scale": "IDP-FedAvg-Scale",
    "time-adaptive": "Time-adaptive",
    "hdp-pooled": POOLED,
}
"""Command-line name → plan name of each baseline."""
SUBSPACES: tuple[str, ...] = ("lanczos", "randomized")


@dataclass(frozen=True)
class BaselineOptions:
    """The baselines' own parameters.

    PFA: projection dimension k (``pfa_dim``; PFA's code defaults to 1), how many of the public group's latest
    noisy sums span the subspace (``pfa_window``), the subspace method, and d (``model_dim``, needed for Λ: the
    projected group keeps k/d of its noise). Time-adaptive: the first ``saving_rounds`` rounds [T/2] add
    ``saving_noise`` times the noise of the later rounds.
    """

    pfa_dim: int = 1
    pfa_window: int = 10
    pfa_subspace: str = "lanczos"
    model_dim: int | None = None
    saving_rounds: int | None = None
    saving_noise: float = 2.0

    def __post_init__(self) -> None:
        for name in ("pfa_dim", "pfa_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name.replace('_', ' ')} must be a positive integer, got {v}")
        if self.pfa_dim > self.pfa_window:
            raise ValueError(f"pfa dim {self.pfa_dim} needs a window of at least as many rounds, got {self.pfa_window}")
        if self.pfa_subspace not in SUBSPACES:
            raise ValueError(f"pfa subspace must be one of {', '.join(SUBSPACES)}, got {self.pfa_subspace!r}")
        if self.model_dim is not None and (not isinstance(self.model_dim, int) or self.model_dim < self.pfa_dim):
            raise ValueError(f"model dim must be an integer ≥ the pfa dim {self.pfa_dim}, got {self.model_dim}")
        if not (isinstance(self.saving_noise, (int, float)) and math.isfinite(self.saving_noise)):
            raise ValueError(f"saving noise must be a number ≥ 1, got {self.saving_noise}")


def baseline_names(methods: Sequence[str], model_dim: int | None = None) -> tuple[str, ...]:
    """Plan names of the baselines among command-line method names (the planner's own four are always planned);
    ``all`` names every baseline, PFA only when ``model_dim`` is given."""
    from hdp_planner.plan import METHODS

    core = {m.lower() for m in METHODS} | {"p-fedavg"}
    out = []
    for name in methods:
        key = name.strip().lower()
        if key == "all":
            out.extend(v for k, v in BASELINES.items() if k != "pfa" or model_dim is not None)
        elif key in BASELINES:
            out.append(BASELINES[key])
        elif key not in core:
            choices = ", ".join([*sorted(core), *BASELINES, "all"])
            raise ValueError(f"unknown method {name.strip()!r}; choose from {choices}")
    return tuple(dict.fromkeys(out))


def add_baselines(plan: Plan, names: Sequence[str], options: BaselineOptions = BaselineOptions()) -> Plan:
    """``plan`` with the named baselines (plan names, :data:`BASELINES` values) added to its methods."""
    builders = {
        "PFA": pfa,
        "IDP-FedAvg-Sample": idp_fedavg_sample,
        "IDP-FedAvg-Scale": idp_fedavg_scale,
        "Time-adaptive": time_adaptive,
        POOLED: pooled,
    }
    notes = plan.notes
    for name in names:  # in order: HDP-Pooled reuses the IDP rows already added
        if name not in {m.name for m in plan.methods}:
            plan = dataclasses.replace(plan, methods=(*plan.methods, builders[name](plan, options)))
    if "Time-adaptive" in names and plan.config.spending_accountant != "rdp":
        notes += ("Time-adaptive is calibrated and accounted with RDP (its schedule composes RDP curves)",)
    if POOLED in names and options.model_dim is None:
        notes += (f"{POOLED} minimises the DP noise Λ alone: give --model-dim d to add the client-sampling variance",)
    return dataclasses.replace(plan, notes=notes)


def pooled(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """HDP-Pooled (:func:`hdp_planner.pooled.hdp_pooled`), started from both IDP-FedAvg rows (reused if planned)."""
    have = {m.name: m for m in plan.methods}
    corners = [
        have[name] if name in have else build(plan, options)
        for name, build in (("IDP-FedAvg-Sample", idp_fedavg_sample), ("IDP-FedAvg-Scale", idp_fedavg_scale))
    ]
    return hdp_pooled(plan, options.model_dim, corners)


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
    proj = Projection(public, projected, options.pfa_dim, options.pfa_window, options.pfa_subspace, options.model_dim)
    k = [1.0] * len(eps)
    k[projected] = options.pfa_dim / options.model_dim
    return derived_row("PFA", base, plan, k_ratio=tuple(k), projection=proj)


def idp_fedavg_scale(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """IDP-FedAvg, Scale variant (Boenisch et al., NeurIPS 2023, §4.2; client level as in GDPFed B.2).

    One pool: every client joins at q and is clipped to its group's C_m; the pool's sum carries one draw
    N(0, (Cσ̄)²) and is averaged over the qn expected participants, as DP-FedAvg. As in the IDP-SGD code
    (``get_weights``, individualize="clipping"): σ_m is the noise multiplier that ε_m needs at q, σ̄ = Σ_m
    (|G_m|/n)σ_m and C_m = C·σ̄/σ_m, so group m's effective noise multiplier Cσ̄/C_m is σ_m and it spends ε_m.
    The harmonic mean of the C_m, weighted by |G_m|/n, is C.
    """
    base = plan.method("GDPFed")
    n = sum(base.size)
    mean_sigma = sum(s * size / n for s, size in zip(base.noise_multiplier, base.size))
    clip = tuple(plan.config.clip * mean_sigma / s for s in base.noise_multiplier)
    weight = tuple(float(w) for w in pooled_weights(base.expected_clients))
    return derived_row("IDP-FedAvg-Scale", base, plan, clip=clip, pooled=True, weight=weight)


def idp_fedavg_sample(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """IDP-FedAvg, Sample variant (Boenisch et al., NeurIPS 2023, §4.1; client level as in GDPFed B.2).

    One pool with one shared σ: group m joins at the largest q_m at which σ meets ε_m over T rounds, and σ is
    set so that Σ_m q_m|G_m| = qn, the expected participants of DP-FedAvg (IDP-SGD's ``get_sample_rates``,
    here solved to 1e-10 instead of its 0.1% bisection). The pool's sum carries one N(0, C²σ²) and is averaged
    over the qn expected participants. The q_m are found with RDP; with ``--accountant pld`` σ is then the
    largest PLD σ the groups need at their q_m, so every row is calibrated by the same accountant.
    """
    from scipy.optimize import brentq

    c, gdp = plan.config, plan.method("GDPFed")
    eps, sizes = gdp.epsilon, gdp.size
    target = c.q * sum(sizes)

    def rates(sigma: float) -> list[float]:
        return [calibrate_q(e, c.delta, sigma, c.rounds) for e in eps]

    def excess(log_sigma: float) -> float:  # increasing: more noise admits larger q_m
        return sum(qm * s for qm, s in zip(rates(math.exp(log_sigma)), sizes)) / target - 1.0

    # the loosest group's σ at q gives every group q_m ≤ q, the strictest group's σ at q gives every q_m ≥ q
    lo, hi = (math.log(calibrated_sigma(e, c.delta, c.q, c.rounds, "rdp")) for e in (max(eps), min(eps)))
    sigma = math.exp(brentq(excess, lo, hi, xtol=1e-12, rtol=1e-10)) if lo < hi else math.exp(lo)
    q = tuple(rates(sigma))
    if c.accountant == "pld":
        sigma = max(calibrated_sigma(list(eps), c.delta, list(q), c.rounds, "pld"))
    r = [qm * s for qm, s in zip(q, sizes)]
    spent = tuple(planned_epsilon(sigma, qm, c.rounds, c.delta, c.spending_accountant) for qm in q)
    return derived_row(
        "IDP-FedAvg-Sample",
        gdp,
        plan,
        q=q,
        noise_multiplier=tuple(sigma for _ in eps),
        weight=tuple(float(w) for w in pooled_weights(r)),
        epsilon_spent=spent,
        pooled=True,
    )


def time_adaptive(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """Time-adaptive privacy spending (Kiani et al., ICLR 2025): save budget early, spend it late.

    Every group is sampled at q and weighed as GDPFed; group m adds σ_m,save = κσ_m,spend in the first T_s rounds
    and σ_m,spend afterwards (κ = ``saving_noise``, T_s = ``saving_rounds``, T/2 by default), with σ_m,spend the
    smallest at which the composition of both phases meets ε_m exactly (RDP, :mod:`hdp_planner.schedule`).
    Kiani et al. save through lower sampling rates, hand-tuned per setting (GDPFed B.2); a σ schedule keeps q,
    the weights and the expected participants of GDPFed, so only the timing of the noise differs.
    """
    c, gdp = plan.config, plan.method("GDPFed")
    saving = c.rounds // 2 if options.saving_rounds is None else options.saving_rounds
    pairs = [calibrate_schedule(e, c.delta, c.q, c.rounds, saving, options.saving_noise) for e in gdp.epsilon]
    phases = tuple(
        Phase(rounds, tuple(p[i] for p in pairs)) for i, rounds in enumerate((saving, c.rounds - saving)) if rounds
    )
    spent = tuple(
        schedule_epsilon([(ph.rounds, ph.noise_multiplier[m]) for ph in phases], c.q, c.delta)
        for m in range(len(gdp.size))
    )
    sigma = tuple(p[1] for p in pairs)
    return derived_row("Time-adaptive", gdp, plan, noise_multiplier=sigma, epsilon_spent=spent, schedule=phases)
