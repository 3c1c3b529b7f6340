"""The DP²-FedSAM family: personal heads and sharpness-aware local training under client-level DP.

Methods (``hdp-plan train PLAN.json --method NAME``), all on the plan's ``DP-FedAvg`` noise row (one group of n
clients, Poisson rate q, σ calibrated by the planner's accountant for the strictest ε: one ε for every client)
and on the shared sampling, clipping and noise code of :mod:`hdp_planner_train.rules`:

- ``dp2-fedsam``: the model splits into a shared body φ and a personal head h (the final classifier layer,
  :func:`hdp_planner_train.learning.models.split_head`). Each sampled client runs τ_h SGD steps on its own head (body
  frozen), then τ_φ = the plan's τ SAM steps of radius ρ on the body (head frozen); only the body's update
  Δ_i = φ_i − φ is clipped, noised (noise of dimension d_φ) and averaged. Heads stay on the clients and persist
  across rounds (a client not yet sampled holds the initial head).
- ``centaur``: the same with plain SGD on the body (ρ = 0).
- ``dp-fedsam``: SAM (radius ρ) on the whole model, no personal head, evaluated globally.
- ``dp-fedavg-ft``: DP-FedAvg (the configured engine: its global model equals ``dp-fedavg``'s for the same
  seed); before each evaluation every client fine-tunes a copy of the global model for τ_h SGD steps on its
  own data (never sent anywhere) and is evaluated with it.

Per-client evaluation (dp2-fedsam, centaur, dp-fedavg-ft): client i's test distribution is its training label
distribution p_i. Its accuracy is Σ_c p_i(c)·acc_i(c), acc_i(c) = accuracy of client i's model on every test
example of class c: the expectation over a test set drawn with the client's labels from the dataset's test
split, with no split noise and no training data held out (training data equal to the other methods'). The
reported accuracy is the unweighted mean over all n clients (DP²-FedSAM §5 averages clients' local accuracies).

``--engine vectorized`` (the default) trains all sampled clients at once
(:func:`~.personal_local.client_updates_vectorized`; fine-tuning in blocks of clients); ``loop`` is the per-client
reference (the two agree, tested). The local training is in :mod:`.personal_local`, the per-client evaluation in
:mod:`.personal_eval`. Their privacy
guarantee covers what leaves the clients (the noisy body updates); heads, fine-tuned copies and per-client
accuracies stay local (accuracies are reported by the simulation only).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.nn.utils import vector_to_parameters

from hdp_planner.methods.registry import REGISTRY, keys
from hdp_planner_train.learning.engines import clients_deltas, evaluate
from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.rules.aggregate import GroupAggregator
from hdp_planner_train.rules.noise_sources import noise_source
from hdp_planner_train.rules.sampling import round_rows, sample_round
from hdp_planner_train.rules.specs import METHOD_NAMES
from hdp_planner_train.run.bound import BoundRun
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.ledger import LedgerRun
from hdp_planner_train.run.noise import noise_kind
from hdp_planner_train.simulator.personal_eval import evaluate_finetuned, evaluate_heads, label_distribution
from hdp_planner_train.simulator.personal_local import client_update, client_updates_vectorized, head_mask
from hdp_planner_train.simulator.scaffold import RunStart, TrainConfig, local_training, run_metrics
from hdp_planner_train.simulator.template import FamilyRun

PERSONAL_METHODS = keys("personal")
SAM_METHODS = tuple(k for k in PERSONAL_METHODS if REGISTRY[k].personal.sam)  # --rho applies
LOCAL_STEP_METHODS = tuple(k for k in PERSONAL_METHODS if REGISTRY[k].personal.local_steps)  # --head-steps applies
DEFAULT_RHO = 0.1  # the DP²-FedSAM paper's §5: ρ = 0.1 for CIFAR-10 (best of 0.05, 0.1, 0.5, 1.0), 0.5 for FEMNIST
PRIVACY_MODEL = "client-level (ε, δ)-DP, one ε"


def check_options(cfg) -> None:
    """Refuse --rho / --head-steps where the method does not use them, and bad values."""
    opts = cfg.personal
    if opts.rho is not None:
        if cfg.method not in SAM_METHODS:
            raise TrainError(f"--rho (SAM radius) applies to {' and '.join(SAM_METHODS)}, not {cfg.method}")
        if not (opts.rho >= 0 and math.isfinite(opts.rho)):
            raise TrainError(f"--rho must be ≥ 0, got {opts.rho}")
    if opts.head_steps is not None:
        if cfg.method not in LOCAL_STEP_METHODS:
            raise TrainError(f"--head-steps applies to {', '.join(LOCAL_STEP_METHODS)}, not {cfg.method}")
        if opts.head_steps < 0:
            raise TrainError(f"--head-steps must be ≥ 0, got {opts.head_steps}")


class PersonalRun(FamilyRun):
    """The hooks of :data:`PERSONAL_METHODS` for :func:`~.template.run_family` on the ``bound`` run: the plan-noised
    metrics, plus the privacy model; the clients' heads (dp2-fedsam, centaur) kept in the checkpoint."""

    def __init__(self, cfg: TrainConfig, bound: BoundRun) -> None:
        super().__init__(cfg, bound)
        method, spec = cfg.method, bound.spec
        self.traits = REGISTRY[method].personal
        if len(spec.sizes) != 1:  # client-level DP at one ε: DP-FedAvg's one group of all n clients
            raise TrainError(f"{method} runs the plan's DP-FedAvg row, which must be one group; it has "
                             f"{len(spec.sizes)}")  # fmt: skip
        self.personal = self.traits.head
        opts = cfg.personal
        self.rho = (DEFAULT_RHO if opts.rho is None else float(opts.rho)) if self.traits.sam else 0.0
        self.head_steps = bound.plan.config.local_steps if opts.head_steps is None else int(opts.head_steps)
        self.identity = {"rho": self.rho, "head_steps": self.head_steps}
        self.checkpoints = not (self.personal and noise_kind(cfg) == "secure")  # heads are not private: a secure
        if not self.checkpoints and cfg.output.resume:  # run never writes them
            raise TrainError(
                "a secure run of a personal method keeps the clients' heads in memory only (they carry no noise), so "
                "it writes no checkpoint and cannot be resumed; rerun it, or simulate with --seeded-noise"
            )
        self.client_scores: np.ndarray | None = None

    def begin(self, start: RunStart) -> tuple[()]:
        """The head mask, every client's initial head, the clients' label distributions."""
        super().begin(start)
        data = self.bound.data
        self.mask = head_mask(start.model)
        self.heads = start.theta[self.mask].unsqueeze(0).repeat(data.n_clients, 1) if self.personal else None
        self.dist = label_distribution(data.clients, data.y_train, data.num_classes)
        self.scratch = copy.deepcopy(start.model)
        self.shared = ~self.mask if self.personal else torch.ones_like(self.mask)
        return ()

    def state(self) -> dict[str, Any]:
        return {"heads": None if self.heads is None else self.heads.cpu()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        super().load_state(state)
        self.heads = None if state["heads"] is None else state["heads"].to(self.bound.device)

    def step(self, r: int, lr: float):
        cfg, bound, start, theta, heads = self.cfg, self.bound, self.start, self.theta, self.heads
        sampled = sample_round(bound.spec, seed=cfg.seed, rnd=r, secure=start.kind == "secure")
        ids, group_of_row = round_rows(sampled)
        training = local_training(cfg, bound, lr=lr, rho=self.rho)
        if self.traits.fine_tune:  # plain DP-FedAvg training, on the configured engine
            vector_to_parameters(theta.clone(), start.model.parameters())
            rows = clients_deltas(start.model, training, theta=theta, data=start.train, ids=ids, seed=cfg.seed, rnd=r)
        else:
            steps = bound.plan.config.local_steps + (self.head_steps if self.personal else 0)
            xs, ys = start.train.batches(ids, steps=steps, batch=bound.batch, seed=cfg.seed, rnd=r)
            local = dict(training=training, head_steps=self.head_steps, mask=self.mask)
            if cfg.model.engine == "vectorized":
                mine = None if heads is None else heads[torch.as_tensor(ids, device=bound.device)]
                rows, new_heads = client_updates_vectorized(start.model, theta, mine, xs, ys, **local)
                if heads is not None:
                    heads[torch.as_tensor(ids, device=bound.device)] = new_heads  # they stay on the clients
            else:
                updates = []
                for row, cid in enumerate(ids):
                    head = None if heads is None else heads[cid]
                    delta, new_head = client_update(self.scratch, theta, head, xs[row], ys[row], **local)
                    if heads is not None:
                        heads[cid] = new_head  # stays on the client
                    updates.append(delta)
                rows = torch.stack(updates) if updates else theta.new_zeros((0, int(self.shared.sum())))
        gen = noise_source(start.kind, seed=cfg.seed, rnd=r)
        update, stats = GroupAggregator(bound.spec).round(rows, group_of_row, source=gen, rnd=r)  # each group at σ_m

        def apply_update() -> None:
            self.theta = self.theta.clone()
            self.theta[self.shared] += update

        return stats, apply_update

    def evaluate(self, r: int, lr: float) -> dict[str, Any]:
        """Per client (its head, or its fine-tuned copy) or global, as the method says."""
        start, theta, traits = self.start, self.theta, self.traits
        model, x_test, y_test = start.model, start.x_test, start.y_test
        entry: dict[str, Any] = {"round": r + 1}
        vector_to_parameters(theta.clone(), model.parameters())
        if traits.fine_tune:
            entry["global_accuracy"], entry["global_loss"] = evaluate(model, x_test, y_test)
        if self.personal:
            self.client_scores, losses = evaluate_heads(model, theta, heads=self.heads, x_test=x_test, y_test=y_test,
                                                        dist=self.dist)  # fmt: skip
        elif traits.fine_tune:
            tune = dataclasses.replace(local_training(self.cfg, self.bound, lr=lr), steps=self.head_steps)
            self.client_scores, losses = evaluate_finetuned(model, theta, training=tune, data=start.train,
                                                            test=(x_test, y_test), dist=self.dist, seed=self.cfg.seed,
                                                            rnd=r)  # fmt: skip
        if traits.per_client_evaluation:
            entry["accuracy"], entry["loss"] = float(np.mean(self.client_scores)), float(np.mean(losses))
        else:
            entry["accuracy"], entry["loss"] = evaluate(model, x_test, y_test)
        return entry

    def metrics(self, log: RunLog, account: LedgerRun | None) -> dict[str, Any]:
        cfg, bound, traits, personal = self.cfg, self.bound, self.traits, self.personal
        plan, spec, rounds, kind = bound.plan, bound.spec, bound.rounds, self.start.kind
        c, head_steps, client_scores = plan.config, self.head_steps, self.client_scores
        mn = plan.method(METHOD_NAMES[cfg.method])
        d_shared = int(self.shared.sum())
        metrics = run_metrics(cfg, bound, d=int(self.theta.numel()), log=log, account=account)
        metrics.update(
            {
                "engine": cfg.model.engine,
                "partition": _partition_name(cfg),
                "d_shared": d_shared,
                "d_head": int(self.mask.sum()) if personal else 0,
                "head_steps": head_steps if traits.local_steps else None,
                "rho": self.rho if traits.sam else None,
                "clip": spec.clip,
                "evaluation": (
                    "per client: mean over the n clients of Σ_c p_i(c)·acc_i(c) (p_i = client i's training label "
                    "distribution, acc_i(c) = its model's accuracy on the test examples of class c)"
                    + ("; each client's model = global body + its own head" if personal else "")
                    + (
                        f"; each client's model = the global model fine-tuned {head_steps} SGD steps"
                        if not personal
                        else ""
                    )
                    if traits.per_client_evaluation
                    else "global: the global model on the whole test split"
                ),
                "client_accuracy": None
                if client_scores is None
                or kind == "secure"  # per-client statistics of non-private models: simulations only
                else {
                    "min": float(np.min(client_scores)),
                    "median": float(np.median(client_scores)),
                    "max": float(np.max(client_scores)),
                },
                "privacy_model": PRIVACY_MODEL,
                "epsilon_spent_max": max(e["epsilon_spent"] for e in metrics["epsilon_spent"]),
                "privacy": (
                    f"{PRIVACY_MODEL} (ε = {mn.epsilon[0]:g}, δ = {c.delta:.3g}) for every client: the plan's "
                    f"DP-FedAvg row (q = {mn.q[0]:.4g}, σ = {mn.noise_multiplier[0]:.4g}), {c.spending_accountant} "
                    f"accountant, for the {rounds} rounds run; covers the noisy {'body ' if personal else ''}updates "
                    "sent to the server"
                    + ("; personal heads never leave the clients" if personal else "")
                    + ("; fine-tuned copies never leave the clients" if traits.fine_tune else "")
                ),
                "noise_lambda_note": None
                if kind == "secure"
                else f"simulation diagnostics, per coordinate of the {d_shared} shared parameters "
                "the noise is added to",
                "groups": {
                    "size": list(spec.sizes),
                    "q": list(spec.q),
                    "noise_multiplier": list(spec.noise_multiplier),
                },
            }
        )
        return metrics


def _partition_name(cfg) -> str:
    if cfg.data.shards is not None:
        return f"pathological, {cfg.data.shards} classes per client"
    if cfg.data.dirichlet is not None:
        return f"Dirichlet({cfg.data.dirichlet:g})"
    return "natural" if cfg.data.dataset == "shakespeare" else "IID"
