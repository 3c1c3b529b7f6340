"""Each method's groups as the trainer applies them: :class:`GroupSpec` (sizes, q_m, σ_m or its schedule, k_m, ω_m,
C_m, pooled noise, PFA's projection, the trust model and secure aggregation), built by :func:`method_spec` from the
executed mechanism (:func:`hdp_planner.planning.mechanism.executed_mechanism`, the one ``verify`` accounts) and put
under the run's trust model by :func:`trusted_spec`, and :data:`METHOD_NAMES`, the methods the trainer runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from hdp_planner.methods.registry import REGISTRY
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.mechanism import ExecutedMechanism, executed_mechanism
from hdp_planner.planning.method_noise import MethodNoise, Phase, Projection
from hdp_planner.planning.plan import Plan, Trust
from hdp_planner.planning.trust import TrustedServer
from hdp_planner.rules.noise import paper_aggregation_weights
from hdp_planner_train.rules.secagg import SecaggSpec


class _TrainedRows(Mapping[str, str]):
    """A live view of the method registry: a method registered later (one module, one entry) trains at once."""

    def __getitem__(self, key: str) -> str:
        m = REGISTRY[key]
        if m.family == "selection":
            raise KeyError(key)
        return m.row

    def __iter__(self) -> Iterator[str]:
        return (key for key, m in REGISTRY.items() if m.family != "selection")

    def __len__(self) -> int:
        return sum(1 for _ in self)


METHOD_NAMES: Mapping[str, str] = _TrainedRows()
"""``--method`` key → the plan row it trains from, for the FedAvg and personal families (the method registry; p-fedavg:
DP-FedAvg's sampling and weights without clipping or noise)."""


@dataclass(frozen=True, kw_only=True)
class GroupSpec:
    """A method's per-group parameters as the trainer applies them."""

    method: str
    sizes: tuple[int, ...]
    q: tuple[float, ...]
    noise_multiplier: tuple[float, ...]
    k_ratio: tuple[float, ...]
    weight: tuple[float, ...]
    clip: float | tuple[float, ...]
    private: bool = True
    pooled: bool = False
    projection: Projection | None = None
    schedule: tuple[Phase, ...] | None = None
    trust: Trust = field(default_factory=TrustedServer)
    """The trust model the run follows (the plan's, unless the run asks otherwise)."""
    secagg: SecaggSpec | None = None
    """Secure aggregation with distributed discrete noise (:mod:`.secagg`): ``noise_multiplier`` is then each
    group's z from the plan's trust model."""

    @classmethod
    def executing(cls, method: str, mech: ExecutedMechanism, private: bool = True) -> GroupSpec:
        """The spec of the executed mechanism ``mech`` (:func:`~hdp_planner.planfile.mechanism.executed_mechanism`,
        the one ``verify`` accounts); without noise (``private`` False) nothing is noised or sparsified."""
        groups = range(len(mech.sizes))
        return cls(
            method=method,
            sizes=mech.sizes,
            q=mech.q,
            noise_multiplier=mech.noise_multiplier if private else tuple(0.0 for _ in groups),
            k_ratio=mech.k_ratio if private else tuple(1.0 for _ in groups),
            weight=mech.weight,
            clip=mech.clip if mech.clip_per_group else mech.clip[0],
            private=private,
            pooled=mech.pooled,
            projection=mech.projection,
            schedule=tuple(Phase(rounds=r, noise_multiplier=s) for r, s in mech.phases)
            if mech.scheduled and private
            else None,
        )

    @property
    def clips(self) -> tuple[float, ...]:
        """C_m per group (one C for all unless the method clips per group)."""
        return self.clip if isinstance(self.clip, tuple) else tuple(self.clip for _ in self.sizes)

    def noise_at(self, rnd: int) -> tuple[float, ...]:
        """σ_m of every group in round ``rnd`` (0-based): the schedule's phase, or the constant σ_m."""
        for phase in self.schedule or ():
            if rnd < phase.rounds:
                return phase.noise_multiplier
            rnd -= phase.rounds
        return self.noise_multiplier

    @property
    def offsets(self) -> np.ndarray:
        """First client id of each group: clients join groups in order of the method's group sizes."""
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    @property
    def n(self) -> int:
        return int(sum(self.sizes))


def method_spec(plan: Plan, method: str) -> GroupSpec:
    """The groups of ``method`` (a :data:`METHOD_NAMES` key) in ``plan``, as executed (:func:`row_spec`)."""
    if method not in METHOD_NAMES:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}")
    if METHOD_NAMES[method] not in {m.name for m in plan.methods}:
        raise ValueError(
            f"the plan has no {METHOD_NAMES[method]} noise: re-plan with hdp-plan solve --methods {method}"
        )
    return row_spec(plan.method(METHOD_NAMES[method]), plan.config, method)


def row_spec(row: MethodNoise, config: PlanConfig, method: str) -> GroupSpec:
    """The groups of ``method`` (a :data:`METHOD_NAMES` key) training from the plan row ``row``, as executed: sizes,
    q_m, C_m, σ_m and the σ schedule come from :func:`hdp_planner.planning.mechanism.executed_mechanism`, the
    mechanism ``verify`` accounts."""
    return GroupSpec.executing(method, executed_mechanism(row, config), REGISTRY[method].private)


def trusted_spec(
    spec: GroupSpec, trust: Trust, row: MethodNoise, config: PlanConfig, *, dropout: float = 0.0
) -> GroupSpec:
    """``spec`` (of the plan row ``row``) under the trust model ``trust``: as executed where the server adds the noise,
    else as ``trust`` runs the row (:meth:`~hdp_planner.planning.plan.Trust.secure_run`: under secure aggregation each
    group's law and z, with cohorts their rates, weights and sparsity) with a simulated ``dropout`` rate. ValueError
    (one line) where the method has no form under ``trust`` (a method without noise has none under secure
    aggregation)."""
    problem = trust.form_problem(row.name if spec.private else None)
    if problem is not None:
        raise ValueError(f"{spec.method} has {problem}")
    run = trust.secure_run(row, config) if spec.private else None
    if run is None:
        return dataclasses.replace(spec, trust=trust)
    if not 0 <= dropout < 1:
        raise ValueError(f"--dropout must lie in [0, 1), got {dropout}")
    return dataclasses.replace(spec, trust=trust, secagg=SecaggSpec.of(run, dropout),
                               noise_multiplier=run.noise_multiplier, q=run.q or spec.q,
                               weight=run.weight or spec.weight, k_ratio=run.k_ratio or spec.k_ratio)  # fmt: skip


def plan_spec(plan: Plan, method: str) -> GroupSpec:
    """The groups of ``method`` (a :data:`METHOD_NAMES` key) as ``plan`` runs them under its own trust model
    (:func:`method_spec`, then :func:`trusted_spec`)."""
    spec = method_spec(plan, method)
    return trusted_spec(spec, plan.trust, plan.method(METHOD_NAMES[method]), plan.config)


def paper_weighted(spec: GroupSpec, *, q: float, n: int) -> GroupSpec:
    """``spec`` with GDPFed B.2's group weights (:func:`~hdp_planner.rules.noise.paper_aggregation_weights`, the
    plan's q and n); ValueError for a row that pools its groups into one noisy sum."""
    if spec.pooled:
        raise ValueError(f"--weights paper weighs group sums; {spec.method} adds one noise to the pool of its groups")
    r = [qm * size for qm, size in zip(spec.q, spec.sizes)]
    return dataclasses.replace(spec, weight=tuple(float(w) for w in paper_aggregation_weights(r, q=q, n=n)))
