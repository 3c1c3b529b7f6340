"""One client's local record-level DP-SGD: per-example gradients, clipping, the Gaussian step and Poisson batches.

Every step is a Poisson sample of the client's examples at rate r_k, per-example gradients clipped to C
(Algorithm 1, line 15), N(0, z_k²C²) added to the clipped sum, divided by the expected batch r_k|M_k|: the
mechanism :func:`hdp_planner.methods.selection.record_noise_multiplier` accounts for.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from hdp_planner_train.learning.engines import unflatten
from hdp_planner_train.rules.clipping import clip_rows
from hdp_planner_train.rules.noise_sources import NoiseSource


def per_example_grads(model: nn.Module):
    """f(θ, x, y) → (b, d): the gradient of each example's loss at the flat parameters θ (torch.func vmap(grad))."""
    params = unflatten(model)

    def loss_one(flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, params(flat), (x.unsqueeze(0),)), y.unsqueeze(0))

    return vmap(grad(loss_one), in_dims=(None, 0, 0))


def clip_per_example(grads: torch.Tensor, clip: float) -> torch.Tensor:
    """Scale every row g_i by min(1, C/‖g_i‖) (Algorithm 1, line 15).

    Args:
        grads: (b, d) per-example gradients.
        clip: C.

    Returns:
        The clipped rows: no norm exceeds C as stored.
    """
    return clip_rows(grads, clip)[0]  # the one clipping rule: the norm never exceeds C as stored


def noisy_mean_gradient(
    grads: torch.Tensor, *, clip: float, multiplier: float, expected_batch: float, source: NoiseSource
) -> tuple[torch.Tensor, torch.Tensor]:
    """(Σ_i clip(g_i) + N(0, z²C²I)) / (r|M|): the accounted record-level Gaussian step.

    The divisor is the *expected* batch size, so the sensitivity of the mean is C/(r|M|) whatever the batch.

    Args:
        grads: (b, d) per-example gradients of the Poisson batch (b may be 0).
        clip: C.
        multiplier: z.
        expected_batch: r|M|.
        source: the noise source.

    Returns:
        (the noisy mean gradient, its noise part).
    """
    d = grads.shape[1]
    total = clip_per_example(grads, clip).sum(0)
    noise = source.normal(d, multiplier * clip, grads.device, grads.dtype)
    return (total + noise) / expected_batch, noise / expected_batch


@dataclass(frozen=True, kw_only=True)
class ClientSGD:
    """One client's local DP-SGD: its record-level Gaussian step (:func:`noisy_mean_gradient`) and its optimizer.

    Args:
        clip: C.
        multiplier: z.
        expected_batch: r|M|.
        lr: The learning rate.
        momentum: SGD momentum μ.
    """

    clip: float
    multiplier: float
    expected_batch: float
    lr: float
    momentum: float


def dp_sgd_client(
    grad_fn,
    theta: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    batches: list[np.ndarray],
    *,
    sgd: ClientSGD,
    source: NoiseSource,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One client's τ local DP-SGD steps from θ on its examples, each a :func:`noisy_mean_gradient`.

    Args:
        grad_fn: per-example gradients (:func:`per_example_grads`).
        theta: θ, the flat global parameters.
        x: the client's inputs.
        y: the client's labels.
        batches: the Poisson-sampled positions of every step (:func:`poisson_batches`).
        sgd: its clipping, noise multiplier, expected batch, learning rate and momentum.
        source: the noise source.

    Returns:
        (Δ = θ_τ − θ, its noise part, by the same momentum recursion on the noise).
    """
    clip, multiplier, expected_batch, lr, momentum = sgd.clip, sgd.multiplier, sgd.expected_batch, sgd.lr, sgd.momentum
    local = theta.clone()
    buf = noise_buf = None
    noise_part = torch.zeros_like(theta)
    for idx in batches:
        if len(idx):
            g_ex = grad_fn(local, x[idx], y[idx])
        else:
            g_ex = theta.new_zeros((0, theta.numel()))
        step, noise = noisy_mean_gradient(
            g_ex, clip=clip, multiplier=multiplier, expected_batch=expected_batch, source=source
        )
        if momentum:
            buf = step if buf is None else buf.mul_(momentum).add_(step)
            noise_buf = noise if noise_buf is None else noise_buf.mul_(momentum).add_(noise)
            step, noise = buf, noise_buf
        local = local - lr * step
        noise_part -= lr * noise
    return local - theta, noise_part


def poisson_batches(rng: np.random.Generator, *, size: int, rate: float, steps: int) -> list[np.ndarray]:
    """Poisson samples of a client's examples, every example kept with probability ``rate`` at every step.

    Args:
        rng: the random source.
        size: |M|, the client's examples.
        rate: r.
        steps: how many samples.

    Returns:
        The positions kept at every step.
    """
    return [np.flatnonzero(rng.random(size) < rate) for _ in range(steps)]


def noise_coefficients(*, steps: int, momentum: float) -> np.ndarray:
    """c_s with Δ's noise = −lr Σ_s c_s n_s under SGD with momentum: c_s = Σ_{i<τ−s} μ^i.

    Args:
        steps: τ.
        momentum: μ.

    Returns:
        c_s for s = 0 … τ − 1.
    """
    return np.array([sum(momentum**i for i in range(steps - s)) for s in range(steps)])
