"""One DP aggregation round (GDPFed Algorithm 1, lines 10-16), written once and used by both engines.

The rules (sampling, clip factor, noise shares, Λ) come from :mod:`hdp_planner.rules.noise`; this module only
applies them to torch tensors:

1. every group m Poisson-samples its clients with rate q_m (:func:`sample_round`, numpy Generator seeded
   from (seed, round), so both engines and a resumed run sample identically);
2. each joined client's update Δ_i = θ_i − θ is clipped to ‖Δ_i‖ ≤ C and the client adds its share
   N(0, std²), std = ``noise_share_std(C, σ_m, c)``, so the group's sum carries exactly N(0, C²σ_m²)
   whatever the number c joined; if c = 0 the server adds N(0, C²σ_m²) itself;
3. the server keeps the top-k_m coordinates (by |·|) of the group's noisy sum y_m (GDPFed+) and
   applies θ ← θ + Σ_m ω_m·Top_k(y_m).

The baselines change these steps as their plan entries say (:mod:`hdp_planner.methods.baselines`): per-group
clipping thresholds C_m (IDP-FedAvg-Scale); one pooled draw N(0, s²), s = C_mσ_m, on the sum of every group,
shared by all c joined clients (IDP-FedAvg), with ω = 1/Σr; σ_m of the round from a schedule (time-adaptive);
PFA's projection of one group's noisy sum onto the principal subspace of the public group's latest noisy sums
(:func:`principal_subspace`) instead of Top-k.

Every Gaussian draw comes from a :class:`NoiseSource`: :class:`SecureNoise` (the OS's CSPRNG, for models that
are released) or :class:`SeededNoise` (reproducible from the run's seed: simulations only).

Noise measurement (two numbers per round, both per coordinate, noise n_m of group m known exactly):
- ``lambda_measured`` = Σ_m ω_m²·(k_m/d)·‖n_m‖²/d: the noise the applied update would carry if the kept
  coordinates were chosen independently of the noise. Its expectation is exactly ``lambda_exact``
  (C²Σ ω_m²σ_m² k_m/d), the plan's "exact" Λ, so it checks the trainer against the plan.
- ``lambda_applied`` = ‖Σ_m ω_m·mask_m⊙n_m‖²/d with mask_m the Top-k mask chosen on the *noisy* sum: the
  noise really left in the applied update. With Top-k it is biased above ``lambda_exact`` (Top-k prefers
  coordinates where the noise is large: at k/d = 0.7 on pure noise it keeps ≈98% of the noise energy,
  not 70%); without Top-k it equals ``lambda_measured`` up to zero-mean cross-group terms.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
import torch

from hdp_planner.methods.registry import REGISTRY
from hdp_planner.planfile.mechanism import ExecutedMechanism, executed_mechanism
from hdp_planner.planning.plan import Phase, Plan, Projection
from hdp_planner.rules.noise import SecureRandom, clip_factor, noise_share_std, poisson_sample, secure_normal
from hdp_planner_train.rules.cohort import member_coins
from hdp_planner_train.rules.secagg import SecaggSpec, group_sum, round_sources


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


@dataclass(frozen=True)
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
    secagg: SecaggSpec | None = None
    """Secure aggregation with distributed discrete noise (:mod:`.secagg`): ``noise_multiplier`` is then each
    group's z from the plan's trust object."""

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
            schedule=tuple(Phase(r, s) for r, s in mech.phases) if mech.scheduled and private else None,
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
    """The groups of ``method`` (a :data:`METHOD_NAMES` key) in ``plan``, as executed: sizes, q_m, C_m, σ_m and
    the σ schedule come from :func:`hdp_planner.planfile.mechanism.executed_mechanism`, the mechanism ``verify``
    accounts."""
    if method not in METHOD_NAMES:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHOD_NAMES)}")
    if METHOD_NAMES[method] not in {m.name for m in plan.methods}:
        raise ValueError(
            f"the plan has no {METHOD_NAMES[method]} noise: re-plan with hdp-plan solve --methods {method}"
        )
    mech = executed_mechanism(plan.method(METHOD_NAMES[method]), plan.config)
    return GroupSpec.executing(method, mech, REGISTRY[method].private)


def round_seed(seed: int, rnd: int, stream: int) -> int:
    """A 63-bit seed for (run seed, round, stream): streams 0 sampling, 1 batches, 2 noise."""
    return int(np.random.SeedSequence([seed, rnd, stream]).generate_state(2, dtype=np.uint64)[0] >> np.uint64(1))


def sample_round(
    spec: GroupSpec, seed: int, rnd: int, secure: bool = False, extra: Sequence[int] | None = None
) -> list[np.ndarray]:
    """Global ids of the clients joining round ``rnd``, per group (Poisson sampling with q_m): from
    ``round_seed(seed, rnd, 0)``, or with ``secure`` from the OS's CSPRNG, so that no recorded seed regenerates
    who took part. ``extra`` e_m (the audit's canaries): group m's population is its size_m clients followed by
    e_m canaries, all sampled alike; ids from offset_m + size_m on are canaries
    (:meth:`hdp_planner_train.audit.canaries.CanaryAuditor.take` takes them out)."""
    rng = SecureRandom() if secure else np.random.default_rng(round_seed(seed, rnd, 0))
    extra = extra or (0,) * len(spec.sizes)
    return [off + poisson_sample(rng, size + e, q) for off, size, e, q in zip(spec.offsets, spec.sizes, extra, spec.q)]


def round_rows(sampled: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a round as :func:`aggregate` takes them: the joined ids of every group in group order
    (:func:`sample_round`'s output concatenated) and each row's 0-based group."""
    ids = np.concatenate(sampled) if sampled else np.zeros(0, np.int64)
    return ids, np.repeat(np.arange(len(sampled), dtype=np.int64), [len(s) for s in sampled])


NoiseKind = Literal["secure", "seeded"]


class NoiseSource(Protocol):
    """Where every Gaussian draw of a round comes from (the noise shares and PFA's start vectors)."""

    kind: NoiseKind

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        """A tensor of ``shape`` with independent N(0, std²) entries on ``device`` in ``dtype``."""
        ...

    def share_sum(self, d: int, shares: int, std: float, device, dtype) -> torch.Tensor:
        """The sum of ``shares`` independent N(0, std²·I_d) shares (the clients' noise shares of a group)."""
        ...


class SeededNoise:
    """Reproducible noise for simulations: torch generators seeded from ``round_seed(seed, rnd, 2)``, one per device.

    Anyone holding the seed regenerates every draw and can subtract it from the released model:
    a model trained with it must never be released."""

    kind: NoiseKind = "seeded"

    def __init__(self, seed: int, rnd: int) -> None:
        self.seed, self.rnd = seed, rnd
        self._generators: dict[str, torch.Generator] = {}

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        device = torch.device(device)
        gen = self._generators.get(device.type)  # one stream per device type, as one generator per round before
        if gen is None:
            gen = self._generators[device.type] = torch.Generator(device=device).manual_seed(
                round_seed(self.seed, self.rnd, 2)
            )
        return torch.randn(shape, generator=gen, device=device, dtype=dtype) * std

    def share_sum(self, d: int, shares: int, std: float, device, dtype) -> torch.Tensor:
        """One draw per share, in client order: the same stream in every engine and on resume."""
        total = torch.zeros(d, device=device, dtype=dtype)
        for _ in range(shares):
            total += self.normal(d, std, device, dtype)
        return total


class SecureNoise:
    """Noise from the OS's cryptographically secure generator (:func:`hdp_planner.rules.noise.secure_normal`, float64),
    converted to ``dtype`` on ``device``: nothing recorded with the run regenerates it."""

    kind: NoiseKind = "secure"

    def normal(self, shape: int | tuple[int, ...], std: float, device, dtype) -> torch.Tensor:
        size = (shape,) if isinstance(shape, int) else tuple(shape)
        draws = secure_normal(int(np.prod(size))) * std
        return torch.from_numpy(draws.reshape(size)).to(device=device, dtype=dtype)

    def share_sum(self, d: int, shares: int, std: float, device, dtype) -> torch.Tensor:
        """The sum's own law, N(0, shares·std²·I_d), in one draw (the simulation holds every share anyway)."""
        return self.normal(d, std * math.sqrt(shares), device, dtype)


def noise_source(kind: NoiseKind, seed: int, rnd: int) -> NoiseSource:
    """The noise of round ``rnd``: :class:`SecureNoise` or :class:`SeededNoise` (seed, rnd)."""
    if kind == "secure":
        return SecureNoise()
    if kind == "seeded":
        return SeededNoise(seed, rnd)
    raise ValueError(f"noise source must be secure or seeded, got {kind!r}")


@dataclass
class RoundStats:
    joined: list[int]
    clipped: int  # clients whose update was scaled down
    lambda_measured: float
    lambda_applied: float
    withheld: int = 0  # secure aggregation: groups whose sum was not released (too few survivors)


def top_k_mask(y: torch.Tensor, k_ratio: float) -> torch.Tensor | None:
    """Boolean mask of the k = round(k_ratio·d) largest |y_j| (None when k = d: keep everything)."""
    d = y.numel()
    k = max(1, round(k_ratio * d))
    if k >= d:
        return None
    mask = torch.zeros(d, dtype=torch.bool, device=y.device)
    mask[torch.topk(y.abs(), k, sorted=False).indices] = True
    return mask


Observer = Callable[[int, "torch.Tensor | None", "torch.Tensor | None"], None]
"""The audit's view of a round, group by group: (m, noisy sum y_m, what is released of it), or (m, None, None)
when group m released nothing."""
Referee = Callable[[int, np.ndarray], None]
"""``referee(m, coins)``: the private coins of group m's rows in a cohort round, handed to the audit's referee (never
to the server), who reads the canaries' among them only after the run (:mod:`hdp_planner_train.audit.canaries`)."""
Survivors = Callable[[int, np.ndarray], None]
"""``survivors(m, alive)``: which of group m's rows survived to its secure sum this round (the server sees who sent a
masked vector), told to the audit before the group is observed."""


def clip_rows(rows: torch.Tensor, clip: float) -> tuple[torch.Tensor, int]:
    """Scale each row Δ_i by min(1, C/‖Δ_i‖) (``hdp_planner.rules.noise.clip_factor``) so that ‖Δ_i‖ ≤ C holds for the
    rows as stored: a clipped row's factor is lowered by 4 ulps of the dtype (rounding the factor and the scaled
    entries moves the norm by at most ~1 ulp), and any row still above C, its norm taken in float64, is scaled
    down again (float32 rows clipped with float64 norms exceeded C by ~6e-8 relative)."""
    if rows.shape[0] == 0:
        return rows, 0
    norms = torch.linalg.vector_norm(rows.double(), dim=1).cpu().numpy()
    factor = clip_factor(norms, clip)
    clipped = factor < 1.0
    margin = 1.0 - 4.0 * torch.finfo(rows.dtype).eps
    scale = torch.as_tensor(np.where(clipped, factor * margin, 1.0), dtype=rows.dtype, device=rows.device)
    out = rows * scale[:, None]
    while True:  # a guard: each pass lowers an offending row by 4 ulps, more than its rounding can add
        over = torch.linalg.vector_norm(out.double(), dim=1) > clip
        if not bool(over.any()):
            break
        out = torch.where(over[:, None], out * margin, out)
    return out, int(np.sum(clipped))


def group_noise(
    d: int, joined: int, clip: float, noise_multiplier: float, source: NoiseSource, device, dtype
) -> torch.Tensor:
    """The noise in a group's sum: ``joined`` client shares of std C·σ/√c each, or the server's N(0, C²σ²)."""
    return source.share_sum(d, max(joined, 1), noise_share_std(clip, noise_multiplier, joined), device, dtype)


def principal_subspace(matrix: torch.Tensor, dim: int, method: str, source: NoiseSource) -> torch.Tensor:
    """Orthonormal (d, k) basis of the top-``dim`` left singular subspace of ``matrix`` (d, w): all of its
    span when w ≤ dim, else by ``lanczos`` (ARPACK's implicitly restarted Lanczos, as PFA) or ``randomized``
    SVD (Halko et al. 2011: a Gaussian sketch, two power iterations). Start vectors come from ``source``."""
    w = matrix.shape[1]
    if w <= dim:
        u, s, _ = torch.linalg.svd(matrix, full_matrices=False)
        return u[:, s > s.max() * 1e-12] if s.numel() else u
    if method == "lanczos":
        from scipy.sparse.linalg import svds

        v0 = source.normal(w, 1.0, matrix.device, torch.float64).cpu().numpy()
        u, _, _ = svds(matrix.double().cpu().numpy(), k=dim, solver="arpack", v0=v0)
        return torch.as_tensor(u.copy(), dtype=matrix.dtype, device=matrix.device)  # svds may return negative strides
    if method != "randomized":
        raise ValueError(f"unknown subspace method {method!r}")
    sketch = source.normal((w, min(w, dim + 5)), 1.0, matrix.device, matrix.dtype)
    basis = torch.linalg.qr(matrix @ sketch).Q
    for _ in range(2):
        basis = torch.linalg.qr(matrix @ torch.linalg.qr(matrix.T @ basis).Q).Q
    u, _, _ = torch.linalg.svd(basis.T @ matrix, full_matrices=False)
    return basis @ u[:, :dim]


def aggregate(
    deltas: torch.Tensor,
    group_of_row: Sequence[int],
    spec: GroupSpec,
    source: NoiseSource | None,
    rnd: int = 0,
    public_history: list[torch.Tensor] | None = None,
    observe: Observer | None = None,
    referee: Referee | None = None,
    survivors: Survivors | None = None,
) -> tuple[torch.Tensor, RoundStats]:
    """The server update Σ_m ω_m·Top_k(Σ_{i∈m} clip(Δ_i) + noise_m) from flat client updates ``deltas`` (K, d).

    ``rnd`` picks σ_m from a schedule; PFA appends the public group's noisy sum to ``public_history`` (the
    caller keeps it between rounds) and projects onto the principal subspace of its latest ``window`` entries.
    ``observe`` (the privacy audit, :mod:`hdp_planner_train.audit.canaries`) sees what :func:`noisy_update` releases;
    under secure aggregation a group that releases nothing is observed as ``observe(m, None, None)``. ``referee``
    (the audit's, :data:`Referee`) learns each cohort round's coins, ``survivors`` (:data:`Survivors`) which rows
    survived to each secure sum.
    """
    d = deltas.shape[1]
    groups = torch.as_tensor(np.asarray(group_of_row, dtype=np.int64), device=deltas.device)
    count = len(spec.sizes)
    rows = [deltas[groups == m] for m in range(count)]
    joined = [int(r.shape[0]) for r in rows]
    if not spec.private:
        update = sum((w * r.sum(0) for w, r in zip(spec.weight, rows)), torch.zeros_like(deltas[0:1].sum(0)))
        return update, RoundStats(joined, 0, 0.0, 0.0)
    assert source is not None, "a private method needs a noise source"
    sigma = spec.noise_at(rnd)
    if spec.secagg is not None and not spec.pooled:  # the exact integer pipeline; a silent group contributes nothing
        clipped_rows = [clip_rows(r, c) for r, c in zip(rows, spec.clips)]
        clipped = sum(c for _, c in clipped_rows)
        ys, noises, silent = [], [], set()
        for m, (r, _) in enumerate(clipped_rows):
            bits, dropouts = round_sources(source.kind, getattr(source, "seed", None), rnd, m)
            coins = None if spec.secagg.cohorts is None else member_coins(
                spec.secagg, source.kind, getattr(source, "seed", None), rnd, m, r.shape[0])  # fmt: skip
            if coins is not None and referee is not None:
                referee(m, coins)
            survived = None if survivors is None else functools.partial(survivors, m)
            out = group_sum(r, spec=spec.secagg, rnd=rnd, group=m, bits=bits, dropouts=dropouts, coins=coins,
                            survived=survived) if r.shape[0] else None  # fmt: skip
            if out is None:
                silent.add(m)
                if observe is not None:
                    observe(m, None, None)
            y, n = out if out is not None else (deltas.new_zeros(d), deltas.new_zeros(d))
            ys.append(y)
            noises.append(n)
        withheld = len(silent)
        if observe is not None and silent:
            observe = skipping(observe, silent)
        update, measured, applied = noisy_update(ys, noises, spec, source, public_history, observe)
        return update, RoundStats(joined, clipped, measured, applied, withheld)
    ys, noises, clipped = noisy_sums(rows, spec, sigma, source)
    update, measured, applied = noisy_update(ys, noises, spec, source, public_history, observe)
    return update, RoundStats(joined, clipped, measured, applied)


class GroupAggregator:
    """One method's server aggregation, written once for the simulator and Flower: clipping, noise, the audit's
    observer, Top-k_m or PFA's projection, and the weights ω_m (:func:`aggregate`, :func:`noisy_sums`,
    :func:`noisy_update`). It keeps PFA's state between rounds, the public group's latest noisy sums (checkpointed
    as ``public_history``)."""

    def __init__(self, spec: GroupSpec, public_history: Sequence[torch.Tensor] = ()):
        self.spec = spec
        self.public_history = list(public_history)

    def round(
        self,
        deltas: torch.Tensor,
        group_of_row: Sequence[int],
        source: NoiseSource | None,
        rnd: int,
        observe: Observer | None = None,
        referee: Referee | None = None,
        survivors: Survivors | None = None,
    ) -> tuple[torch.Tensor, RoundStats]:
        """:func:`aggregate` of one round's client updates."""
        return aggregate(deltas, group_of_row, self.spec, source, rnd, self.public_history, observe, referee,
                         survivors)  # fmt: skip

    def release(
        self,
        ys: list[torch.Tensor],
        noises: list[torch.Tensor] | None,
        source: NoiseSource,
        observe: Observer | None = None,
    ) -> tuple[torch.Tensor, float, float]:
        """:func:`noisy_update` of groups' noisy sums formed elsewhere (Flower's replies, secure aggregation)."""
        return noisy_update(ys, noises, self.spec, source, self.public_history, observe)


def noisy_sums(
    rows: Sequence[torch.Tensor], spec: GroupSpec, sigma: Sequence[float], source: NoiseSource
) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """Each group's y_m = Σ_{i∈m} clip(Δ_i) + N(0, C_m²σ_m²) (GDPFed Algorithm 1), or one pooled y of one draw of
    std C_mσ_m (equal for all m) shared by every joined client; their noises; how many rows were clipped. ``rows``:
    the (c_m, d) updates of each group, on one device and dtype. The simulator and Flower both aggregate here."""
    clipped_rows = [clip_rows(r, c) for r, c in zip(rows, spec.clips)]
    clipped = sum(c for _, c in clipped_rows)
    joined = [int(r.shape[0]) for r in rows]
    d, device, dtype = rows[0].shape[1], rows[0].device, rows[0].dtype
    if spec.pooled:
        total = torch.cat([r for r, _ in clipped_rows]).sum(0) if sum(joined) else rows[0].new_zeros(d)
        noise = group_noise(d, sum(joined), spec.clips[0], sigma[0], source, device, dtype)
        return [total + noise], [noise], clipped
    noises = [group_noise(d, joined[m], spec.clips[m], sigma[m], source, device, dtype) for m in range(len(rows))]
    return [r.sum(0) + n for (r, _), n in zip(clipped_rows, noises)], noises, clipped


def skipping(observe: Observer, silent: set[int]) -> Observer:
    """``observe`` for every group but ``silent`` ones (whose y_m is a placeholder: nothing was released)."""
    return lambda m, y, released: None if m in silent else observe(m, y, released)


def noisy_update(
    ys: list[torch.Tensor],
    noises: list[torch.Tensor] | None,
    spec: GroupSpec,
    source: NoiseSource,
    public_history: list[torch.Tensor] | None = None,
    observe: Observer | None = None,
) -> tuple[torch.Tensor, float, float]:
    """The server's side of a round (Algorithm 1, lines 14-16): from the groups' noisy sums ``ys`` (one pooled sum
    when ``spec.pooled``) to the update Σ_m ω_m·Top_k(y_m) (PFA: the projected group's sum projected instead), with
    ``lambda_measured`` and ``lambda_applied`` of the noises ``noises`` (NaN when the server does not know them,
    e.g. when clients added the noise). ``source`` draws PFA's start vectors. ``observe(m, y_m, r_m)`` (the audit)
    gets each group's noisy sum y_m and what the round releases of it, r_m = Top_k(y_m) or its projection (pooled:
    the pool's sum, for every group). Used by :func:`aggregate` and by the Flower strategy
    (:mod:`hdp_planner_flower.strategy`)."""
    d = ys[0].numel()
    if spec.pooled:
        lam = spec.weight[0] ** 2 * float(torch.sum(noises[0].double() ** 2)) / d if noises is not None else math.nan
        if observe is not None:
            for m in range(len(spec.sizes)):
                observe(m, ys[0], ys[0])
        return spec.weight[0] * ys[0], lam, lam
    noisy = list(ys)
    ys = list(ys)
    noises = list(noises) if noises is not None else None
    measured = (
        sum(w**2 * k * float(torch.sum(n.double() ** 2)) / d for w, k, n in zip(spec.weight, spec.k_ratio, noises))
        if noises is not None
        else math.nan
    )
    pr = spec.projection
    if pr is not None:
        assert public_history is not None, "PFA needs the public group's noisy sums of earlier rounds"
        public_history.append(ys[pr.public])
        del public_history[: -pr.window]
        basis = principal_subspace(torch.stack(public_history, dim=1), pr.dim, pr.subspace, source)
        ys[pr.projected] = basis @ (basis.T @ ys[pr.projected])
        if noises is not None:
            noises[pr.projected] = basis @ (basis.T @ noises[pr.projected])
    update = torch.zeros_like(ys[0])
    applied_noise = torch.zeros_like(update)
    for m in range(len(ys)):
        y = ys[m]
        mask = None if pr is not None and m == pr.projected else top_k_mask(y, spec.k_ratio[m])
        if mask is not None:
            y = y * mask
        if observe is not None:
            observe(m, noisy[m], y)
        update += spec.weight[m] * y
        if noises is not None:
            applied_noise += spec.weight[m] * (noises[m] if mask is None else noises[m] * mask)
    applied = float(torch.sum(applied_noise.double() ** 2)) / d if noises is not None else math.nan
    return update, measured, applied
