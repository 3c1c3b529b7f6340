"""Local training of the sampled clients: τ SGD steps (momentum, batch B) from the global model θ.

Two engines with the same inputs and outputs, the flat client updates Δ_i = θ_i − θ as a (K, d) tensor:
- ``loop``: the plain reference, one client after the other with ``torch.optim.SGD``;
- ``vectorized``: all clients at once over stacked parameters (chunks of clients bound the memory), the same
  SGD-with-momentum arithmetic as torch.optim.SGD; gradients by ``torch.func`` (functional_call + vmap + grad),
  or, for a model with ``forward_batched`` (the LSTM, the small CNN, the digits MLP), by its own client-batched
  products (:func:`client_grads`); on CPU the clients are trained in pieces by worker threads
  (:func:`vectorized_train`, which also runs SAM and frozen parameters for DP²-FedSAM's personal methods).

On CPU every parallel step runs in worker threads with one intra-op thread each (:func:`in_workers`): on a shared
machine an OpenMP team of two waits at every operator's barrier for a thread another process has pre-empted (the
paper-scale CNN's local step took 10 ms on one thread and 100-200 ms on two while other jobs ran).
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from hdp_planner_train.rules.sampling import round_seed

T = TypeVar("T")
ENGINES = ("vectorized", "loop")
PRECISIONS = ("fp32", "bf16")
"""``--precision``: of the local forward pass only ("mixed precision only where the update that is
clipped and noised stays float32"). ``bf16`` runs the forward's products under ``torch.autocast`` in bfloat16;
parameters, gradients, momentum, the update Δ and everything after it (clipping, noise, Top-k, aggregation, the
audit) stay float32."""


@dataclass(frozen=True, kw_only=True)
class LocalTraining:
    """How each sampled client trains: ``steps`` τ of SGD on batches of ``batch`` of its examples at learning rate
    ``lr`` with ``momentum`` (torch.optim.SGD's arithmetic), sharpness-aware with radius ``rho`` > 0 where a personal
    method asks for it (0: plain SGD), on ``engine`` (:data:`ENGINES`), ``chunk`` clients at once (None: sized to the
    cache), the forward pass in ``precision`` (:data:`PRECISIONS`)."""

    steps: int
    batch: int
    lr: float
    momentum: float
    rho: float = 0.0
    engine: str = "vectorized"
    chunk: int | None = None
    precision: str = "fp32"


@dataclass(frozen=True)
class ClientData:
    """The clients' training examples on the device: inputs ``x``, labels ``y``, and each client's indices into them
    (``clients``)."""

    x: torch.Tensor
    y: torch.Tensor
    clients: list[np.ndarray]

    def batches(self, ids: np.ndarray, *, steps: int, batch: int, seed: int, rnd: int) -> tuple[torch.Tensor, ...]:
        """(K, τ, B, ...) inputs and labels of the clients ``ids`` for round ``rnd`` (:func:`batch_indices`)."""
        idx = batch_indices(self.clients, ids, steps=steps, batch=batch, seed=seed, rnd=rnd)
        idx_t = torch.as_tensor(idx, device=self.x.device)
        return self.x[idx_t], self.y[idx_t]


def autocast(precision: str, device: torch.device) -> torch.autocast:
    """The autocast context of the local forward pass for ``precision`` (disabled for fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def batch_indices(
    clients: list[np.ndarray], ids: np.ndarray, *, steps: int, batch: int, seed: int, rnd: int, stream: int = 1
) -> np.ndarray:
    """(K, τ, B) training-set indices: per step, B of the client's samples (with replacement if it has < B);
    ``stream`` 1 for training, another for local-only work (fine-tuning before evaluation)."""
    rng = np.random.default_rng(round_seed(seed, rnd=rnd, stream=stream))
    out = np.empty((len(ids), steps, batch), dtype=np.int64)
    for row, cid in enumerate(ids):
        own = clients[int(cid)]
        for s in range(steps):
            out[row, s] = own[rng.choice(len(own), size=batch, replace=len(own) < batch)]
    return out


def widen(logits: torch.Tensor) -> torch.Tensor:
    """Autocast's bfloat16 logits as float32 for the loss (float32 and float64 logits unchanged)."""
    return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits


def loop_deltas(
    model: nn.Module,
    theta: torch.Tensor,
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    lr: float,
    momentum: float,
    precision: str = "fp32",
) -> torch.Tensor:
    """Reference engine: each client trains a copy of the model with torch.optim.SGD."""
    deltas = []
    cast = autocast(precision, theta.device)
    for i in range(xs.shape[0]):
        local = copy.deepcopy(model)
        vector_to_parameters(theta.clone(), local.parameters())  # a copy: SGD updates in place
        opt = torch.optim.SGD(local.parameters(), lr=lr, momentum=momentum)
        for s in range(xs.shape[1]):
            opt.zero_grad(set_to_none=True)
            with cast:
                logits = local(xs[i, s])
            F.cross_entropy(widen(logits), ys[i, s]).backward()
            opt.step()
        deltas.append(parameters_to_vector(local.parameters()).detach() - theta)
    if not deltas:
        return theta.new_zeros((0, theta.numel()))
    return torch.stack(deltas)


def unflatten(model: nn.Module) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """flat θ (``parameters_to_vector`` order) → {name: view of θ in the parameter's shape}, for functional_call."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    sizes = [int(np.prod(s)) for s in shapes]

    def split(flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.view(s) for n, t, s in zip(names, torch.split(flat, sizes), shapes)}

    return split


GradFn = Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]


def client_grads(model: nn.Module, precision: str = "fp32", wrt: Sequence[str] | None = None) -> GradFn:
    """(params {name: (K, *shape)}, x (K, B, ...), y (K, B)) → each client's gradient of its mean cross-entropy
    with respect to the parameters named in ``wrt`` (default: all; the others are held fixed).

    A model with ``forward_batched(params, x)`` (the LSTM, the small CNN, the digits MLP) runs all clients through
    its own batched products and one backward pass of the sum of the clients' losses (client k's loss depends only on
    its own weights, so the gradient of the sum is every client's own); any other model goes through torch.func's
    vmap(grad(·)), or plain autograd for a single client. The forward runs under :func:`autocast` for
    ``precision``; the loss and the gradients are float32.
    """
    device = next(model.parameters()).device
    chosen = None if wrt is None else set(wrt)
    batched = getattr(model, "forward_batched", None)
    if batched is not None:

        def grads(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
            leaves = {n: p.detach().requires_grad_(chosen is None or n in chosen) for n, p in params.items()}
            wanted = [n for n in leaves if chosen is None or n in chosen]
            with torch.enable_grad():
                with autocast(precision, device):
                    logits = batched(leaves, x)
                loss = F.cross_entropy(widen(logits).flatten(0, 1), y.flatten(), reduction="sum") / y.shape[1]
                return dict(zip(wanted, torch.autograd.grad(loss, [leaves[n] for n in wanted])))

        return grads

    def loss_fn(free: dict[str, torch.Tensor], fixed: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        with autocast(precision, device):
            logits = functional_call(model, {**fixed, **free}, (x,))
        return F.cross_entropy(widen(logits), y)

    vmapped = vmap(grad(loss_fn))

    def split(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        free = {n: p for n, p in params.items() if chosen is None or n in chosen}
        fixed = {n: p for n, p in params.items() if n not in free}
        if x.shape[0] > 1:
            return vmapped(free, fixed, x, y)
        leaves = {n: p[0].detach().requires_grad_() for n, p in free.items()}  # one client: no batching needed
        with torch.enable_grad():
            loss = loss_fn(leaves, {n: p[0] for n, p in fixed.items()}, x[0], y[0])
            return {n: g.unsqueeze(0) for n, g in zip(leaves, torch.autograd.grad(loss, list(leaves.values())))}

    return split


def default_chunk(model: nn.Module, d: int, device: torch.device) -> int:
    """Clients trained together: as many as 2·10⁸ stacked parameters allow, except on CPU for a ``forward_batched``
    model, whose per-step batched products read every client's weights: there about 16 MB of weights in all (4
    clients of the LSTM, 153 of the small CNN) stays in cache; measured for the LSTM 0.06 s per client-step at 4
    clients against 0.22 at 16. On CPU a model above 10⁶ parameters trains one client at a time, by plain autograd
    (:func:`client_grads`): the paper-scale CNN's client-step took 11.0 ms so against 12.5 ms for two clients under
    vmap, on one thread."""
    if device.type == "cpu" and hasattr(model, "forward_batched"):
        return max(1, int(4e6 // max(d, 1)))
    if device.type == "cpu" and d > 1_000_000:
        return 1
    return max(1, int(2e8 // max(d, 1)))


def cpu_workers(device: torch.device) -> int:
    """Worker threads for ``device``: torch's thread count on CPU (:func:`in_workers`), one elsewhere."""
    return torch.get_num_threads() if device.type == "cpu" else 1


def in_workers(fn: Callable[[T], torch.Tensor], items: Sequence[T], workers: int) -> list[torch.Tensor]:
    """``[fn(item) for item in items]`` by ``workers`` threads, each taking the next item when free, every operator
    on one intra-op thread (no barrier waits on a busy core); torch's thread count is restored after."""
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(min(workers, len(items))) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def vectorized_train(
    model: nn.Module,
    starts: torch.Tensor,
    xs: torch.Tensor,
    ys: torch.Tensor,
    training: LocalTraining,
    *,
    wrt: Sequence[str] | None = None,
    workers: int | None = None,
) -> torch.Tensor:
    """Clients' flat parameters (K, d) after τ = xs.shape[1] local steps from their own ``starts`` (K, d), all at
    once: per step the batch gradient g of the parameters named in ``wrt`` (default all; the rest frozen), with
    SAM of radius ρ > 0 (Foret et al. 2021; DP²-FedSAM eqs. 11-12: g is re-taken at θ + ρ·g/‖g‖, ‖·‖ over the
    trained parameters) and SGD with momentum as torch.optim.SGD (a fresh momentum buffer per call); ρ, the learning
    rate, momentum, chunk and precision are ``training``'s."""
    lr, momentum, rho, precision = training.lr, training.momentum, training.rho, training.precision
    k_total, d = starts.shape
    if k_total == 0:
        return starts.new_zeros((0, d))
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    train = names if wrt is None else [n for n in names if n in set(wrt)]
    own = threading.local()  # functional_call swaps a module's parameters: each worker thread its own copy

    def grad_fn(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        if not hasattr(own, "fn"):
            shared = workers == 1 or hasattr(model, "forward_batched")  # forward_batched reads no module state
            own.fn = client_grads(model if shared else copy.deepcopy(model), precision, None if wrt is None else train)
        return own.fn(params, x, y)

    chunk = training.chunk or default_chunk(model, d, starts.device)
    workers = workers or cpu_workers(starts.device)
    if workers > 1:  # cache-sized pieces, about two per worker, each worker taking the next piece when free
        chunk = min(chunk, max(1, math.ceil(k_total / (2 * workers))))

    def piece(first: int) -> torch.Tensor:
        xc, yc, kc = xs[first : first + chunk], ys[first : first + chunk], min(chunk, k_total - first)
        parts = torch.split(starts[first : first + chunk], [math.prod(sh) for sh in shapes], dim=1)
        params = {n: t.reshape(kc, *sh).clone() for n, t, sh in zip(names, parts, shapes)}
        buf: dict[str, torch.Tensor] | None = None
        for s in range(xs.shape[1]):
            g = grad_fn(params, xc[:, s], yc[:, s])
            if rho > 0:
                norm = torch.sqrt(sum(g[n].flatten(1).pow(2).sum(1) for n in train))
                scale = rho / (norm + 1e-12)
                shifted = {n: params[n] + scale.view(-1, *[1] * (g[n].dim() - 1)) * g[n] if n in g else params[n]
                           for n in names}  # fmt: skip
                g = grad_fn(shifted, xc[:, s], yc[:, s])
            if momentum:
                buf = g if buf is None else {n: buf[n].mul_(momentum).add_(g[n]) for n in train}
                g = buf
            for n in train:
                params[n].sub_(g[n], alpha=lr)
        return torch.cat([params[n].reshape(kc, -1) for n in names], dim=1)

    return torch.cat(in_workers(piece, range(0, k_total, chunk), workers))


def vectorized_deltas(
    model: nn.Module,
    theta: torch.Tensor,
    xs: torch.Tensor,
    ys: torch.Tensor,
    *,
    lr: float,
    momentum: float,
    chunk: int | None = None,
    precision: str = "fp32",
) -> torch.Tensor:
    """All clients at once from the global θ: Δ_i = θ_i − θ by :func:`vectorized_train` (plain SGD)."""
    starts = theta.unsqueeze(0).expand(xs.shape[0], -1)
    training = LocalTraining(steps=xs.shape[1], batch=xs.shape[2], lr=lr, momentum=momentum, chunk=chunk,
                             precision=precision)  # fmt: skip
    return vectorized_train(model, starts, xs, ys, training) - theta


def local_deltas(engine: str, *args, **kwargs) -> torch.Tensor:
    if engine == "loop":
        kwargs.pop("chunk", None)
        return loop_deltas(*args, **kwargs)
    if engine == "vectorized":
        return vectorized_deltas(*args, **kwargs)
    raise ValueError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def clients_deltas(
    model: nn.Module,
    training: LocalTraining,
    *,
    theta: torch.Tensor,
    data: ClientData,
    ids: np.ndarray,
    seed: int,
    rnd: int,
) -> torch.Tensor:
    """(K, d) updates Δ_i of the sampled clients ``ids`` after ``training.steps`` local SGD steps from θ (plain SGD on
    ``training.engine``), each on batches of its own data drawn for round ``rnd`` (GDPFed Algorithm 2, lines 4-8)."""
    xs, ys = data.batches(ids, steps=training.steps, batch=training.batch, seed=seed, rnd=rnd)
    return local_deltas(training.engine, model, theta, xs, ys, lr=training.lr, momentum=training.momentum,
                        chunk=training.chunk, precision=training.precision)  # fmt: skip


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> tuple[float, float]:
    """(accuracy %, mean cross-entropy) on a test set, its batches shared by :func:`in_workers` on CPU."""
    model.eval()

    def scores(i: int) -> torch.Tensor:
        out = model(x[i : i + batch])
        yb = y[i : i + batch]
        return torch.stack([F.cross_entropy(out, yb, reduction="sum").double(), (out.argmax(-1) == yb).sum().double()])

    parts = in_workers(scores, range(0, len(y), batch), cpu_workers(x.device))
    loss, correct = (float(v) for v in torch.stack(parts).sum(0)) if parts else (0.0, 0.0)
    model.train()
    return 100.0 * correct / max(len(y), 1), loss / max(len(y), 1)
