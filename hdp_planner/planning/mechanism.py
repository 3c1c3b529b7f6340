"""The mechanism a plan row is executed as.

A plan row (:class:`~hdp_planner.planning.method_noise.MethodNoise`) is only a description. What a client's privacy
depends on is what the trainer executes for the client's group m in every round: Poisson sampling at rate q_m,
clipping to C_m, and Gaussian noise of std s_m(t) on the sum the client's update enters. Its effective noise
multiplier is σ_m(t) = s_m(t)/C_m (GDPFed Algorithm 1, Theorem 1's mechanism). :func:`executed_mechanism` derives
exactly these numbers from a row; the trainer's ``GroupSpec`` takes its numbers from it, and ``verify`` accounts ε
from it, so a row cannot be executed differently from how it was accounted.

Per-group noise: s_m(t) = C_m·σ_m(t) (σ_m(t) from the row's schedule, or σ_m). A pooled row (IDP-FedAvg) draws one
noise of std s(t) = C_1·σ_1(t) for the sum of every group, so group m's effective multiplier is s(t)/C_m.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdp_planner.accounting.calibration import Accountant, GaussianRounds, epsilon_spent
from hdp_planner.accounting.schedule import schedule_epsilon, truncate
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise, Projection


@dataclass(frozen=True, kw_only=True)
class ExecutedMechanism:
    """What the trainer runs for one row: per group m, Poisson rate ``q[m]`` over ``sizes[m]`` clients, clipping
    to ``clip[m]``, and ``phases``: (rounds, effective σ_m) in order, noise std = clip[m]·σ_m. ``pooled``: one
    draw for all groups (its std is ``clip[0]·σ_0``, equal to every clip[m]·σ_m by construction). The round's
    other rules: the weight ω_m on each group's noisy sum, the kept fraction k_m/d (Top-k, or PFA's
    ``projection``), and whether the row clips per group (``clip_per_group``: its own C_m, else the plan's C)."""

    sizes: tuple[int, ...]
    q: tuple[float, ...]
    clip: tuple[float, ...]
    phases: tuple[tuple[int, tuple[float, ...]], ...]
    pooled: bool
    scheduled: bool = False
    weight: tuple[float, ...] = ()
    k_ratio: tuple[float, ...] = ()
    projection: Projection | None = None
    clip_per_group: bool = False

    @property
    def noise_multiplier(self) -> tuple[float, ...]:
        """σ_m of the last phase (the constant σ_m when there is one phase)."""
        return self.phases[-1][1]

    @property
    def rounds(self) -> int:
        return sum(r for r, _ in self.phases)

    def noise_at(self, rnd: int) -> tuple[float, ...]:
        """σ_m of every group in round ``rnd`` (0-based): its phase's, the last phase's past the schedule."""
        for length, sigma in self.phases:
            if rnd < length:
                return sigma
            rnd -= length
        return self.noise_multiplier

    def group_phases(self, m: int) -> list[tuple[int, float]]:
        """Group m's (rounds, effective σ) phases, for the accountant."""
        return [(r, s[m]) for r, s in self.phases]


def executed_mechanism(method: MethodNoise, config: PlanConfig) -> ExecutedMechanism:
    """The mechanism the trainer executes for ``method``'s row (see the module docstring)."""
    clip = method.clips(config.clip)
    if method.schedule is None:
        raw = ((config.rounds, method.noise_multiplier),)
    else:
        raw = tuple((ph.rounds, ph.noise_multiplier) for ph in method.schedule)
    if method.pooled:  # one std s = C_1σ_1 for the whole pool: group m's effective multiplier is s/C_m
        phases = tuple((r, tuple(clip[0] * s[0] / c for c in clip)) for r, s in raw)
    else:
        phases = tuple((r, tuple(float(x) for x in s)) for r, s in raw)
    return ExecutedMechanism(
        sizes=method.size,
        q=method.q,
        clip=clip,
        phases=phases,
        pooled=method.pooled,
        scheduled=method.schedule is not None,
        weight=method.weight,
        k_ratio=method.k_ratio,
        projection=method.projection,
        clip_per_group=method.clip is not None,
    )


def mechanism_epsilon(
    mech: ExecutedMechanism, *, group: int, rounds: int, delta: float, accountant: Accountant
) -> float:
    """ε that ``group`` spends in the first ``rounds`` rounds of ``mech``: a σ schedule composed with RDP
    (:mod:`hdp_planner.accounting.schedule`), a constant σ with ``accountant`` (the plan's spending accountant)."""
    q = mech.q[group]
    if mech.scheduled:
        phases = mech.group_phases(group)
        run = truncate(phases, rounds)
        return schedule_epsilon(run, q=q, delta=delta)
    return epsilon_spent(
        GaussianRounds(noise_multiplier=mech.noise_multiplier[group], q=q, rounds=rounds),
        delta=delta,
        accountant=accountant,
    )
