"""Canary clients in a training run (torch side of :mod:`hdp_planner.audit`).

Each group's "in" canaries are members of its population: the round's sampler draws them with the real clients
(:func:`~hdp_planner_train.rules.sampling.sample_round` with ``extra``, or the Flower strategy's own draw), and
:meth:`CanaryAuditor.take` takes them out of the sample. Their updates S·C_m·u_j (S = :data:`CANARY_SCALE`) are
put among the real updates at random rows *before* :func:`~hdp_planner_train.rules.aggregate.aggregate`: they are
clipped, share the noise and are counted in c exactly like real clients. The aggregation hands the auditor each
group's noisy sum and what the round releases of it (:data:`~hdp_planner_train.rules.release.Observer`): it
keeps the canaries' projections of the noisy sum, checks that the release is the plan's post-processing of that
sum (Top-k of it, or a projection), and counts the real clients who joined, whose rate it tests against q_m. A run
with canaries draws more random numbers than one without, so its samples and noise differ; their distributions
do not.

A plan solved with ``--hide-sample`` (public cohorts, private coins, :mod:`hdp_planner_train.rules.cohort`): the
"in" canaries are members of the group's population whom the server may name in its cohorts like any client
(:func:`~hdp_planner_train.rules.cohort.cohort_round` over the population extended by :attr:`CanaryAuditor.extra`);
a named canary enforces its cap K_m and flips its coin at p_m in the same pipeline as every member, and its row
S·C_m·u_j is multiplied by that coin. The auditor plays the server: it knows the cohorts, who replied and each group's
noisy sum, never the coins. The coins reach it as the audit's referee (:meth:`CanaryAuditor.referee`), who keeps
the canaries' coins aside until the report, where they are the ground truth of which memberships contributed: the
shift is measured on heads memberships, the canaries' heads rate is tested against p_m, and ε̂ composes
PoissonSampled(p_m, N(σ̂)) over min(T, K_m) memberships, the plan's ε against the server. The tails memberships
must not shift the sum (a coin that does not stop a tails member's contribution). The real members' heads are not
observable and not counted: the clients' check is the members aggregated against the cohort named.

Simulated dropouts under secure aggregation: the aggregation tells the auditor which rows survived to each group's
secure sum (:meth:`CanaryAuditor.survivors`; the server sees who sent a masked vector). A canary that drops out is
neither inserted nor a member of the released sum, on both sides of the audit: it is left out of the contributions
whose shift is measured and, with cohorts, of the memberships whose heads rate is tested against p_m (its coin was
flipped, but nothing of it reached the sum). Under Poisson sampling the sampler's draws, dropped canaries included,
are still tested against q_m.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from hdp_planner.audit import audit_group, canary_directions, canary_layout, default_canaries, project
from hdp_planner.methods.registry import REGISTRY
from hdp_planner.planning.plan import Plan
from hdp_planner_train.rules.aggregate import RoundStats
from hdp_planner_train.rules.release import top_k_mask
from hdp_planner_train.rules.sampling import round_rows, round_seed
from hdp_planner_train.rules.specs import GroupSpec

LAYOUT_STREAM, ORDER_STREAM = 3, 4
CANARY_SCALE = 1000.0
"""A canary's update is S·C_m·u_j: clipping brings it to C_m·u_j, and one that escapes clipping shifts its
projection by S noise-free units, which no run's noise hides."""


def check_auditable(spec: GroupSpec) -> None:
    """Refuse what the audit does not cover: no noise (p-fedavg) or a σ schedule (one σ̂ per group is fitted)."""
    if not spec.private:
        raise ValueError(f"--audit: {spec.method} adds no noise, there is nothing to audit (ε = ∞)")
    if spec.schedule:
        raise ValueError(f"--audit: {spec.method}'s σ changes over rounds; the audit fits one σ per group")


def auditable(plan: Plan, method: str) -> bool:
    """Whether ``train --audit`` covers ``method`` under ``plan`` (a plan-noised method with a constant σ).

    Args:
        plan: A plan.
        method: A ``--method`` key.

    Returns:
        True when the audit can insert canaries in that method's rounds.
    """
    from hdp_planner_train.rules.specs import method_spec

    if method not in REGISTRY or not REGISTRY[method].audit:
        return False
    try:
        check_auditable(method_spec(plan, method))
    except ValueError:
        return False
    return True


class CanaryAuditor:
    """The canaries of one run: layout from the seed, this round's joins, every round's projections and checks.

    Args:
        spec: The audited method's per-group rules (an auditable one: see :func:`auditable`).
        d: The model's dimension.
        seed: The run's seed (the canaries' layout derives from it).
        per_group: Canaries per group, in and out together (None: min(2000, ⌊d/M⌋)).

    Raises:
        ValueError: The method cannot be audited.
    """

    def __init__(self, spec: GroupSpec, d: int, seed: int, per_group: int | None = None):
        check_auditable(spec)
        groups = len(spec.sizes)
        self.spec, self.seed = spec, seed
        self.per_group = default_canaries(d, groups=groups) if per_group is None else per_group
        self.layout = canary_layout(
            d, groups=groups, per_group=self.per_group, seed=round_seed(seed, rnd=0, stream=LAYOUT_STREAM)
        )
        self.members = [np.flatnonzero(self.layout.inserted[m]) for m in range(groups)]
        self.z: list[list[np.ndarray]] = [[] for _ in range(groups)]
        self.joined: list[list[np.ndarray]] = [[] for _ in range(groups)]
        self.clients: list[list[int]] = [[] for _ in range(groups)]  # real clients sampled per round
        self.population = list(spec.sizes)
        self.unfaithful = [0] * groups  # rounds whose release was not the plan's post-processing of the noisy sum
        self.aggregated: list[list[int]] = [[] for _ in range(groups)]  # real clients aggregated per round
        self.mismatched = [[0, 0] for _ in range(groups)]  # rounds aggregating more, fewer clients than were sampled
        self.seconds = 0.0
        self._joins: list[np.ndarray] = [np.zeros(0, np.int64)] * groups
        self.cohorts = spec.secagg.cohorts if spec.secagg is not None else None
        self.heads: list[list[np.ndarray]] = [[] for _ in range(groups)]  # the referee's: canaries' coins per round
        self.dropped: list[list[np.ndarray]] = [[] for _ in range(groups)]  # canaries that dropped out per round
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []  # per group: canaries' rows among its rows, their index
        self._coins: list[np.ndarray | None] = [None] * groups
        self._dropped: list[np.ndarray | None] = [None] * groups

    @property
    def extra(self) -> tuple[int, ...]:
        """The "in" canaries of each group: members of its population, sampled with its clients."""
        return tuple(len(m) for m in self.members)

    def take(self, sampled: list[np.ndarray], offsets: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
        """The real clients of a sample drawn over each group's ``sizes[m]`` clients (ids from ``offsets[m]``)
        followed by its :attr:`extra` canaries; the canaries who joined are kept for :meth:`insert`."""
        real, joins = [], []
        for m, ids in enumerate(sampled):
            local = np.asarray(ids, dtype=np.int64) - offsets[m]
            is_canary = local >= sizes[m]
            real.append(np.asarray(ids)[~is_canary])
            joins.append(self.members[m][local[is_canary] - sizes[m]])
            mask = np.zeros(self.per_group, dtype=bool)
            mask[joins[-1]] = True
            self.joined[m].append(mask)
            self.clients[m].append(int((~is_canary).sum()))
            self.population[m] = int(sizes[m])
        self._joins = joins
        return real

    def insert(self, deltas: torch.Tensor, group_of_row: np.ndarray, rnd: int) -> tuple[torch.Tensor, np.ndarray]:
        """The round's updates and group ids with the joining canaries' rows S·C_m·u_j put at random rows. The real
        rows about to be aggregated are counted per group against the sampler's output of the round (:meth:`take`):
        the join-rate test runs on the clients actually aggregated, and a round that aggregates another number of
        clients than were sampled is flagged."""
        t0 = time.perf_counter()
        real = np.bincount(np.asarray(group_of_row, dtype=np.int64), minlength=len(self.spec.sizes))
        for m, count in enumerate(real):
            self.aggregated[m].append(int(count))
            sampled = self.clients[m][-1] if self.clients[m] else 0
            if count != sampled:
                self.mismatched[m][0 if count > sampled else 1] += 1
        rows = [CANARY_SCALE * c * canary_directions(self.layout, m, idx) for m, (idx, c) in
                enumerate(zip(self._joins, self.spec.clips))]  # fmt: skip
        extra = torch.as_tensor(np.concatenate(rows), dtype=deltas.dtype, device=deltas.device)
        _, groups = round_rows(self._joins)
        all_rows = torch.cat([deltas, extra])
        all_groups = np.concatenate([np.asarray(group_of_row, dtype=np.int64), groups])
        order = np.random.default_rng(round_seed(self.seed, rnd=rnd, stream=ORDER_STREAM)).permutation(len(all_groups))
        canary = order - len(deltas)  # ≥ 0: the canary row of that index among the joins of every group
        index = np.concatenate(self._joins)
        self._rows = []
        for m in range(len(self.spec.sizes)):
            rows = canary[all_groups[order] == m]
            self._rows.append((np.flatnonzero(rows >= 0), index[rows[rows >= 0]]))
        self.seconds += time.perf_counter() - t0
        return all_rows[torch.as_tensor(order, device=deltas.device)], all_groups[order]

    def referee(self, group: int, coins: np.ndarray) -> None:
        """The aggregation's :data:`~hdp_planner_train.rules.aggregate.Referee`: the coins of group ``group``'s rows
        in this cohort round, in the order :meth:`insert` gave them. Only the canaries' are kept, aside from
        everything the statistic is computed from, until :meth:`report`."""
        positions, index = self._rows[group]
        mask = np.zeros(self.per_group, dtype=bool)
        mask[index] = np.asarray(coins)[positions] == 1
        self._coins[group] = mask

    def survivors(self, group: int, alive: np.ndarray) -> None:
        """The aggregation's :data:`~hdp_planner_train.rules.aggregate.Survivors`: which of group ``group``'s rows
        survived to its secure sum this round, in the order :meth:`insert` gave them; the canaries that dropped out
        are kept for :meth:`observe`."""
        positions, index = self._rows[group]
        mask = np.zeros(self.per_group, dtype=bool)
        mask[index[~np.asarray(alive, dtype=bool)[positions]]] = True
        self._dropped[group] = mask

    def observe(self, group: int, noisy_sum: torch.Tensor | None, released: torch.Tensor | None) -> None:
        """The aggregation's :data:`~hdp_planner_train.rules.release.Observer`: keep the projections of group
        ``group``'s noisy sum onto its canaries and check what is released of it; (None, None): nothing released,
        the round's joins of that group are forgotten."""
        t0 = time.perf_counter()
        coins, self._coins[group] = self._coins[group], None
        dropped, self._dropped[group] = self._dropped[group], None
        if noisy_sum is None:
            self.joined[group].pop()
            return
        self.dropped[group].append(np.zeros(self.per_group, dtype=bool) if dropped is None else dropped)
        if self.cohorts is not None:
            if coins is None:
                raise ValueError("--audit: a cohort round's canaries need their coins (the aggregation's referee)")
            self.heads[group].append(coins)
        self.z[group].append(project(self.layout, group, noisy_sum.detach().double().cpu().numpy()))
        self.unfaithful[group] += not self.post_processing(group, noisy_sum, released)
        self.seconds += time.perf_counter() - t0

    def post_processing(self, group: int, y: torch.Tensor, released: torch.Tensor) -> bool:
        """Whether ``released`` is what the plan releases of the noisy sum ``y``: Top_k(y) recomputed here (y itself
        when k = d or pooled), or an orthogonal projection of y (PFA's projected group: ⟨r, y⟩ = ‖r‖² ≤ ‖y‖²)."""
        spec = self.spec
        pr = spec.projection
        if pr is not None and group == pr.projected:
            r, y = released.double(), y.double()
            scale = float(y.norm()) ** 2 + 1e-30
            return abs(float(r @ y) - float(r @ r)) <= 1e-4 * scale and float(r @ r) <= scale * (1 + 1e-4)
        mask = None if spec.pooled else top_k_mask(y, spec.k_ratio[group])
        return bool(torch.equal(released, y if mask is None else y * mask))

    def real_stats(self, stats: RoundStats) -> RoundStats:
        """The round's statistics with the canaries taken out of the joined counts (the log shows real clients)."""
        return replace(stats, joined=[j - len(idx) for j, idx in zip(stats.joined, self._joins)])

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (the layout is regenerated from the seed)."""
        return {"per_group": self.per_group, "z": self.z, "joined": self.joined, "clients": self.clients,
                "population": self.population, "unfaithful": self.unfaithful, "seconds": self.seconds,
                "aggregated": self.aggregated, "mismatched": self.mismatched, "heads": self.heads,
                "dropped": self.dropped}  # fmt: skip

    def load_state(self, state: dict[str, Any]) -> None:
        """Back from a checkpoint (which keeps the arrays as tensors)."""
        self.z = [[np.asarray(a) for a in g] for g in state["z"]]
        self.joined = [[np.asarray(a) for a in g] for g in state["joined"]]
        self.clients = [[int(c) for c in g] for g in state["clients"]]
        self.population = [int(p) for p in state["population"]]
        self.unfaithful = [int(u) for u in state["unfaithful"]]
        self.seconds = float(state["seconds"])
        self.aggregated = [[int(c) for c in g] for g in state.get("aggregated", [[] for _ in self.spec.sizes])]
        self.mismatched = [[int(c) for c in g] for g in state.get("mismatched", [[0, 0] for _ in self.spec.sizes])]
        self.heads = [[np.asarray(a) for a in g] for g in state.get("heads", [[] for _ in self.spec.sizes])]
        self.dropped = [[np.asarray(a) for a in g] for g in state.get("dropped", [])] or [
            [np.zeros(self.per_group, dtype=bool) for _ in g] for g in self.joined
        ]  # a checkpoint from before dropouts were audited: none dropped

    def report(self, epsilon_planned: list[float], delta: float) -> dict[str, Any]:
        """The ``audit`` section of metrics.json: one entry per group (:func:`hdp_planner.audit.audit_group`)."""
        t0 = time.perf_counter()
        groups = []
        for m in range(len(self.spec.sizes)):
            joined = np.stack(self.joined[m]) if self.joined[m] else np.zeros((0, self.per_group), dtype=bool)
            reached = joined & ~(np.stack(self.dropped[m]) if self.dropped[m] else np.zeros_like(joined))
            inserted = self.layout.inserted[m]
            if self.cohorts is None:  # the sampler's draws are tested; the survivors among them contributed
                model = dict(clients=(sum(self.aggregated[m]), self.population[m] * len(self.aggregated[m])),
                             joins=int(joined[:, inserted].sum()))  # fmt: skip
                contributed, rate = reached, self.spec.q[m]
            else:  # the referee's coins mark the contributions among the memberships that reached the sum
                g = self.cohorts[m]
                contributed = reached & (np.stack(self.heads[m]) if self.heads[m] else np.zeros_like(joined))
                model = dict(offered=int(reached[:, inserted].sum()), silent=reached & ~contributed,
                             compositions=min(joined.shape[0], g.memberships), rate="coin p_m")  # fmt: skip
                rate = g.coin
            entry = audit_group(
                np.stack(self.z[m]) if self.z[m] else np.zeros((0, self.per_group)),
                contributed,
                inserted,
                q=rate,
                delta=delta,
                epsilon_planned=epsilon_planned[m],
                sigma_planned=self.spec.noise_multiplier[m],
                seed=round_seed(self.seed, rnd=1, stream=LAYOUT_STREAM),
                unfaithful=self.unfaithful[m],
                mismatched=tuple(self.mismatched[m]),
                **model,
            )
            groups.append({"group": m + 1, **entry})
        return {
            "canaries_per_group": self.per_group,
            "groups": groups,
            "seconds_in_rounds": self.seconds,
            "seconds_report": time.perf_counter() - t0,
            "method": METHOD if self.cohorts is None else METHOD_COHORT,
            "blind_to": BLIND_TO if self.cohorts is None else BLIND_TO_COHORT,
        }


METHOD = (
    "canaries u_j = D·IDCT(e_π(j)) per group, in/out bit Bernoulli(1/2); in canaries are members of their group's "
    "population, sampled with its clients by the same sampler and put at random rows; update 1000·C_m·u_j through the "
    "real clipping/noise/aggregation; σ̂ = 1/μ̂ from z = ⟨u_j, y_m⟩ on each released group's noisy sum, whose release "
    "is checked to be Top_k(y_m) or a projection of y_m; the clients aggregated counted against the sampler's output "
    "each round; clients' (as aggregated) and canaries' join rates tested against q_m (binomial, p < 1e-6); a canary "
    "that drops out under secure aggregation is sampled but not inserted; ε̂ = PLD ε "
    "of PoissonSampled(q_m, N(σ̂)) over the rounds run; interval: 95% bootstrap over canaries; epsilon_lower_bound: "
    "Steinke et al. 2023 at 95%"
)
BLIND_TO = (
    "plan-level failures: a plan whose σ_m, q_m or δ do not meet the budgets (verify checks those), clients put in "
    "the wrong group, budgets the plan was not made from; bugs that touch real clients only in ways canaries do not "
    "share (their data, local training); leaks outside the aggregation (logs, checkpoints)"
)
METHOD_COHORT = (
    "public cohorts, private coins: canaries as in the Poisson audit, the in canaries members of their group's "
    "population whom the server names in its cohorts like any client; a named canary enforces its cap K_m, flips its "
    "coin at p_m in the members' pipeline and contributes 1000·C_m·u_j times its coin; the statistic (z on each "
    "released noisy sum, the members aggregated against the cohort named, the releases checked) uses only what the "
    "server sees; the canaries' coins, kept by the referee until the report, mark the contributions: σ̂ = 1/μ̂ from "
    "heads memberships, the canaries' heads rate tested against p_m (binomial, p < 1e-6), the tails memberships' "
    "shift tested against 0.1 noise units (p < 1e-6); a canary that drops out is neither a membership nor a "
    "contribution; ε̂ = PLD ε of "
    "PoissonSampled(p_m, N(σ̂)) over min(T, K_m) memberships, compared with the plan's ε against the server; "
    "interval: 95% bootstrap over canaries; epsilon_lower_bound: Steinke et al. 2023 at 95% from the server's view"
)
BLIND_TO_COHORT = (
    BLIND_TO + "; the real members' heads rate (the server cannot see coins: only the canaries' coins are tested, and "
    "they are drawn by the same code); which members the server names (the guarantee does not rest on it)"
)
