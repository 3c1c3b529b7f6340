"""The server's side of a round (GDPFed Algorithm 1, lines 14-16): from the groups' noisy sums y_m to the update
Σ_m ω_m·Top_k(y_m) (:func:`noisy_update`), with PFA's projection onto the principal subspace of the public group's
latest noisy sums (:func:`principal_subspace`) in place of Top-k for the projected group, and what the audit sees
of it (:data:`Observer`).

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

import math
from collections.abc import Callable

import torch

from hdp_planner_train.rules.noise_sources import NoiseSource
from hdp_planner_train.rules.specs import GroupSpec

Observer = Callable[[int, "torch.Tensor | None", "torch.Tensor | None"], None]
"""The audit's view of a round, group by group: (m, noisy sum y_m, what is released of it), or (m, None, None)
when group m released nothing."""


def skipping(observe: Observer, silent: set[int]) -> Observer:
    """``observe`` for every group but ``silent`` ones (whose y_m is a placeholder: nothing was released)."""
    return lambda m, y, released: None if m in silent else observe(m, y, released)


def top_k_mask(y: torch.Tensor, k_ratio: float) -> torch.Tensor | None:
    """Boolean mask of the k = round(k_ratio·d) largest |y_j| (None when k = d: keep everything)."""
    d = y.numel()
    k = max(1, round(k_ratio * d))
    if k >= d:
        return None
    mask = torch.zeros(d, dtype=torch.bool, device=y.device)
    mask[torch.topk(y.abs(), k, sorted=False).indices] = True
    return mask


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


def noisy_update(
    ys: list[torch.Tensor],
    *,
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
    the pool's sum, for every group). Used by :func:`~.aggregate.aggregate` and by the Flower strategy
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
