"""The DP²-FedSAM family's per-client evaluation (:mod:`.personal`): each client's accuracy on its own label
distribution, with its personal head or with a fine-tuned copy of the global model (never sent anywhere)."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F
from torch.nn.utils import vector_to_parameters

from hdp_planner_train.learning.engines import ClientData, LocalTraining, batch_indices, vectorized_train
from hdp_planner_train.learning.models import head_module_name
from hdp_planner_train.simulator.personal_local import sgd_phase

FINETUNE_STREAM = 3  # randomness stream of the fine-tuning batches (1: training batches)
FINETUNE_BLOCK = 256  # clients fine-tuned at once by the vectorized engine before their evaluation


def label_distribution(clients: list[np.ndarray], labels: np.ndarray, num_classes: int) -> np.ndarray:
    """(n, C): p_i(c), the share of class c in client i's training data (its test distribution)."""
    dist = np.zeros((len(clients), num_classes))
    for i, idx in enumerate(clients):
        dist[i] = np.bincount(labels[idx], minlength=num_classes)[:num_classes]
    return dist / np.maximum(dist.sum(1, keepdims=True), 1)


def _weighted(acc_c: np.ndarray, loss_c: np.ndarray, dist: np.ndarray, present: np.ndarray):
    """Per-client (accuracy %, loss) = Σ_c p_i(c)·metric_i(c) over the classes the test split holds."""
    w = dist * present
    w = w / np.maximum(w.sum(1, keepdims=True), 1e-300)
    return 100.0 * np.sum(np.nan_to_num(acc_c) * w, 1), np.sum(np.nan_to_num(loss_c) * w, 1)


@torch.no_grad()
def head_features(model: nn.Module, x: torch.Tensor, batch: int = 1000) -> torch.Tensor:
    """The head's inputs (the body's output) for ``x``."""
    feats: list[torch.Tensor] = []
    hook = model.get_submodule(head_module_name(model)).register_forward_hook(
        lambda _m, inp, _out: feats.append(inp[0].detach())
    )
    model.eval()
    try:
        for i in range(0, len(x), batch):
            model(x[i : i + batch])
    finally:
        hook.remove()
        model.train()
    return torch.cat(feats)


@torch.no_grad()
def evaluate_heads(
    model: nn.Module,
    theta: torch.Tensor,
    *,
    heads: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    dist: np.ndarray,
    chunk: int = 32,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-client (accuracy %, loss): the global body θ with each client's own head ``heads`` (n, d_h)."""
    vector_to_parameters(theta.clone(), model.parameters())
    feats = head_features(model, x_test)
    name = head_module_name(model)
    head = model.get_submodule(name)
    shapes = [(n[len(name) + 1 :], p.shape) for n, p in model.named_parameters() if n.startswith(name + ".")]
    sizes = [math.prod(s) for _, s in shapes]
    onehot = F.one_hot(y_test, dist.shape[1]).to(feats.dtype)
    counts = onehot.sum(0)

    def logits(flat: torch.Tensor) -> torch.Tensor:
        parts = torch.split(flat, sizes)
        return functional_call(head, {n: t.view(s) for (n, s), t in zip(shapes, parts)}, (feats,))

    acc, loss = [], []
    for start in range(0, heads.shape[0], chunk):
        out = vmap(logits)(heads[start : start + chunk])  # (k, T, C)
        correct = (out.argmax(-1) == y_test).to(feats.dtype)
        ce = F.cross_entropy(out.transpose(1, 2), y_test.expand(out.shape[0], -1), reduction="none")
        acc.append((correct @ onehot / counts.clamp(min=1)).cpu().numpy())
        loss.append((ce @ onehot / counts.clamp(min=1)).cpu().numpy())
    return _weighted(np.concatenate(acc), np.concatenate(loss), dist, (counts > 0).cpu().numpy())


@torch.no_grad()
def _class_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, classes: np.ndarray, by_class, num_classes):
    acc, loss = np.full(num_classes, np.nan), np.full(num_classes, np.nan)
    model.eval()
    for c in classes:
        idx = by_class[c]
        if len(idx) == 0:
            continue
        out = model(x[idx])
        acc[c] = float((out.argmax(-1) == y[idx]).double().mean())
        loss[c] = float(F.cross_entropy(out, y[idx]))
    model.train()
    return acc, loss


def evaluate_finetuned(
    model: nn.Module,
    theta: torch.Tensor,
    *,
    training: LocalTraining,
    data: ClientData,
    test: tuple[torch.Tensor, torch.Tensor],
    dist: np.ndarray,
    seed: int,
    rnd: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-client (accuracy %, loss) on the ``test`` set (inputs, labels) after each client fine-tunes a copy of θ
    for ``training.steps`` SGD steps on its data (plain SGD, whatever ``training.rho``); the vectorized engine
    fine-tunes clients in chunks at once (:func:`vectorized_train`), each then evaluated."""
    x_train, y_train, (x_test, y_test) = data.x, data.y, test
    steps, engine = training.steps, training.engine
    plain = dataclasses.replace(training, rho=0.0)
    n, num_classes = len(data.clients), dist.shape[1]
    labels = y_test.cpu().numpy()
    by_class = [torch.as_tensor(np.flatnonzero(labels == c), device=x_test.device) for c in range(num_classes)]
    idx = torch.as_tensor(
        batch_indices(data.clients, np.arange(n), steps=steps, batch=training.batch, seed=seed, rnd=rnd,
                      stream=FINETUNE_STREAM),
        device=x_train.device,
    )  # fmt: skip
    local = copy.deepcopy(model)
    acc_c, loss_c = np.zeros((n, num_classes)), np.zeros((n, num_classes))
    tuned: torch.Tensor | None = None
    block = FINETUNE_BLOCK if engine == "vectorized" else 1
    for i in range(n):
        if engine == "vectorized" and i % block == 0:  # the next block of clients fine-tuned at once
            rows = slice(i, min(i + block, n))
            starts = theta.unsqueeze(0).repeat(rows.stop - i, 1)
            xs, ys = x_train[idx[rows]], y_train[idx[rows]]
            tuned = vectorized_train(local, starts, xs, ys, plain)
        if tuned is not None:
            vector_to_parameters(tuned[i % block].clone(), local.parameters())
        else:
            vector_to_parameters(theta.clone(), local.parameters())
            if steps:
                sgd_phase(local, list(local.parameters()), x_train[idx[i]], y_train[idx[i]], lr=training.lr,
                          momentum=training.momentum, precision=training.precision)  # fmt: skip
        acc_c[i], loss_c[i] = _class_scores(local, x_test, y_test, classes=np.flatnonzero(dist[i] > 0),
                                            by_class=by_class, num_classes=num_classes)  # fmt: skip
    present = np.array([len(b) > 0 for b in by_class])
    return _weighted(acc_c, loss_c, dist, present)


# ------------------------------------------------------------------ training
