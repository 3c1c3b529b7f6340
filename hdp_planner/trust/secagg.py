"""Secure aggregation as a plan's trust model: every row recalibrated for distributed discrete Gaussian noise
(:mod:`.secagg_rows`), the row recommended under it, what a run of a row executes and what each round costs.

The server sees masked vectors and each group's noisy sum; each group's z_m meets its budget against third parties
(who may learn the colluders' shares), and its ε against the server is reported beside it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from hdp_planner.distributed.accounting import epsilon_server, epsilon_third_parties
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.trust import (
    REL_TOL,
    HiddenSection,
    SecaggParameters,
    SecaggRow,
    SecureRun,
    matches,
    numbers,
)
from hdp_planner.rules.costs import GroupRound
from hdp_planner.trust.secagg_rows import row_laws, secagg_row


def recommended(rows: tuple[SecaggRow, ...], plan: Plan) -> SecaggRow | None:
    """The row with the least Λ under secure aggregation among those meeting ``--min-share``."""
    eligible = [r for r in rows if r.lambda_secagg is not None and plan.meets_min_share(plan.method(r.name))]
    return min(eligible, key=lambda r: r.lambda_secagg) if eligible else None  # type: ignore[arg-type, return-value]


@dataclass(frozen=True, kw_only=True)
class SecureAggregation:
    """Updates under secure aggregation with distributed discrete Gaussian noise (the trust model ``secagg``).

    Args:
        parameters: Bits, survivors, colluders, participations K (resolved to T once planned) and the model's d.
        rows: Every row of the plan recalibrated (empty until planned).
        recommendation: The row of least Λ under secure aggregation meeting ``--min-share`` (None: none).

    Raises:
        ValueError: No model dimension (one line).
    """

    sees_updates: ClassVar[bool] = False
    declined: ClassVar[None] = None
    parameters: SecaggParameters
    rows: tuple[SecaggRow, ...] = ()
    recommendation: str | None = None

    def __post_init__(self) -> None:
        if self.parameters.model_dim is None or self.parameters.model_dim < 1:
            raise ValueError("--trust secagg needs --model-dim (the model's parameter count d)")

    @classmethod
    def requested(cls, parameters: SecaggParameters) -> SecureAggregation:
        """Secure aggregation with ``parameters``, its rows not yet planned."""
        return cls(parameters=parameters)

    @property
    def hidden(self) -> HiddenSection | None:
        """None: who contributes is not hidden (:class:`~hdp_planner.trust.cohorts.Cohorts` hides it)."""
        return None

    def planned(self, plan: Plan) -> SecureAggregation:
        """Every row of ``plan`` recalibrated, the recommendation, and K resolved (T where none was given)."""
        params = dataclasses.replace(
            self.parameters, participations=self.parameters.participations or plan.config.rounds
        )
        rows = tuple(secagg_row(m, plan.config, params) for m in plan.methods)
        best = recommended(rows, plan)
        return dataclasses.replace(
            self, parameters=params, rows=rows, recommendation=None if best is None else best.name
        )

    def row(self, name: str) -> SecaggRow | None:
        """The recorded row ``name`` (None: none recorded)."""
        return next((r for r in self.rows if r.name == name), None)

    def problems(self, plan: Plan) -> list[str]:
        """Re-derive the section from ``plan`` and the parameters: every recorded z_m must meet its group's budget
        against third parties (at the δ its law leaves to the accountant), and every recorded number (the law's γ,
        share σ², threshold t and shares N, z_m, ε against the server, effective σ, Λ, recommendation) must equal
        the recomputed one, so a plan whose bits, survivors, colluders, participations, shares or thresholds were
        edited is refused."""
        try:
            again = self.planned(plan)
        except ValueError as exc:
            return [f"trust: {exc}"]
        problems = []
        if self.parameters.participations != again.parameters.participations:
            problems.append("trust: participations differ from the plan's")
        c = plan.config
        for r in again.rows:
            entry, where = self.row(r.name), f"trust, {r.name}"
            if r.groups is None:
                if entry is not None and entry.groups is not None:
                    problems.append(f"{where}: not plannable under secagg, but the file gives it numbers")
                continue
            if entry is None or entry.groups is None:
                problems.append(f"{where}: missing")
                continue
            m, dim = plan.method(r.name), self.parameters.dim or 1
            laws = row_laws(m, c, self.parameters)
            for i, (g, eps, q, law) in enumerate(zip(entry.groups, m.epsilon, m.q, laws)):
                spent = epsilon_third_parties(noise_multiplier=g.noise_multiplier, q=q, rounds=c.rounds,
                                              delta=law.delta_accounted(c.delta, rounds=c.rounds),
                                              tau_d=group_tau_d(m.size[i], model_dim=dim))  # fmt: skip
                if spent > eps * (1 + REL_TOL):
                    problems.append(f"{where}, group {i + 1}: z={g.noise_multiplier:.6g} spends ε={spent:.6g} > budget "
                                    f"{eps:g}")  # fmt: skip
            got = numbers(entry)
            for key, want in numbers(r).items():
                if not matches(got.get(key), want):
                    problems.append(f"{where}: {key} {got.get(key)!r} differs from the recomputed {want!r}")
        if self.recommendation != again.recommendation:
            problems.append(f"trust: the file recommends {self.recommendation!r}, its rows give "
                            f"{again.recommendation!r}")  # fmt: skip
        return problems

    def form_problem(self, row: str | None) -> str | None:
        """Why ``row`` has no distributed form (its note where the plan was solved here; ``row`` None: a method
        without noise), or None."""
        recorded = None if row is None else self.row(row)
        if recorded is not None and recorded.groups is not None:
            return None
        why = f": {recorded.note}" if recorded is not None and recorded.note else ""
        return f"no distributed form under --trust secagg{why}"

    def unplanned(self, plan: Plan) -> str | None:
        """Why no row has a recommended secure form (the plan's recommended row's note, or the first row's), or
        None."""
        if self.recommendation is not None:
            return None
        first = self.row(plan.recommendation.method) or self.rows[0]
        return f"{first.name} is {first.note or 'not planned under secagg'}"

    def laws(self, row: MethodNoise, config: PlanConfig) -> tuple[GroupLaw, ...]:
        """Each group's noise law of ``row`` (the law ``verify`` re-derives from the plan)."""
        return row_laws(row, config, self.parameters)

    def secure_run(self, row: MethodNoise, config: PlanConfig) -> SecureRun:
        """Each group's law and its recorded z_m, and the row's Λ under secure aggregation; ValueError (one line)
        where the row has no distributed form."""
        problem = self.form_problem(row.name)
        recorded = self.row(row.name)
        if problem is not None or recorded is None or recorded.groups is None:
            raise ValueError(f"{row.name} has {problem}")
        return SecureRun(parameters=self.parameters, laws=self.laws(row, config),
                         noise_multiplier=tuple(g.noise_multiplier for g in recorded.groups),
                         planned_lambda=float(recorded.lambda_secagg or 0.0))  # fmt: skip

    def costs(self, row: MethodNoise, config: PlanConfig, *, start: int, rounds: int) -> list[list[GroupRound]]:
        """Rounds ``start``..``rounds``−1 of distributed discrete Gaussian noise: each group's q_m, z_m, Proposition
        14's τ·d' (:func:`~hdp_planner.distributed.rounds.group_tau_d`) and the δ its law's rare events cost a round
        (:attr:`~hdp_planner.distributed.group_law.GroupLaw.event_rate`)."""
        run = self.secure_run(row, config)
        dim = self.parameters.dim
        groups = [GroupRound(q=float(q), noise_multiplier=float(z), tau_d=group_tau_d(int(size), model_dim=dim),
                             delta_cost=float(law.event_rate))
                  for q, z, size, law in zip(row.q, run.noise_multiplier, row.size, run.laws, strict=True)]  # fmt: skip
        return [list(groups) for _ in range(start, rounds)]

    def epsilon_spent(self, row: MethodNoise, config: PlanConfig, *, group: int, rounds: int) -> float:
        """ε against third parties after ``rounds`` rounds of ``group``: its law's z at the δ left once the
        law-breaking events of those rounds are paid
        (:meth:`~hdp_planner.distributed.group_law.GroupLaw.delta_accounted`)."""
        law = self.laws(row, config)[group]
        return epsilon_third_parties(noise_multiplier=law.noise_multiplier, q=row.q[group], rounds=rounds,
                                     delta=law.delta_accounted(config.delta, rounds=rounds),
                                     tau_d=group_tau_d(row.size[group], model_dim=self.parameters.dim))  # fmt: skip

    def epsilon_server(self, row: MethodNoise, config: PlanConfig, *, group: int, participations: int) -> float:
        """ε against the server after ``participations`` of a client of ``group``: ⌈(t − k)/M⌉ honest shares of the
        smallest share of any group (:meth:`~hdp_planner.distributed.group_law.GroupLaw.server_multiplier`), no
        amplification."""
        laws = self.laws(row, config)
        z = laws[group].server_multiplier(min(law.share_sigma2 for law in laws), groups=len(laws))
        return epsilon_server(noise_multiplier=z, participations=participations, delta=config.delta,
                              tau_d=group_tau_d(row.size[group], model_dim=self.parameters.dim))  # fmt: skip

    def cap(self, row: MethodNoise, config: PlanConfig, group: int) -> int:
        """K, the rounds a client takes part in at most (T where none was given)."""
        return self.parameters.participations or config.rounds

    def metrics(
        self, row: MethodNoise, config: PlanConfig, *, rounds: int, dropout: float, seeded: bool
    ) -> dict[str, Any]:
        """The run's privacy from the distributed accounting of the rounds run: ε against third parties and against
        the server (every round a participation, the worst case), per group."""
        p, groups = self.parameters, range(len(row.size))
        recorded = self.row(row.name)
        return {
            "bits": p.bits, "survivors": p.survivors, "colluders": p.colluders, "dropout_simulated": dropout,
            "noise_multiplier": [g.noise_multiplier for g in recorded.groups or ()] if recorded is not None else [],
            "epsilon_third_parties": [self.epsilon_spent(row, config, group=m, rounds=rounds) for m in groups],
            "epsilon_server_every_round": [self.epsilon_server(row, config, group=m, participations=rounds)
                                           for m in groups],
        }  # fmt: skip
