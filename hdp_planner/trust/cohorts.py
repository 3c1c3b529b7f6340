"""Secure aggregation with public cohorts and private coins as a plan's trust model: who contributes is hidden from
the server, so that every group's ε against the server is its budget (:mod:`.cohort_rows` computes each row's
cohorts; the proof is on the documentation's hidden participation page).

Each round the server names every group's cohort; each member flips a private coin and sends one masked vector,
heads its clipped update, tails zero, both with their noise share. A client takes part in at most K_m cohorts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hdp_planner.distributed.accounting import epsilon_third_parties
from hdp_planner.distributed.cohort_group import CohortGroup
from hdp_planner.distributed.group_law import GroupLaw
from hdp_planner.distributed.rounds import group_tau_d
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.trust import (
    REL_TOL,
    CohortCaps,
    CohortRow,
    HiddenSection,
    SecureRun,
    matches,
    numbers,
    points,
)
from hdp_planner.rules.costs import GroupRound
from hdp_planner.trust.cohort_rows import cohort_law, hidden_section
from hdp_planner.trust.secagg import SecureAggregation

SECTION = "hidden_participation"
"""How problems name the section (the plan file's key)."""


@dataclass(frozen=True, kw_only=True)
class Cohorts(SecureAggregation):
    """Secure aggregation with participation hidden from the server: the trust model ``secagg`` planned with
    ``solve --hide-sample``.

    Args:
        parameters: As :class:`~hdp_planner.trust.secagg.SecureAggregation`'s.
        rows: Every row under secure aggregation without cohorts (the plan's ``trust`` section).
        recommendation: Its recommended row.
        caps: The cap on every group's cohort.
        section: Every row with cohorts, the recommended one and its frontier (None until planned).
    """

    caps: CohortCaps = field(default_factory=CohortCaps)
    section: HiddenSection | None = None

    @property
    def hidden(self) -> HiddenSection | None:
        """Every row with its participation hidden from the server."""
        return self.section

    def planned(self, plan: Plan) -> Cohorts:
        """Secure aggregation's rows (:meth:`SecureAggregation.planned`), then every row with cohorts under the caps,
        the recommended one and its frontier of cohort size against Λ (:func:`~.cohort_rows.hidden_section`)."""
        base = super().planned(plan)
        return dataclasses.replace(base, section=hidden_section(plan, base.parameters, self.caps))

    def problems(self, plan: Plan) -> list[str]:
        """Secure aggregation's problems, then the cohorts re-derived: every recorded z must meet its group's budget
        against the server at the recorded coin and memberships (checked before anything is recomputed, so the
        message names the group that would be under-noised), and every number must equal the recomputed one, so an
        edited cohort, coin, expected contributors, weight, sparsity, cap or share is refused."""
        problems = super().problems(plan)
        if self.section is None:
            return [*problems, f"{SECTION}: missing"]
        c, dim, rows = plan.config, self.parameters.dim or 1, {m.name: m for m in plan.methods}
        recorded = dict(self.section.rows)
        for name, entry in self.section.rows:
            for i, (g, eps) in enumerate(zip(entry.groups if entry is not None else (), rows[name].epsilon)):
                spent = epsilon_third_parties(noise_multiplier=g.noise_multiplier, q=g.coin, rounds=g.memberships,
                                              delta=c.delta, tau_d=group_tau_d(g.cohort, model_dim=dim))  # fmt: skip
                if spent > eps * (1 + REL_TOL):
                    problems.append(f"{SECTION}, {name}, group {i + 1}: z={g.noise_multiplier:.6g} spends "
                                    f"ε={spent:.6g} against the server > budget {eps:g}")  # fmt: skip
        again = hidden_section(plan, self.parameters, self.caps)
        for name, r in again.rows:
            entry, where = recorded.get(name), f"{SECTION}, {name}"
            if r is None:
                if entry is not None:
                    problems.append(f"{where}: no cohort under these caps, but the file gives it numbers")
                continue
            got = {} if entry is None else numbers(entry)
            for key, want in numbers(r).items():
                if not matches(got.get(key), want):
                    problems.append(f"{where}: {key} {got.get(key)!r} differs from the recomputed {want!r}")
        if self.section.recommendation != again.recommendation:
            problems.append(f"{SECTION}: the file recommends {self.section.recommendation!r}, its rows give "
                            f"{again.recommendation!r}")  # fmt: skip
        if not matches(points(self.section.frontier), points(again.frontier)):
            problems.append(f"{SECTION}: the frontier differs from the recomputed one")
        return problems

    def form_problem(self, row: str | None) -> str | None:
        """Why ``row`` has no cohorts under the caps (``row`` None: a method without noise), or None."""
        if row is not None and self.section is not None and self.section.row(row) is not None:
            return None
        return "no cohort in the plan's hidden participation (solve --hide-sample)"

    def unplanned(self, plan: Plan) -> str | None:
        """Why no row has a recommended secure form, with or without cohorts (None: one has)."""
        if self.section is not None and self.section.recommendation is not None:
            return None
        return super().unplanned(plan)

    def cohort(self, row: str) -> CohortRow:
        """The cohort row ``row`` (ValueError, one line, where it has none)."""
        found = None if self.section is None else self.section.row(row)
        if found is None:
            raise ValueError(f"{row} has {self.form_problem(row)}")
        return found

    def laws(self, row: MethodNoise, config: PlanConfig) -> tuple[GroupLaw, ...]:
        """Each group's cohort law (:func:`~hdp_planner.trust.cohort_rows.cohort_law`): its shares sized for the
        cohort's honest guaranteed survivors."""
        return tuple(
            cohort_law(cohort=g.cohort, noise_multiplier=g.noise_multiplier, clip=clip, trust=self.parameters)
            for g, clip in zip(self.cohort(row.name).groups, row.clips(config.clip))
        )

    def secure_run(self, row: MethodNoise, config: PlanConfig) -> SecureRun:
        """Each group's cohort, coin, memberships and z, the cohort's noise law, the row's expected contributors (as
        the rate q_m = r_m/|G_m|), weights ω_m and sparsity k_m/d, and its Λ with cohorts."""
        r = self.cohort(row.name)
        return SecureRun(parameters=self.parameters, laws=self.laws(row, config),
                         noise_multiplier=tuple(g.noise_multiplier for g in r.groups), planned_lambda=r.lambda_cohort,
                         cohorts=r.groups, q=tuple(g.expected_contributors / s for g, s in zip(r.groups, row.size)),
                         weight=r.weight, k_ratio=r.k_ratio)  # fmt: skip

    def costs(self, row: MethodNoise, config: PlanConfig, *, start: int, rounds: int) -> list[list[GroupRound]]:
        """What rounds ``start``..``rounds``−1 charge each group's members: one membership, the distributed discrete
        Gaussian at z_m subsampled by the coin p_m, in each of the run's first K_m rounds, and nothing after (a q = 0
        round). A client is in at most min(r, K_m) cohorts after r rounds, so every prefix of the run is charged at
        least what it spends; the whole run charges the plan's ε against the server."""
        groups: tuple[CohortGroup, ...] = self.cohort(row.name).groups
        dim = self.parameters.dim
        return [
            [GroupRound(q=g.coin if r < g.memberships else 0.0, noise_multiplier=g.noise_multiplier,
                        tau_d=group_tau_d(g.cohort, model_dim=dim))
             for g in groups]
            for r in range(start, rounds)
        ]  # fmt: skip

    def epsilon_spent(self, row: MethodNoise, config: PlanConfig, *, group: int, rounds: int) -> float:
        """ε against the server (and so against third parties) after ``rounds`` rounds: min(rounds, K_m) memberships
        at p_m (the planner's bound, :func:`~hdp_planner.trust.cohort_rows.cohort_group`)."""
        g, dim = self.cohort(row.name).groups[group], self.parameters.dim
        return epsilon_third_parties(noise_multiplier=g.noise_multiplier, q=g.coin, rounds=min(rounds, g.memberships),
                                     delta=config.delta, tau_d=group_tau_d(g.cohort, model_dim=dim))  # fmt: skip

    def cap(self, row: MethodNoise, config: PlanConfig, group: int) -> int:
        """K_m, the cohorts a client of ``group`` is a member of at most."""
        return self.cohort(row.name).groups[group].memberships

    def metrics(
        self, row: MethodNoise, config: PlanConfig, *, rounds: int, dropout: float, seeded: bool
    ) -> dict[str, Any]:
        """Each group's cohort, coin and memberships, and its ε against the server, which bounds third parties' too;
        where the coins came from."""
        p, groups = self.parameters, self.cohort(row.name).groups
        return {
            "hidden_participation": True, "bits": p.bits, "survivors": p.survivors, "colluders": p.colluders,
            "dropout_simulated": dropout, "noise_multiplier": [g.noise_multiplier for g in groups],
            "cohort": [g.cohort for g in groups], "coin": [g.coin for g in groups],
            "memberships": [g.memberships for g in groups],
            "epsilon_server": [self.epsilon_spent(row, config, group=m, rounds=rounds) for m in range(len(groups))],
            "coins": "seeded: a simulation's, regenerated from the seed" if seeded else "OS CSPRNG",
        }  # fmt: skip
