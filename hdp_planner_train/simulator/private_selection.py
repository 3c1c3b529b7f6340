"""Privacy-aware client selection in the trainer, with its paper's two baselines (``hdp-plan train --method``).

**Privacy model**: record-level (ε_k, δ)-DP for every client k on its own examples (add/remove one example), the
model of :mod:`hdp_planner.methods.selection`. Each client takes the ε of its plan group (clients join the plan's
groups in order of the group sizes) and its data size |M_k| from the partition.

- ``privacy-aware``: selection probabilities p from Problem 1 (:func:`hdp_planner.methods.selection.solve_selection`);
- ``unbiased``: p = p^u ∝ |M_k| (eq. 5);
- ``power-of-choice`` (Cho et al. 2022, the paper's "biased" baseline): every round, d candidates drawn ∝ |M_k|
  without replacement; the K with the highest local loss of the global model train.

Every round K clients are drawn from p *with replacement* (a client drawn twice trains twice, as two virtual clients
with independent batches and noise). As Algorithm 1 (lines 3-4), all rounds' selections are drawn up front from the
seed (:func:`.selection_setup.preselect`) and every client's noise is calibrated for its realized count T_k: T_k·τ
local DP-SGD steps, each a Poisson sample of its examples at rate r_k = min(1, B/|M_k|), per-example gradients
clipped to C, N(0, z_k²C²) added to the clipped sum, divided by the expected batch r_k|M_k|
(:func:`.dp_sgd.noisy_mean_gradient`): the mechanism :func:`hdp_planner.methods.selection.record_noise_multiplier`
accounts for. ``--noise-rule paper`` (default, the method as published) takes z_k from eqs. 6-7, ``exact`` from the
RDP accountant (several times less noise); both are recorded, and the ε each client spent is measured with the exact
(RDP) accountant for the steps it ran; a setting whose noise would exceed a budget is refused.
Power-of-choice's selections depend on the model, so its noise is calibrated for the number of rounds a client is a
*candidate* (drawn up front too), an upper bound on its participations; its loss reports are not privatized (as in
the paper's baseline), so its ε covers the DP-SGD updates only. The server averages the K updates (Algorithm 1,
line 8): with selection ∝ p this is unbiased for Σ_k p_k f_k (eq. 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import vector_to_parameters

from hdp_planner.methods.registry import REGISTRY
from hdp_planner.methods.selection import PRIVACY_MODEL, SelectionProblem
from hdp_planner.rules.noise import SecureRandom
from hdp_planner_train.learning.dp_sgd import (
    ClientSGD,
    dp_sgd_client,
    noise_coefficients,
    per_example_grads,
    poisson_batches,
)
from hdp_planner_train.learning.models import model_name
from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.rules.aggregate import RoundStats
from hdp_planner_train.rules.noise_sources import noise_source
from hdp_planner_train.rules.sampling import round_seed
from hdp_planner_train.run.bound import BoundRun
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.ledger import LedgerRun
from hdp_planner_train.run.noise import SECURE_NOTE, SEEDED_NOTE
from hdp_planner_train.simulator.scaffold import RunStart, TrainConfig
from hdp_planner_train.simulator.selection_setup import (
    ACCOUNTANT,
    DEFAULT_ETA,
    SELECTION_METHODS,
    ClientPrivacy,
    calibrate_clients,
    candidate_sets,
    check_budgets,
    check_selection_options,
    client_groups,
    preselect,
    selection_probabilities,
    selection_problem,
)
from hdp_planner_train.simulator.template import FamilyRun

__all__ = ["SELECTION_METHODS", "Selection", "SelectionRun", "check_selection_options", "client_losses",
           "power_of_choice", "selection_metrics"]  # fmt: skip


@torch.no_grad()
def client_losses(
    model: nn.Module, theta: torch.Tensor, *, x: torch.Tensor, y: torch.Tensor, clients: list[np.ndarray], ids
) -> np.ndarray:
    """Mean cross-entropy of the model θ on each client's examples (power-of-choice's selection signal).

    Args:
        model: the model (its parameters are set to θ).
        theta: θ, the flat parameters.
        x: all inputs.
        y: all labels.
        clients: every client's example positions.
        ids: the clients to evaluate.

    Returns:
        The loss of every client in ``ids``.
    """
    vector_to_parameters(theta.clone(), model.parameters())
    out = []
    for k in ids:
        idx = torch.as_tensor(clients[int(k)], device=x.device)
        out.append(float(F.cross_entropy(model(x[idx]), y[idx])))
    return np.asarray(out)


def power_of_choice(losses: np.ndarray, candidates: np.ndarray, *, per_round: int) -> np.ndarray:
    """Power-of-choice's selection: the candidates with the highest loss (ties: the earlier candidate).

    Args:
        losses: every candidate's loss.
        candidates: the round's candidates.
        per_round: K.

    Returns:
        The K selected client ids.
    """
    order = np.argsort(-np.asarray(losses), kind="stable")[:per_round]
    return np.asarray(candidates)[order]


class SelectionRun(FamilyRun):
    """The hooks of :data:`SELECTION_METHODS` for :func:`~.template.run_family`: every client's noise calibrated and
    checked against its budget before training (a setting that would exceed one is refused: TrainError), K clients
    drawn each round with replacement, each running its record-level DP-SGD. Not charged to the privacy ledger
    (example-level DP) and never checkpointed (its noise is calibrated for the whole run). Its metrics: the privacy
    model, the selection probabilities and every client's noise and ε spent besides the accuracy.

    Args:
        cfg: The run's configuration.
        bound: The run bound to its plan (each client takes its group's ε): its data, rounds, B (the expected local
            batch), local SGD momentum and device.
    """

    ledger = False
    checkpoints = False

    def __init__(self, cfg: TrainConfig, bound: BoundRun) -> None:
        super().__init__(cfg, bound)
        plan, data, rounds = bound.plan, bound.data, bound.rounds
        c, n, traits = plan.config, data.n_clients, REGISTRY[cfg.method].selection
        opts = cfg.selection
        rule = opts.noise_rule or "paper"
        per_round = int(opts.per_round or max(1, round(c.q * n)))
        self.per_round = per_round
        self.d_cand = int(opts.candidates or min(n, 2 * per_round)) if traits.candidates else None
        if self.d_cand is not None and not per_round <= self.d_cand <= n:
            raise TrainError(f"--candidates d must lie between K = {per_round} clients per round and n = {n}, got "
                             f"{self.d_cand}")  # fmt: skip
        eta = float(opts.eta if opts.eta is not None else DEFAULT_ETA)
        try:
            problem = selection_problem(plan, data.clients, rounds=rounds, per_round=per_round, batch=bound.batch,
                                        eta=eta)  # fmt: skip
            p, solution = selection_probabilities(problem, traits)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
        group, _ = client_groups(plan, n)
        if traits.candidates:
            self.cand = candidate_sets(p, rounds=rounds, candidates=self.d_cand, seed=cfg.seed)
            counts = np.bincount(self.cand.ravel(), minlength=n)
            self.chosen = None
        else:
            self.chosen = preselect(p, rounds=rounds, per_round=per_round, seed=cfg.seed)
            counts = np.bincount(self.chosen.ravel(), minlength=n)
        privacy = calibrate_clients(problem, counts, rule, group)
        check_budgets(privacy, counts * c.local_steps, delta=float(c.delta), rule=rule)  # before training: refuse
        self.selection = Selection(problem=problem, solution=solution, p=p, privacy=privacy,
                                   participations=np.zeros(n, dtype=np.int64))  # fmt: skip
        self.lam_planned: list[float] = []
        self.selected: list[list[int]] = []

    def begin(self, start: RunStart) -> tuple[()]:
        """Per-example gradients of the model, and Σ_s c_s² of its local steps' noise."""
        super().begin(start)  # secure: noise and batches from the CSPRNG
        c = self.bound.plan.config
        self.grad_fn = per_example_grads(start.model)
        self.sigma = self.selection.privacy.sigma(c.clip)
        self.coef2 = float(np.sum(noise_coefficients(steps=c.local_steps, momentum=self.bound.momentum) ** 2))
        return ()

    def step(self, r: int, lr: float):
        cfg, bound, start, theta = self.cfg, self.bound, self.start, self.theta
        c, data, privacy = bound.plan.config, bound.data, self.selection.privacy
        if self.chosen is None:
            losses = client_losses(start.model, theta, x=start.x_train, y=start.y_train, clients=data.clients,
                                   ids=self.cand[r])  # fmt: skip
            ids = power_of_choice(losses, self.cand[r], per_round=self.per_round)
        else:
            ids = self.chosen[r]
        rng = SecureRandom() if start.kind == "secure" else np.random.default_rng(round_seed(cfg.seed, rnd=r, stream=1))
        gen = noise_source(start.kind, seed=cfg.seed, rnd=r)
        total = torch.zeros_like(theta)
        noise_total = torch.zeros_like(theta)
        for k in ids:
            k = int(k)
            own = torch.as_tensor(data.clients[k], device=bound.device)
            batches = poisson_batches(rng, size=len(own), rate=float(privacy.rates[k]), steps=c.local_steps)
            sgd = ClientSGD(clip=c.clip, multiplier=float(privacy.multiplier[k]), lr=lr, momentum=bound.momentum,
                            expected_batch=float(privacy.rates[k] * privacy.sizes[k]))  # fmt: skip
            delta, noise = dp_sgd_client(self.grad_fn, theta, start.x_train[own], start.y_train[own], batches, sgd=sgd,
                                         source=gen)  # fmt: skip
            total += delta
            noise_total += noise
        self.selection.participations[:] += np.bincount(ids, minlength=data.n_clients)
        measured = float(torch.sum((noise_total / len(ids)).double() ** 2)) / theta.numel()
        self.lam_planned.append(lr**2 * self.coef2 * float(np.sum(self.sigma[ids] ** 2)) / len(ids) ** 2)
        self.selected.append(ids.tolist())

        def apply_update() -> None:
            self.theta = self.theta + total / len(ids)
            vector_to_parameters(self.theta.clone(), start.model.parameters())

        return RoundStats(joined=[len(ids)], clipped=0, lambda_measured=measured, lambda_applied=measured), apply_update

    def describe(self, done: int, entry: dict[str, Any]) -> str:
        return f"round {done}/{self.bound.rounds} acc {entry['accuracy']:.2f}% loss {entry['loss']:.3f}"

    def metrics(self, log: RunLog, account: LedgerRun | None) -> dict[str, Any]:
        cfg, bound, kind, history = self.cfg, self.bound, self.start.kind, log.history
        c, chosen = bound.plan.config, self.selection
        spent = check_budgets(chosen.privacy, chosen.participations * c.local_steps, delta=float(c.delta),
                              rule=chosen.privacy.rule)  # fmt: skip
        metrics = selection_metrics(cfg, bound, chosen, spent=spent)
        metrics.update(
            {
                "device": str(bound.device),
                "rounds": bound.rounds,
                "model": model_name(cfg.data.dataset, cfg.model.name),
                "d": int(self.theta.numel()),
                "batch_size": bound.batch,
                "momentum": bound.momentum,
                "candidates": self.d_cand,
                "final_accuracy": history[-1]["accuracy"] if history else None,
                "final_loss": history[-1]["loss"] if history else None,
                "history": history,
                "noise_source": kind,
                "noise_note": SEEDED_NOTE if kind == "seeded" else SECURE_NOTE,
                "ledger": "not charged: example-level DP (the privacy ledger composes client-level runs)",
                "noise_lambda_planned": float(np.mean(self.lam_planned)),
                "noise_lambda_note": (
                    "per coordinate, mean over rounds: measured = ‖(1/K)Σ_j noise part of Δ_j‖²/d (local DP-SGD noise "
                    "carried by the applied update); planned = its expectation lr²Σ_s c_s²Σ_j σ_j²/K² at the "
                    "selections"
                ),
                "selected": self.selected,
                "plan_sha256": bound.run_plan.sha256,
            }
        )
        if kind == "seeded":  # simulation diagnostics: the noise actually drawn and the round times
            metrics.update(
                {
                    "noise_lambda_measured": float(np.mean(log.lambda_measured)),
                    "round_seconds": log.round_seconds,
                    "round_seconds_median": float(np.median(log.round_seconds)),
                }
            )
        return metrics


@dataclass(frozen=True, kw_only=True)
class Selection:
    """How a selection run picks and noises its clients, and how often each took part.

    Args:
        problem: Problem 1.
        solution: Its solution, or None (the baselines).
        p: The selection probabilities.
        privacy: Every client's noise.
        participations: Every client's selections so far (counted in place by the rounds).
    """

    problem: SelectionProblem
    solution: Any
    p: np.ndarray
    privacy: ClientPrivacy
    participations: np.ndarray


def selection_metrics(cfg: TrainConfig, bound: BoundRun, selection: Selection, *, spent: np.ndarray) -> dict[str, Any]:
    """The method's settings, every client's noise and ε spent, and the per-group summary (min/max over clients).

    Args:
        cfg: The run's configuration.
        bound: The run bound to its plan.
        selection: Its selection and participations.
        spent: Every client's ε spent.

    Returns:
        The selection part of metrics.json.
    """
    plan, data = bound.plan, bound.data
    problem, solution, p = selection.problem, selection.solution, selection.p
    privacy, participations = selection.privacy, selection.participations
    c, traits = plan.config, REGISTRY[cfg.method].selection
    z_ratio = np.divide(privacy.multiplier_paper, privacy.multiplier_exact, out=np.zeros(len(p)),
                        where=privacy.multiplier_exact > 0)  # fmt: skip
    clients = [
        {
            "client": k,
            "group": int(privacy.group[k]) + 1,
            "epsilon_budget": float(privacy.epsilon[k]),
            "num_samples": int(privacy.sizes[k]),
            "sample_rate": float(privacy.rates[k]),
            "p": float(p[k]),
            "p_unbiased": float(problem.unbiased[k]),
            "calibrated_selections": int(privacy.counts[k]),
            "selections": int(participations[k]),
            "noise_multiplier_paper": float(privacy.multiplier_paper[k]),
            "noise_multiplier_exact": float(privacy.multiplier_exact[k]),
            "sigma_paper": float(privacy.multiplier_paper[k] * c.clip / (privacy.rates[k] * privacy.sizes[k])),
            "sigma_exact": float(privacy.multiplier_exact[k] * c.clip / (privacy.rates[k] * privacy.sizes[k])),
            "epsilon_spent": float(spent[k]),
        }
        for k in range(len(p))
    ]
    groups = []
    for m, e in enumerate(plan.groups.epsilon):
        members = np.flatnonzero(privacy.group == m)
        used = members[participations[members] > 0]
        groups.append(
            {
                "group": m + 1,
                "epsilon_budget": float(e),
                "clients": len(members),
                "clients_trained": len(used),
                "epsilon_spent": float(spent[members].max()) if len(members) else 0.0,
                "epsilon_spent_min": float(spent[members].min()) if len(members) else 0.0,
                "epsilon_spent_max": float(spent[members].max()) if len(members) else 0.0,
                "p_sum": float(p[members].sum()),
                "p_unbiased_sum": float(problem.unbiased[members].sum()),
                "noise_multiplier_paper_median": float(np.median(privacy.multiplier_paper[used])) if len(used) else 0.0,
                "noise_multiplier_exact_median": float(np.median(privacy.multiplier_exact[used])) if len(used) else 0.0,
            }
        )
    return {
        "method": cfg.method,
        "plan_method": "GDPFed+ groups (each client's ε is its group's)",
        "dataset": cfg.data.dataset,
        "engine": "per-example DP-SGD (torch.func vmap(grad)), one selected client after the other",
        "seed": cfg.seed,
        "plan_rounds": c.rounds,
        "clients": data.n_clients,
        "clients_per_round": problem.clients_per_round,
        "lr": c.lr,
        "lr_decay": cfg.model.lr_decay,
        "local_steps": c.local_steps,
        "clip": c.clip,
        "delta": float(c.delta),
        "privacy_model": PRIVACY_MODEL,
        "noise_rule": privacy.rule,
        "accountant": ACCOUNTANT,
        "privacy": (
            f"record-level (ε_k, δ={c.delta:.3g})-DP per client on its own examples; ε spent measured by the exact "
            f"RDP accountant for the steps each client ran; noise rule {privacy.rule}"
            + (
                "; the loss reports that drive power-of-choice's selection are not privatized"
                if traits.candidates
                else ""
            )
        ),
        "selection": {
            "eta": problem.eta if traits.optimised else None,
            "objective": solution.objective if solution is not None else problem.objective(p),
            "unbiased_objective": problem.objective(problem.unbiased),
            "kkt_residual": solution.kkt_residual if solution is not None else None,
            "with_replacement": not traits.candidates,
            "noise_calibrated_for": (
                "candidate rounds (upper bound on participations)"
                if traits.candidates
                else "realized selection counts (preselected from the seed)"
            ),
            "paper_over_exact_multiplier_median": float(np.median(z_ratio[z_ratio > 0])) if np.any(z_ratio) else None,
        },
        "epsilon_spent": groups,
        "client_privacy": clients,
        "iid_share": cfg.data.iid_share,
    }
