"""What a method is: one frozen record per ``--method`` key, declared by the method's own module and
collected by :mod:`hdp_planner.methods.registry`, which the planner, ``verify``, the trainer, ``compare``, the audit
and Flower read instead of lists of their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import Plan
from hdp_planner.rules.noise import PaperWeights

REL_TOL = 1e-6
"""Relative tolerance of a row's checks against its definition (plan files round-trip to ~1e-12)."""


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL)


def all_close(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))


Family = Literal["fedavg", "personal", "selection"]
"""The trainer that runs a method: the FedAvg rounds of Algorithm 2 (:mod:`hdp_planner_train.simulator.trainer`),
the DP²-FedSAM family with personal heads (``personal``), or the selection paper's client selection (``selection``)."""


@dataclass(frozen=True, kw_only=True)
class RoundRules:
    """How the rounds of a plan row run (GDPFed Algorithm 1 and the baselines' variants, :mod:`~.rules.noise`).

    Args:
        sampling: Every group at the plan's q (``plan-q``) or at its own q_m (``per-group-q``).
        pooled: One noise draw for the sum of every group (else one per group).
        clip: The plan's C (``plan``) or a C_m per group (``per-group``).
        top_k: GDPFed+'s Top-k_m of each group's noisy sum.
        projection: PFA's projection of one group's noisy sum.
        schedule: σ changes over the rounds (phases).
        groups: The plan's groups (``plan``), or all n clients in one group noised for the strictest ε (``one``,
            DP-FedAvg).
    """

    sampling: Literal["plan-q", "per-group-q"]
    pooled: bool = False
    clip: Literal["plan", "per-group"] = "plan"
    top_k: bool = False
    projection: bool = False
    schedule: bool = False
    groups: Literal["plan", "one"] = "plan"

    @property
    def row_keys(self) -> frozenset[str]:
        """The optional keys of the row's ``noise`` entry in plan.json (and no other row may have them)."""
        flags = {"pooled": self.pooled, "clip": self.clip == "per-group", "projection": self.projection}
        return frozenset(k for k, on in {**flags, "schedule": self.schedule}.items() if on)


@dataclass(frozen=True, kw_only=True)
class PersonalTraits:
    """How a method of the DP²-FedSAM family trains (:mod:`hdp_planner_train.simulator.personal`).

    ``head``: each client keeps a personal head that never leaves it (DP²-FedSAM, Centaur); ``sam``: local steps
    are sharpness-aware, radius ``--rho`` (DP²-FedSAM, DP-FedSAM; else ρ = 0, plain SGD); ``fine_tune``: plain
    DP-FedAvg rounds, each client fine-tuning a copy of the global model before its evaluation (DP-FedAvg-FT)."""

    head: bool = False
    sam: bool = False
    fine_tune: bool = False

    @property
    def local_steps(self) -> bool:
        """``--head-steps`` applies: head steps, or fine-tuning steps."""
        return self.head or self.fine_tune

    @property
    def per_client_evaluation(self) -> bool:
        """Each client is evaluated with its own model (its head, or its fine-tuned copy)."""
        return self.head or self.fine_tune


@dataclass(frozen=True, kw_only=True)
class SelectionTraits:
    """How a method of the selection family picks clients (:mod:`hdp_planner_train.simulator.private_selection`).

    ``optimised``: the selection probabilities solve Problem 1 (``--eta`` applies; else the unbiased p^u);
    ``candidates``: power of choice, the K clients of highest reported loss among d candidates drawn from p, without
    replacement (``--candidates`` applies; else K clients drawn from p with replacement)."""

    optimised: bool = False
    candidates: bool = False


@dataclass(frozen=True, kw_only=True)
class Method:
    """One ``--method`` key: a new method is one module declaring ``METHODS = (Method(...),)`` and one entry in
    :data:`hdp_planner.methods.registry.MODULES` (see :mod:`hdp_planner` for an example).

    Args:
        key: The ``--method`` key (``gdpfed+``).
        row: The plan row (``noise`` entry) it trains from (``GDPFed+``).
        family: The trainer that runs it (:data:`Family`).
        rules: That row's round rules, declared by the one method that plans the row (None: the method trains from a
            row another method plans, e.g. p-fedavg from DP-FedAvg's).
        build: How the row is added to a solved plan (``(plan, BaselineOptions) -> MethodNoise``; None: one of the
            rows Problem 1's solver plans, :func:`hdp_planner.methods.gdpfed.solve_plan`).
        private: Whether it adds the row's noise.
        audit: ``train --audit`` covers it.
        flower: It runs on Flower.
        note: A note for the plan when the row is built (or None).
        check: Why a row departs from the method's own definition beyond its round rules, or None (``verify`` runs
            it in :func:`hdp_planner.planfile.mechanism.row_problems`).
        needs_model_dim: The row needs the model's d (``--model-dim``), so ``--methods all`` plans it only when d
            is given.
        in_all: Whether ``--methods all`` plans it for groups with these ε (None: always).
        personal: How a method of the personal family trains (required there, None elsewhere).
        selection: How a method of the selection family trains (required there, None elsewhere).
        paper_weights: The row's weights in GDPFed Table 5's Λ (``solve --lambda-convention paper``; None: Λ is
            exact for the row).

    Raises:
        ValueError: Family traits given for another family, or missing for their own.
    """

    key: str
    row: str
    family: Family = "fedavg"
    rules: RoundRules | None = None
    build: Callable[[Plan, BaselineOptions], MethodNoise] | None = None
    private: bool = True
    audit: bool = False
    flower: bool = False
    note: Callable[[Plan, BaselineOptions], str | None] | None = None
    check: Callable[[Plan, MethodNoise], str | None] | None = None
    needs_model_dim: bool = False
    in_all: Callable[[tuple[float, ...]], bool] | None = None
    personal: PersonalTraits | None = None
    selection: SelectionTraits | None = None
    paper_weights: PaperWeights | None = None

    def __post_init__(self) -> None:
        if (self.family == "personal") != (self.personal is not None):
            raise ValueError(f"method {self.key!r}: personal traits are for (and required by) the personal family")
        if (self.family == "selection") != (self.selection is not None):
            raise ValueError(f"method {self.key!r}: selection traits are for (and required by) the selection family")
