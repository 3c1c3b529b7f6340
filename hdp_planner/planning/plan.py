"""A plan's types and row helpers: the configuration, one method's per-group row (q_m, σ_m, k_m, ω_m, ε spent, Λ),
the plan and its recommendation, and the calibrations every row uses. The rows themselves are built by the
methods (:mod:`hdp_planner.methods`): GDPFed's four by :func:`hdp_planner.methods.gdpfed.solve_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import Accountant
from hdp_planner.accounting.validation import check_delta, check_ratio, check_rounds
from hdp_planner.planning.problem import (
    SIGMA_MODELS,
    Coefficients,
    SigmaModel,
)
from hdp_planner.rules.noise import (
    LAMBDA_CONVENTIONS,
    LambdaConvention,
)

METHODS: tuple[str, ...] = ("DP-FedAvg", "GDPFed", "GDPFed-op", "GDPFed+")
PLANNED_METHOD = "GDPFed+"
SHARE_TOL = 1e-6
"""Relative tolerance on weight shares against ``--min-share`` (the solvers meet it to ~1e-9)."""


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """Everything a plan depends on besides the groups.

    Args:
        n: The number of clients.
        rounds: T, the training rounds.
        q: The sampling rate every group starts from (DP-FedAvg's, and the expected clients per round: q·n).
        delta: δ; None means δ = 1/n^1.1 (GDPFed B.2).
        clip: The clipping threshold C.
        lr: The learning rate (Problem 1's coefficients).
        local_steps: Local steps per round (Problem 1's coefficients).
        accountant: A registered accountant's name (:func:`~hdp_planner.accounting.accountants.accountant_names`).
        sigma_model: σ_m(q_m) in Problem 1: ``bound`` (Theorem 1, as Table 1) or ``accountant`` (the RDP σ,
            Algorithm 1's noise).
        lambda_convention: Λ: ``exact`` (the per-coordinate noise of the applied update) or ``paper`` (Table 5's).
        sparsity: Fixed k_m/d per group (None: Remark 3's closed form).
        fixed_q: Per-group q_m to evaluate instead of solving Problem 1 (None: solve it).
        min_share: F in [0, 1]: every group's weight share α_m ≥ F·|G_m|/n for HDP-Pooled and Problem 1, and the
            recommendation considers only rows that meet it.
        large_delta: Accept δ ≥ 1/n (see the attribute).

    Raises:
        ValueError: A value out of range, or an unregistered accountant.
    """

    n: int
    rounds: int = 50
    q: float = 0.02
    delta: float | None = None
    clip: float = 1.0
    lr: float = 0.1
    local_steps: int = 5
    accountant: Accountant = "rdp"
    sigma_model: SigmaModel = "bound"
    lambda_convention: LambdaConvention = "exact"
    sparsity: tuple[float, ...] | None = None
    fixed_q: tuple[float, ...] | None = None
    min_share: float = 0.0
    large_delta: bool = False
    """Accept δ ≥ 1/n (refused otherwise: such a δ allows a mechanism that publishes one client's data outright
    with probability δ, i.e. about one client of n in the clear)."""

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive integer, got {self.n}")
        check_rounds(self.rounds)
        check_ratio(self.q)
        if self.delta is None:
            object.__setattr__(self, "delta", self.n**-1.1)
        check_delta(self.delta)
        if self.delta >= 1 / self.n and not self.large_delta:
            raise ValueError(
                f"delta={self.delta:g} is not below 1/n = {1 / self.n:g}: a δ that large allows releasing about one "
                f"client's data in the clear; use δ < 1/n (default 1/n^1.1) or accept it with --allow-large-delta"
            )
        _positive("clip", self.clip)
        _positive("lr", self.lr)
        if isinstance(self.local_steps, bool) or not isinstance(self.local_steps, int) or self.local_steps < 1:
            raise ValueError(f"local steps must be a positive integer, got {self.local_steps}")
        get_accountant(self.accountant)  # a registered name
        if self.sigma_model not in SIGMA_MODELS:
            raise ValueError(f"sigma model must be one of {', '.join(SIGMA_MODELS)}, got {self.sigma_model!r}")
        if self.lambda_convention not in LAMBDA_CONVENTIONS:
            raise ValueError(
                f"lambda convention must be one of {', '.join(LAMBDA_CONVENTIONS)}, got {self.lambda_convention!r}"
            )
        for k in self.sparsity or ():
            if not (isinstance(k, (int, float)) and 0 < k <= 1):
                raise ValueError(f"every sparsity k_m/d must lie in (0, 1], got {k}")
        for qm in self.fixed_q or ():
            check_ratio(qm, name="every fixed q_m")
        f = self.min_share
        if isinstance(f, bool) or not (isinstance(f, (int, float)) and 0 <= f <= 1):
            raise ValueError(
                f"min share F must lie in [0, 1] (F = 1: every group's weight share at least its population share; "
                f"above 1 the shares cannot sum to 1), got {f}"
            )

    @property
    def coefficients(self) -> Coefficients:
        return Coefficients(lr=self.lr, local_steps=self.local_steps)

    @property
    def spending_accountant(self) -> Accountant:
        """The accountant that measures ε: a closed-form σ is measured exactly, with RDP."""
        return get_accountant(self.accountant).spending  # type: ignore[return-value]


@dataclass(frozen=True, kw_only=True)
class Phase:
    """``rounds`` consecutive rounds in which group m adds noise multiplier ``noise_multiplier[m]``."""

    rounds: int
    noise_multiplier: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class Projection:
    """PFA's projection (Liu et al., VLDB 2021): group ``projected``'s noisy sum is replaced by its orthogonal
    projection onto the top-``dim`` principal subspace of group ``public``'s last ``window`` noisy sums, found by
    ``subspace`` (lanczos | randomized SVD). Groups are 0-based; ``model_dim`` is d, the number of parameters."""

    public: int
    projected: int
    dim: int
    window: int
    subspace: str
    model_dim: int


@dataclass(frozen=True, kw_only=True)
class MethodNoise:
    """One method's per-group parameters (a row of the plan) and the noise Λ they put in the global update.

    Args:
        name: The row's name (``GDPFed+``, ``DP-FedAvg``, …).
        epsilon: ε_m per group (DP-FedAvg: one group).
        size: |G_m| per group.
        q: The sampling rate q_m per group.
        noise_multiplier: σ_m per group (a schedule's last phase).
        k_ratio: k_m/d per group (1: no Top-k).
        weight: The aggregation weight ω_m per group.
        epsilon_spent: ε_m the accountant measures for the row.
        lam: Λ in the plan's convention.
        lambda_exact: Λ, the per-coordinate noise of the applied update.
        clip: The baselines' per-group clipping thresholds (None: the plan's C).
        pooled: One pooled noise draw for all groups (a baseline's).
        projection: PFA's projection (None: none).
        schedule: A per-round σ schedule whose last phase's σ is ``noise_multiplier`` (None: ``noise_multiplier``
            in every round).
    """

    name: str
    epsilon: tuple[float, ...]
    size: tuple[int, ...]
    q: tuple[float, ...]
    noise_multiplier: tuple[float, ...]
    k_ratio: tuple[float, ...]
    weight: tuple[float, ...]
    epsilon_spent: tuple[float, ...]
    lam: float
    lambda_exact: float
    clip: tuple[float, ...] | None = None
    pooled: bool = False
    projection: Projection | None = None
    schedule: tuple[Phase, ...] | None = None

    @property
    def expected_clients(self) -> tuple[float, ...]:
        """r_m = q_m·|G_m|, the expected clients of each group in a round."""
        return tuple(q * s for q, s in zip(self.q, self.size))

    @property
    def sigma2(self) -> tuple[float, ...]:
        """σ_m² per group."""
        return tuple(s * s for s in self.noise_multiplier)

    def clips(self, default: float) -> tuple[float, ...]:
        """C_m per group: the method's own thresholds, or ``default`` (the plan's C) for every group."""
        return self.clip if self.clip is not None else tuple(default for _ in self.size)

    def weight_share(self, default_clip: float) -> tuple[float, ...]:
        """α_m = ω_m r_m C_m / Σ_j ω_j r_j C_j: group m's share of the update's weight (at clipped norm C_m).

        GDPFed's weights give α_m = r_m²/Σr² (B.2), one pool with one C gives r_m/Σr, per-group clips r_mC_m/Σr_jC_j.
        """
        terms = [w * r * c for w, r, c in zip(self.weight, self.expected_clients, self.clips(default_clip))]
        total = sum(terms)
        return tuple(t / total for t in terms)

    def rms_noise_multiplier(self, rounds: int) -> tuple[float, ...]:
        """√(mean over the rounds of σ_m²) per group: what a schedule's noise costs Λ on average."""
        if self.schedule is None:
            return self.noise_multiplier
        return tuple(
            math.sqrt(sum(ph.rounds * ph.noise_multiplier[m] ** 2 for ph in self.schedule) / rounds)
            for m in range(len(self.size))
        )


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A plan: its configuration, the rows' noise, Problem 1's objective, and notes for the user.

    Built by :func:`~hdp_planner.methods.gdpfed.plan` (or read by :func:`~hdp_planner.planfile.document.load_plan`),
    never by hand.

    Args:
        config: What the plan depends on besides the groups.
        methods: One row per method: the four Problem 1 plans, then any baselines.
        objective: Problem 1's objective at the planned q_m.
        uniform_objective: Problem 1's objective at a uniform q.
        notes: Notes for the user (a starved group, a clamped sparsity, …).
        recorded: The recommendation a plan file recorded (see the attribute).
    """

    config: PlanConfig
    methods: tuple[MethodNoise, ...]
    objective: float
    uniform_objective: float
    notes: tuple[str, ...] = field(default=())
    recorded: Recommendation | None = field(default=None, compare=False)
    """The recommendation a plan file recorded (checked against :attr:`recommendation` by ``verify``)."""

    def __repr__(self) -> str:
        """A few lines: the budgets and the recommendation, then one line per row (the fields: ``dataclasses``)."""
        c, g = self.config, self.groups
        eps = ", ".join(f"{e:g}" for e in g.epsilon)
        rows = "".join(
            f"\n  {m.name}: Λ = {m.lambda_exact:.4g}, σ = ({', '.join(f'{s:.4g}' for s in m.noise_multiplier)})"
            for m in self.methods
        )
        return (
            f"Plan(ε = ({eps}), n = {c.n}, T = {c.rounds}, δ = {c.delta:.3g}, {c.accountant} accountant; "
            f"recommended: {self.recommendation.method}){rows}"
        )

    def method(self, name: str) -> MethodNoise:
        """The row called ``name``.

        Args:
            name: A row's name, e.g. ``GDPFed+``.

        Returns:
            The row.

        Raises:
            KeyError: The plan has no such row.
        """
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(name)

    @property
    def groups(self) -> MethodNoise:
        """The planned per-group parameters (GDPFed+)."""
        return self.method(PLANNED_METHOD)

    @property
    def population_share(self) -> tuple[float, ...]:
        """|G_m|/n of every group."""
        return tuple(s / self.config.n for s in self.groups.size)

    def representation(self, m: MethodNoise) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Expected clients per round and weight share α_m of every group of the plan under ``m``.

        DP-FedAvg pools all clients at one q with one C, so each group's share is its population share.
        """
        if len(m.size) == 1 and len(self.groups.size) > 1:
            return tuple(m.q[0] * s for s in self.groups.size), self.population_share
        return m.expected_clients, m.weight_share(self.config.clip)

    def meets_min_share(self, m: MethodNoise) -> bool:
        """Whether every group's weight share under ``m`` is at least F·|G_m|/n (F = ``config.min_share``)."""
        share = self.representation(m)[1]
        return all(a >= self.config.min_share * p * (1 - SHARE_TOL) for a, p in zip(share, self.population_share))

    @property
    def recommendation(self) -> Recommendation:
        """The row with the least exact Λ among those meeting ``--min-share``, against the planned row (GDPFed+)."""
        rows = [m for m in self.methods if self.meets_min_share(m)]
        best = min(rows, key=lambda m: (m.lambda_exact, m.name)) if rows else self.groups
        return Recommendation(
            method=best.name, lam=best.lambda_exact, ratio_to_planned=self.groups.lambda_exact / best.lambda_exact
        )


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """The least-noise row meeting the plan's min share: its name, exact Λ, and Λ(GDPFed+)/Λ (x less noise)."""

    method: str
    lam: float
    ratio_to_planned: float
