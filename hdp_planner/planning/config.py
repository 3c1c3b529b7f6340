"""What a plan depends on besides its groups: :class:`PlanConfig`, validated once."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.calibration import Accountant
from hdp_planner.accounting.validation import check_delta, check_ratio, check_rounds
from hdp_planner.planning.problem import SIGMA_MODELS, Coefficients, SigmaModel
from hdp_planner.rules.noise import LAMBDA_CONVENTIONS, LambdaConvention


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")


DEFAULT_MIN_SHARE = 0.5
"""``--min-share`` unless asked otherwise: every group's share of the update at least half its population's share,
so that no plan drops a group's clients from the model (the documentation's "Keeping every group" says why half;
0, the paper's Problem 1, only when asked)."""


@dataclass(frozen=True, kw_only=True)
class PlanConfig:
    """Everything a plan depends on besides the groups.

    Args:
        n: The number of clients.
        rounds: T, the training rounds.
        q: The sampling rate every group starts from (DP-FedAvg's, and the expected clients per round: q·n).
        delta: δ; None means δ = 1/n^1.1 (GDPFed B.2).
        clip: The clipping threshold C.
        lr: The learning rate (Problem 1's coefficients).
        local_steps: Local steps per round (Problem 1's coefficients).
        accountant: A registered accountant's name (:func:`~hdp_planner.accounting.accountants.accountant_names`).
        sigma_model: σ_m(q_m) in Problem 1: ``bound`` (Theorem 1, as Table 1) or ``accountant`` (the RDP σ,
            Algorithm 1's noise).
        lambda_convention: Λ: ``exact`` (the per-coordinate noise of the applied update) or ``paper`` (Table 5's).
        sparsity: Fixed k_m/d per group (None: Remark 3's closed form).
        fixed_q: Per-group q_m to evaluate instead of solving Problem 1 (None: solve it).
        min_share: F in [0, 1]: every group's weight share α_m ≥ F·|G_m|/n for HDP-Pooled and Problem 1, and the
            recommendation considers only rows that meet it (:data:`DEFAULT_MIN_SHARE`; 0: the paper's Problem 1).
        large_delta: Accept δ ≥ 1/n (see the attribute).

    Raises:
        ValueError: A value out of range, or an unregistered accountant.
    """

    n: int
    rounds: int = 50
    q: float = 0.02
    delta: float | None = None
    clip: float = 1.0
    lr: float = 0.1
    local_steps: int = 5
    accountant: Accountant = "rdp"
    sigma_model: SigmaModel = "bound"
    lambda_convention: LambdaConvention = "exact"
    sparsity: tuple[float, ...] | None = None
    fixed_q: tuple[float, ...] | None = None
    min_share: float = DEFAULT_MIN_SHARE
    large_delta: bool = False
    """Accept δ ≥ 1/n (refused otherwise: such a δ allows a mechanism that publishes one client's data outright
    with probability δ, i.e. about one client of n in the clear)."""

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive integer, got {self.n}")
        check_rounds(self.rounds)
        check_ratio(self.q)
        if self.delta is None:
            object.__setattr__(self, "delta", self.n**-1.1)
        check_delta(self.delta)
        if self.delta >= 1 / self.n and not self.large_delta:
            raise ValueError(
                f"delta={self.delta:g} is not below 1/n = {1 / self.n:g}: a δ that large allows releasing about one "
                f"client's data in the clear; use δ < 1/n (default 1/n^1.1) or accept it with --allow-large-delta"
            )
        _positive("clip", self.clip)
        _positive("lr", self.lr)
        if isinstance(self.local_steps, bool) or not isinstance(self.local_steps, int) or self.local_steps < 1:
            raise ValueError(f"local steps must be a positive integer, got {self.local_steps}")
        get_accountant(self.accountant)  # a registered name
        if self.sigma_model not in SIGMA_MODELS:
            raise ValueError(f"sigma model must be one of {', '.join(SIGMA_MODELS)}, got {self.sigma_model!r}")
        if self.lambda_convention not in LAMBDA_CONVENTIONS:
            raise ValueError(
                f"lambda convention must be one of {', '.join(LAMBDA_CONVENTIONS)}, got {self.lambda_convention!r}"
            )
        for k in self.sparsity or ():
            if not (isinstance(k, (int, float)) and 0 < k <= 1):
                raise ValueError(f"every sparsity k_m/d must lie in (0, 1], got {k}")
        for qm in self.fixed_q or ():
            check_ratio(qm, name="every fixed q_m")
        f = self.min_share
        if isinstance(f, bool) or not (isinstance(f, (int, float)) and 0 <= f <= 1):
            raise ValueError(
                f"min share F must lie in [0, 1] (F = 1: every group's weight share at least its population share; "
                f"above 1 the shares cannot sum to 1), got {f}"
            )

    @property
    def coefficients(self) -> Coefficients:
        return Coefficients(lr=self.lr, local_steps=self.local_steps)

    @property
    def spending_accountant(self) -> Accountant:
        """The accountant that measures ε: a closed-form σ is measured exactly, with RDP."""
        return get_accountant(self.accountant).spending  # type: ignore[return-value]
