"""The trusted server, and what the other trust models add to a plan's rows, as data.

A trusted server (:class:`TrustedServer`) sees every sampled client's clipped update and adds each group's noise: the
plan's rows as solved, charged as the Gaussian rounds they execute. The other trust models (:mod:`hdp_planner.trust`)
add sections: the parameters of secure aggregation, each row recalibrated for distributed discrete Gaussian noise
(:class:`SecaggRow`), and each row with its participation hidden from the server (:class:`CohortRow`, gathered in
:class:`HiddenSection`); a run under them follows :class:`SecureRun`. A plan carries its trust model typed
(:attr:`~hdp_planner.planning.plan.Plan.trust`); the plan file reads and writes it (:mod:`hdp_planner.planfile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.rounds import WRAP_PROBABILITY
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.mechanism import executed_mechanism, mechanism_epsilon
from hdp_planner.planning.method_noise import MethodNoise, weight_shares
from hdp_planner.rules.costs import GroupRound

REL_TOL = 1e-9
"""How close a recorded number of a trust model's section must be to the recomputed one."""


@dataclass(frozen=True, kw_only=True)
class SecaggParameters:
    """Whom secure aggregation trusts with what. ``bits`` b of the modular sum; ``survivors`` F > 1/2: the fraction of
    a group's sampled clients assumed to survive to the sum (a strict majority: Flower's SecAgg+ has no consistency
    round); ``colluders`` k: clients that may share their noise with the server; ``participations`` K: the rounds a
    client takes part in at most (None: every round, T); ``model_dim`` d; ``wrap``: the wrap-around probability
    allowed.

    Raises:
        ValueError: A value out of range (one line).
    """

    bits: int = 20
    survivors: float = 0.9
    colluders: int = 0
    participations: int | None = None
    model_dim: int | None = None
    wrap: float = WRAP_PROBABILITY

    def __post_init__(self) -> None:
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or not 8 <= self.bits <= 32:
            raise ValueError(f"bits must be an integer in [8, 32] (Flower's SecAgg+ sums modulo 2^32), got {self.bits}")
        if not 0.5 < self.survivors <= 1:
            raise ValueError(
                f"survivors F must lie in (1/2, 1], got {self.survivors}: at F ≤ 1/2 a server telling two halves of a "
                f"group different dropouts unmasks a client (SecAgg+ here has no consistency round)"
            )
        if isinstance(self.colluders, bool) or not isinstance(self.colluders, int) or self.colluders < 0:
            raise ValueError(f"colluders must be a non-negative integer, got {self.colluders}")
        k = self.participations
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"participations K must be a positive integer, got {k}")
        if not 0 < self.wrap < 1:
            raise ValueError(f"wrap-around probability must lie in (0, 1), got {self.wrap}")

    @property
    def dim(self) -> int:
        """d, the model's parameter count (0 where none was given)."""
        return int(self.model_dim or 0)


@dataclass(frozen=True, kw_only=True)
class SecaggGroup:
    """One group of a row under secure aggregation: its noise law's grid γ, share σ²_s (integer units), threshold t,
    released shares N and the probability that a round releases; z_m and its ε against third parties (the budget);
    the multiplier and ε against the server; the released noise's effective multiplier (√(E[error variance per
    coordinate])/C_m: N shares, rounding, wrap-around)."""

    gamma: float
    share_sigma2: int
    threshold: int
    shares: int
    release_probability: float
    noise_multiplier: float
    epsilon_third_parties: float
    server_noise_multiplier: float
    epsilon_server: float
    effective_noise_multiplier: float


@dataclass(frozen=True, kw_only=True)
class SecaggRow:
    """A plan row under secure aggregation: its groups, Λ with distributed noise and Λ with a trusted server (None
    groups and Λ: the row's mechanism has no distributed form; ``note`` says why)."""

    name: str
    groups: tuple[SecaggGroup, ...] | None
    lambda_secagg: float | None
    lambda_server: float
    note: str = field(default="", compare=False)

    @property
    def price(self) -> float | None:
        """Λ under secure aggregation over Λ with a trusted server: the price of distrust."""
        return None if self.lambda_secagg is None else self.lambda_secagg / self.lambda_server


@dataclass(frozen=True, kw_only=True)
class CohortCaps:
    """How large a group's public cohort may be: ``max_cohort`` clients at most, ``max_multiple`` times its expected
    contributors at most (None: no cap).

    Raises:
        ValueError: A cap that leaves no cohort of two, or one below its contributors (one line).
    """

    max_cohort: int | None = None
    max_multiple: float | None = None

    def __post_init__(self) -> None:
        c, x = self.max_cohort, self.max_multiple
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 2):
            raise ValueError(f"the cohort cap must be at least 2 clients (secure aggregation needs two), got {c}")
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 1):
            raise ValueError(f"the cohort multiple must be at least 1 (a cohort holds its contributors), got {x}")


@dataclass(frozen=True, kw_only=True)
class CohortRow:
    """A plan row with participation hidden from the server: its groups, the weights ω_m, clipping thresholds C_m and
    sparsity k_m/d it applies to their sums, its Λ, the trusted server's Λ, and the vectors each round sends (one per
    cohort member)."""

    name: str
    groups: tuple[CohortGroup, ...]
    weight: tuple[float, ...]
    clips: tuple[float, ...]
    k_ratio: tuple[float, ...]
    lambda_cohort: float
    lambda_server: float

    @property
    def weight_shares(self) -> tuple[float, ...]:
        """Each group's share α_m = ω_m r_m C_m/Σ_j ω_j r_j C_j of the update (as a trusted row's,
        :meth:`~hdp_planner.planning.method_noise.MethodNoise.weight_share`; r_m²/Σr² with GDPFed's ω_m = r_m/Σr²):
        how much its clients shape the model."""
        return weight_shares(self.weight, [g.expected_contributors for g in self.groups], self.clips)

    @property
    def price(self) -> float:
        """Λ with hidden participation over Λ with a trusted server."""
        return self.lambda_cohort / self.lambda_server

    @property
    def vectors_per_round(self) -> int:
        """Masked vectors a round sends: every cohort member's."""
        return sum(g.cohort for g in self.groups)


@dataclass(frozen=True, kw_only=True)
class FrontierPoint:
    """The recommended cohort row with every cohort capped at ``multiple`` times its expected contributors (None:
    uncapped): the vectors a round sends, its Λ and its price against a trusted server."""

    multiple: float | None
    vectors_per_round: int
    lam: float
    price: float


@dataclass(frozen=True, kw_only=True)
class HiddenSection:
    """The caps on every cohort, every row with public cohorts and private coins under them (None: no cohort under
    them, or no distributed form), the recommended row (least Λ among those meeting ``--min-share``), and its
    frontier of cohort size against Λ."""

    caps: CohortCaps
    rows: tuple[tuple[str, CohortRow | None], ...]
    recommendation: str | None
    frontier: tuple[FrontierPoint, ...]

    def row(self, name: str) -> CohortRow | None:
        """The cohort row ``name`` (None: it has none)."""
        return dict(self.rows).get(name)


@dataclass(frozen=True, kw_only=True)
class SecureRun:
    """A row's groups as secure aggregation runs them: its parameters, each group's noise law and z, the Λ planned
    for the run, and, where cohorts hide who contributes, each group's cohort with the cohort row's rates
    q_m = r_m/|G_m|, weights ω_m and sparsity k_m/d (None: the row's own)."""

    parameters: SecaggParameters
    laws: tuple[GroupLaw, ...]
    noise_multiplier: tuple[float, ...]
    planned_lambda: float
    cohorts: tuple[CohortGroup, ...] | None = None
    q: tuple[float, ...] | None = None
    weight: tuple[float, ...] | None = None
    k_ratio: tuple[float, ...] | None = None


@dataclass(frozen=True)
class TrustedServer:
    """A server trusted with the clipped updates: it sees every sampled client's update and adds each group's noise.
    The plan's rows are run as solved (the :class:`~hdp_planner.planning.plan.Trust` of every plan until another is
    planned); nothing is added to them, and each round costs a group the Gaussian round its row executes."""

    sees_updates: ClassVar[bool] = True
    parameters: ClassVar[SecaggParameters | None] = None
    rows: ClassVar[tuple[SecaggRow, ...]] = ()
    recommendation: ClassVar[str | None] = None
    hidden: ClassVar[HiddenSection | None] = None
    declined: Any = field(default=None, compare=False)
    """The secure trust model asked for, none of whose rows had a secure form (``solve(…, trusted_fallback=True)``;
    None: a trusted server was asked for). Not written to the plan file."""

    @classmethod
    def requested(cls, parameters: SecaggParameters) -> TrustedServer:
        """A trusted server (it takes none of secure aggregation's parameters)."""
        return cls()

    def planned(self, plan: object) -> TrustedServer:
        """Nothing to add to the rows of ``plan``."""
        return self

    def problems(self, plan: object) -> list[str]:
        """Nothing to re-derive."""
        return []

    def form_problem(self, row: str | None) -> str | None:
        """Every row runs as solved."""
        return None

    def unplanned(self, plan: object) -> str | None:
        """None: every row runs as solved."""
        return None

    def secure_run(self, row: MethodNoise, config: PlanConfig) -> SecureRun | None:
        """None: no secure aggregation."""
        return None

    def costs(self, row: MethodNoise, config: PlanConfig, *, start: int, rounds: int) -> list[list[GroupRound]]:
        """Rounds ``start``..``rounds``−1 of ``row`` as executed (:func:`~hdp_planner.planning.mechanism.
        executed_mechanism`: q_m, effective σ_m of the round's phase), each recorded with the plan's spending
        accountant, and charged through it: a plan whose accountant bounds the distributed discrete Gaussian (``ddg``,
        the binomial expansion's amplification of α/(2σ²) + τ·d') records its τ·d' (0 for the registered one), so
        that the ledger composes the rounds by that bound, not as plain sampled Gaussians."""
        mech = executed_mechanism(row, config)
        accountant = config.spending_accountant
        tau_d = getattr(get_accountant(accountant), "tau_d", None)  # only a distributed accountant has a τ·d'
        return [
            [GroupRound(q=q, noise_multiplier=s, tau_d=tau_d, accountant=accountant) for q, s in zip(mech.q, sigma)]
            for sigma in (mech.noise_at(r) for r in range(start, rounds))
        ]

    def epsilon_spent(self, row: MethodNoise, config: PlanConfig, *, group: int, rounds: int) -> float:
        """ε of ``group`` after ``rounds`` rounds of the executed mechanism (the plan's spending accountant, or RDP
        composition of a σ schedule)."""
        mech = executed_mechanism(row, config)
        return mechanism_epsilon(mech, group=group, rounds=rounds, delta=config.delta,
                                 accountant=config.spending_accountant)  # fmt: skip

    def cap(self, row: MethodNoise, config: PlanConfig, group: int) -> int:
        """Rounds a client of ``group`` takes part in at most: every round, T."""
        return config.rounds

    def metrics(
        self, row: MethodNoise, config: PlanConfig, *, rounds: int, dropout: float, seeded: bool
    ) -> dict[str, Any]:
        """Nothing beyond the run's own ε spent."""
        return {}


def numbers(record: SecaggRow | CohortRow) -> dict[str, Any]:
    """A section's row as numbers, by field: each group field as the list over the groups, each other tuple as a list
    (what a plan file records of the row, and what ``verify`` compares with the recomputed row)."""
    out: dict[str, Any] = {}
    groups = record.groups or ()
    for f in fields(groups[0]) if groups else ():
        out[f.name] = [getattr(g, f.name) for g in groups]
    for f in fields(record):
        value = getattr(record, f.name)
        if f.name not in ("name", "groups", "note"):
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def matches(got: Any, want: Any) -> bool:
    """Whether a recorded number, list of numbers or null equals the recomputed one (numbers to a relative
    :data:`REL_TOL`; a boolean is never a number)."""
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(matches(g, w) for g, w in zip(got, want))
    if want is None:
        return got is None
    return isinstance(got, (int, float)) and not isinstance(got, bool) and math.isclose(got, want, rel_tol=REL_TOL)


def points(frontier: tuple[FrontierPoint, ...]) -> list[list[float | int | None]]:
    """A frontier as lists of its numbers (multiple, vectors a round, Λ, price), for comparison."""
    return [[p.multiple, p.vectors_per_round, p.lam, p.price] for p in frontier]
