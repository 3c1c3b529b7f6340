"""Canary clients in a training run (torch side of :mod:`hdp_planner.audit`).

Each round the auditor appends the joining canaries' updates 2·C_m·u_j to the round's client updates, with
their group ids, *before* :func:`hdp_planner_train.rules.aggregate.aggregate`: they are clipped, share the noise and
are counted in c exactly like real clients. ``aggregate(..., observe=auditor.observe)`` hands it each group's
noisy sum before Top-k / projection, of which it keeps only the canaries' projections. Canaries join on
their own random streams (``round_seed(seed, ·, 3)`` layout, ``round_seed(seed, round, 4)`` joins), so real
clients' sampling is unchanged; the noise vectors of a run with canaries differ from one without (more shares
are drawn), its distribution does not.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from hdp_planner.audit import audit_group, canary_directions, canary_layout, default_canaries, join_canaries, project
from hdp_planner.methods.registry import REGISTRY
from hdp_planner_train.rules.aggregate import GroupSpec, RoundStats, round_rows, round_seed

LAYOUT_STREAM, JOIN_STREAM = 3, 4


def check_auditable(spec: GroupSpec) -> None:
    """Refuse what the audit does not cover: no noise (p-fedavg) or a σ schedule (one σ̂ per group is fitted)."""
    if not spec.private:
        raise ValueError(f"--audit: {spec.method} adds no noise, there is nothing to audit (ε = ∞)")
    if spec.schedule:
        raise ValueError(f"--audit: {spec.method}'s σ changes over rounds; the audit fits one σ per group")


def auditable(plan, method: str) -> bool:
    """Whether ``train --audit`` covers ``method`` under ``plan`` (a plan-noised method with a constant σ)."""
    from hdp_planner_train.rules.aggregate import method_spec

    if method not in REGISTRY or not REGISTRY[method].audit:
        return False
    try:
        check_auditable(method_spec(plan, method))
    except ValueError:
        return False
    return True


class CanaryAuditor:
    """The canaries of one run: layout from the seed, this round's joins, every round's projections."""

    def __init__(self, spec: GroupSpec, d: int, seed: int, per_group: int | None = None):
        check_auditable(spec)
        groups = len(spec.sizes)
        self.spec, self.seed = spec, seed
        self.per_group = default_canaries(d, groups) if per_group is None else per_group
        self.layout = canary_layout(d, groups, self.per_group, round_seed(seed, 0, LAYOUT_STREAM))
        self.z: list[list[np.ndarray]] = [[] for _ in range(groups)]
        self.joined: list[list[np.ndarray]] = [[] for _ in range(groups)]
        self.seconds = 0.0
        self._joins: list[np.ndarray] = []

    def insert(self, deltas: torch.Tensor, group_of_row: np.ndarray, rnd: int) -> tuple[torch.Tensor, np.ndarray]:
        """The round's updates and group ids with the joining canaries' rows 2·C_m·u_j appended."""
        t0 = time.perf_counter()
        rng = np.random.default_rng(round_seed(self.seed, rnd, JOIN_STREAM))
        self._joins = join_canaries(self.layout, self.spec.q, rng)
        for m, idx in enumerate(self._joins):
            mask = np.zeros(self.per_group, dtype=bool)
            mask[idx] = True
            self.joined[m].append(mask)
        rows = [2.0 * c * canary_directions(self.layout, m, idx) for m, (idx, c) in
                enumerate(zip(self._joins, self.spec.clips))]  # fmt: skip
        extra = torch.as_tensor(np.concatenate(rows), dtype=deltas.dtype, device=deltas.device)
        _, groups = round_rows(self._joins)
        self.seconds += time.perf_counter() - t0
        return torch.cat([deltas, extra]), np.concatenate([np.asarray(group_of_row, dtype=np.int64), groups])

    def observe(self, group: int, noisy_sum: torch.Tensor) -> None:
        """``aggregate``'s hook: keep the projections of group ``group``'s noisy sum onto its canaries."""
        t0 = time.perf_counter()
        self.z[group].append(project(self.layout, group, noisy_sum.detach().double().cpu().numpy()))
        self.seconds += time.perf_counter() - t0

    def real_stats(self, stats: RoundStats) -> RoundStats:
        """The round's statistics with the canaries taken out of the joined counts (the log shows real clients)."""
        return replace(stats, joined=[j - len(idx) for j, idx in zip(stats.joined, self._joins)])

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps (the layout is regenerated from the seed)."""
        return {"per_group": self.per_group, "z": self.z, "joined": self.joined, "seconds": self.seconds}

    def load_state(self, state: dict[str, Any]) -> None:
        """Back from a checkpoint (which keeps the arrays as tensors)."""
        self.z = [[np.asarray(a) for a in g] for g in state["z"]]
        self.joined = [[np.asarray(a) for a in g] for g in state["joined"]]
        self.seconds = float(state["seconds"])

    def report(self, epsilon_planned: list[float], delta: float) -> dict[str, Any]:
        """The ``audit`` section of metrics.json: one entry per group (:func:`hdp_planner.audit.audit_group`)."""
        t0 = time.perf_counter()
        groups = []
        for m in range(len(self.spec.sizes)):
            entry = audit_group(
                np.stack(self.z[m]),
                np.stack(self.joined[m]),
                self.layout.inserted[m],
                self.spec.q[m],
                delta,
                epsilon_planned[m],
                self.spec.noise_multiplier[m],
                round_seed(self.seed, 1, LAYOUT_STREAM),
            )
            groups.append({"group": m + 1, **entry})
        return {
            "canaries_per_group": self.per_group,
            "groups": groups,
            "seconds_in_rounds": self.seconds,
            "seconds_report": time.perf_counter() - t0,
            "method": (
                "canaries u_j = D·IDCT(e_π(j)) per group, in/out bit Bernoulli(1/2), in canaries join with q_m; "
                "update 2·C_m·u_j through the real clipping/noise/aggregation; σ̂ = 1/μ̂ from z = ⟨u_j, y_m⟩ on "
                "the noisy sum before Top-k; ε̂ = PLD ε of PoissonSampled(q_m, N(σ̂)) over the rounds run; "
                "interval: 95% bootstrap over canaries; epsilon_lower_bound: Steinke et al. 2023 at 95%"
            ),
        }
