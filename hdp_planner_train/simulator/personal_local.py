"""The DP²-FedSAM family's local training (:mod:`.personal`): sharpness-aware steps (SAM, the DP²-FedSAM paper's
Algorithm 1, lines 8-13), a client's head then body phases, and the same for all sampled clients at once."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hdp_planner_train.learning.engines import LocalTraining, autocast, vectorized_train, widen
from hdp_planner_train.learning.models import split_head


def head_mask(model: nn.Module) -> torch.Tensor:
    """Boolean mask of the head's coordinates in ``parameters_to_vector(model.parameters())``."""
    head = set(split_head(model))
    return torch.cat(
        [torch.full((p.numel(),), n in head, dtype=torch.bool, device=p.device) for n, p in model.named_parameters()]
    )


def sam_step(
    model: nn.Module,
    params: list[nn.Parameter],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    rho: float,
    optimizer: torch.optim.Optimizer,
    precision: str = "fp32",
) -> torch.Tensor:
    """One SAM step on ``params`` (Foret et al. 2021; DP²-FedSAM eqs. 11-12): p = ρ·g/‖g‖ with g the mini-batch
    gradient w.r.t. ``params`` only, then ``optimizer`` steps along the gradient taken at params + p (same batch).
    ρ = 0 is one plain SGD step. Returns the perturbation as a flat vector over all of ``model``'s parameters
    (zero outside ``params``). ``precision``: of the forward passes
    (:func:`hdp_planner_train.learning.engines.autocast`)."""
    chosen = {id(p) for p in params}
    cast = autocast(precision, x.device)

    def loss() -> torch.Tensor:
        with cast:
            out = model(x)
        return F.cross_entropy(widen(out), y)

    optimizer.zero_grad(set_to_none=True)
    loss().backward()
    perturb = [torch.zeros_like(p) for p in params]
    if rho > 0:
        grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        scale = rho / (float(norm) + 1e-12)
        with torch.no_grad():
            for p, g, e in zip(params, grads, perturb):
                e.copy_(g * scale)
                p.add_(e)
        optimizer.zero_grad(set_to_none=True)
        loss().backward()
        with torch.no_grad():
            for p, e in zip(params, perturb):
                p.sub_(e)
    optimizer.step()
    it = iter(perturb)
    return torch.cat([(next(it) if id(p) in chosen else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def sgd_phase(model, params, xs, ys, *, lr, momentum, rho=0.0, precision="fp32") -> None:
    """Steps of SAM (ρ > 0) or SGD on ``params`` with every other parameter frozen."""
    chosen = {id(p) for p in params}
    frozen = [p for p in model.parameters() if id(p) not in chosen]
    for p in frozen:
        p.requires_grad_(False)
    try:
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum)
        for s in range(xs.shape[0]):
            sam_step(model, params, xs[s], ys[s], rho=rho, optimizer=opt, precision=precision)
    finally:
        for p in frozen:
            p.requires_grad_(True)


def client_update(
    model: nn.Module,
    theta: torch.Tensor,
    head: torch.Tensor | None,
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    training: LocalTraining,
    head_steps: int,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One client's local training from the global θ; ``model`` is a scratch module (overwritten).

    With a personal ``head`` (its flat values, ``mask`` its coordinates in θ): ``head_steps`` SGD steps on the head
    (body frozen) on the first batches, then SAM(ρ) steps on the body (head frozen) on the rest; returns (the body's
    update Δ_i = φ_i − φ, of dimension d_φ only, the new head). Without a head (``head`` None): SAM(ρ) on every
    parameter over all batches; returns (Δ_i of dimension d, None). ρ, the learning rate, momentum and precision are
    ``training``'s."""
    sgd = dict(lr=training.lr, momentum=training.momentum, precision=training.precision)
    start = theta.clone()
    if head is not None:
        assert mask is not None
        start[mask] = head
    vector_to_parameters(start.clone(), model.parameters())
    if head is None:
        sgd_phase(model, list(model.parameters()), xs, ys, rho=training.rho, **sgd)
        return parameters_to_vector(model.parameters()).detach() - start, None
    names = set(split_head(model))
    head_params = [p for n, p in model.named_parameters() if n in names]
    body_params = [p for n, p in model.named_parameters() if n not in names]
    sgd_phase(model, head_params, xs[:head_steps], ys[:head_steps], **sgd)
    sgd_phase(model, body_params, xs[head_steps:], ys[head_steps:], rho=training.rho, **sgd)
    end = parameters_to_vector(model.parameters()).detach()
    return (end - start)[~mask], end[mask].clone()


def client_updates_vectorized(
    model: nn.Module,
    theta: torch.Tensor,
    heads: torch.Tensor | None,
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    training: LocalTraining,
    head_steps: int,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`client_update` for all K sampled clients at once (``heads``: their (K, d_h) heads, xs: (K, τ, B, ...))
    by :func:`hdp_planner_train.learning.engines.vectorized_train`: the head phase (SGD, body frozen), then the body
    phase (SAM(ρ), head frozen), each with a fresh momentum buffer as the loop's optimizer per phase; returns (K rows of
    Δ_i, the K new heads or None)."""
    starts = theta.unsqueeze(0).repeat(xs.shape[0], 1)
    if heads is None:
        return vectorized_train(model, starts, xs, ys, training) - starts, None
    assert mask is not None
    starts[:, mask] = heads
    head = split_head(model)
    body = [n for n, _ in model.named_parameters() if n not in set(head)]
    plain = dataclasses.replace(training, rho=0.0)
    mid = vectorized_train(model, starts, xs[:, :head_steps], ys[:, :head_steps], plain, wrt=head)
    end = vectorized_train(model, mid, xs[:, head_steps:], ys[:, head_steps:], training, wrt=body)
    return (end - starts)[:, ~mask], end[:, mask]


# ------------------------------------------------------------------ per-client evaluation
