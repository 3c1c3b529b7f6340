"""A plan's types: one method's per-group row (q_m, σ_m, k_m, ω_m, ε spent, Λ), the trust model the plan was
solved for (:class:`Trust`; the trusted server here, the others in :mod:`hdp_planner.trust`), the plan and its
recommendation. The rows themselves are built by the methods (:mod:`hdp_planner.methods`): GDPFed's four by
:func:`hdp_planner.methods.gdpfed.solve_plan`; :func:`hdp_planner.solving.solve` adds the baselines and the trust
model's sections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Grouping
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.trust import (
    HiddenSection,
    SecaggParameters,
    SecaggRow,
    SecureRun,
    TrustedServer,
)
from hdp_planner.rules.costs import GroupRound

METHODS: tuple[str, ...] = ("DP-FedAvg", "GDPFed", "GDPFed-op", "GDPFed+")
PLANNED_METHOD = "GDPFed+"
SHARE_TOL = 1e-6
"""Relative tolerance on weight shares against ``--min-share`` (the solvers meet it to ~1e-9)."""


class Trust(Protocol):
    """A trust model: who sees what, what it adds to a plan's rows, and what a run under it executes and costs.

    :class:`~hdp_planner.planning.trust.TrustedServer` (every plan's until another is planned), secure aggregation
    and secure aggregation with cohorts (:mod:`hdp_planner.trust`, whose registry names them) implement it. Its
    sections are data (:mod:`hdp_planner.planning.trust`): ``parameters`` of secure aggregation, ``rows`` (every row
    recalibrated for distributed noise) and the row ``recommendation`` under them (None, empty, None: none), and
    ``hidden`` (every row with its participation hidden from the server; None: not hidden). ``sees_updates``: the
    server sees every sampled client's clipped update; ``declined``: the model a plan was asked for and fell back
    from, none of its rows having a secure form (None: the one asked for).
    """

    sees_updates: ClassVar[bool]

    @property
    def declined(self) -> Trust | None: ...

    @property
    def parameters(self) -> SecaggParameters | None: ...

    @property
    def rows(self) -> tuple[SecaggRow, ...]: ...

    @property
    def recommendation(self) -> str | None: ...

    @property
    def hidden(self) -> HiddenSection | None: ...

    def planned(self, plan: Plan) -> Trust:
        """This trust model with its sections for the solved ``plan`` (its rows calibrated)."""
        ...

    def problems(self, plan: Plan) -> list[str]:
        """Its sections re-derived from ``plan``'s rows: one message per difference, or per group whose recorded noise
        would spend more than its budget (empty: they verify)."""
        ...

    def form_problem(self, row: str | None) -> str | None:
        """Why the plan row ``row`` cannot run under this model (None: it can); ``row`` None: a method that adds no
        noise."""
        ...

    def unplanned(self, plan: Plan) -> str | None:
        """Why no row of ``plan`` has a form under this model that it recommends (None: one has)."""
        ...

    def secure_run(self, row: MethodNoise, config: PlanConfig) -> SecureRun | None:
        """How ``row`` runs under secure aggregation (None: the row's executed mechanism as solved)."""
        ...

    def costs(self, row: MethodNoise, config: PlanConfig, *, start: int, rounds: int) -> list[list[GroupRound]]:
        """What rounds ``start``..``rounds``−1 of ``row`` cost each group, as the privacy ledger charges them."""
        ...

    def epsilon_spent(self, row: MethodNoise, config: PlanConfig, *, group: int, rounds: int) -> float:
        """ε that ``group`` of ``row`` has spent after ``rounds`` rounds, at the plan's δ."""
        ...

    def cap(self, row: MethodNoise, config: PlanConfig, group: int) -> int:
        """The rounds a client of ``group`` takes part in at most (its participations, or cohort memberships)."""
        ...

    def metrics(
        self, row: MethodNoise, config: PlanConfig, *, rounds: int, dropout: float, seeded: bool
    ) -> dict[str, Any]:
        """What a run's metrics record of this model after ``rounds`` rounds of ``row`` (a simulation's ``dropout``;
        ``seeded``: its randomness is regenerated from the seed)."""
        ...


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
        trust: The trust model the plan was solved for, with its sections (a trusted server's adds none).
        grouping: How per-client budgets were grouped into the plan's groups (``solve --budgets``; None: the groups
            were given).
        budgets_sha256: The SHA-256 of the per-client budgets the groups were made from (None: none).
        recorded: The recommendation a plan file recorded (see the attribute).
    """

    config: PlanConfig
    methods: tuple[MethodNoise, ...]
    objective: float
    uniform_objective: float
    notes: tuple[str, ...] = field(default=())
    trust: Trust = field(default_factory=TrustedServer)
    grouping: Grouping | None = None
    budgets_sha256: str | None = None
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
    def hidden(self) -> HiddenSection | None:
        """Every row with its participation hidden from the server (``solve --hide-sample``; None: not hidden)."""
        return self.trust.hidden

    def row_budgets(self, m: MethodNoise) -> tuple[float, ...]:
        """The budget each group of row ``m`` must meet: the plan's ε_m, or the strictest ε for one group of all n."""
        if len(m.size) == 1 and len(self.groups.size) > 1:
            return (min(self.groups.epsilon),)
        return self.groups.epsilon

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
        return self.keeps_shares(self.representation(m)[1])

    def keeps_shares(self, share: Sequence[float]) -> bool:
        """Whether every group's weight share ``share[m]`` is at least F·|G_m|/n (F = ``config.min_share``)."""
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
