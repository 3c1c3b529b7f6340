"""Privacy-aware client selection under heterogeneous record-level budgets (the selection paper, Xu, Zhang and Huang,
"Tackling privacy heterogeneity in differentially private federated learning").

**Privacy model: record-level (ε_k, δ)-DP for each client k on its own data** (Definition 1): every selected
client runs DP-SGD locally (Algorithm 1, lines 12-17: sample a batch, clip each example's gradient to C,
average, add N(0, σ_k²I)). Clients are selected *with replacement*, N^select = K per round with probabilities
p (Section III-C 2); a client drawn twice in a round trains twice, as two virtual clients with independent
batches and noise, so its selection count T_k counts multiplicities.

**Problem 1** (Section V-A), the selection probabilities:

    min_p  ‖p − p^u‖₁ + sqrt(‖p − p^u‖₁² + η Σ_k p_k² V_k)   s.t.  Σ_k p_k = 1, p ≥ 0,

with p^u_k = |M_k|/Σ_i|M_i| the unbiased selection (eq. 5) and V_k the noise factor of eq. (7). The printed
problem writes η Σ p_k² D V_k with η = D√T L; we take η as the single weight of Σ p_k² V_k (Theorem 2's
non-vanishing term has D√T L V_k, so the extra D would count the model dimension twice). It is convex
(Proposition 1) and is solved with cvxpy in DCP form through an epigraph variable u ≥ ‖p − p^u‖₁:
min u + ‖(u, √(ηV) ∘ p)‖₂, where the norm is increasing in u ≥ 0, so u is tight at the optimum.
At the optimum every p_k > 0 (Proposition 2), and p = p^u exactly when η ≤ η* (see
:attr:`SelectionProblem.unbiased_threshold`).

The record-level noise rules (eqs. 6-7, and the exact RDP alternative) are in :mod:`.selection_noise`, reading
the client table in :mod:`.selection_clients`.

Baselines: ``unbiased`` is p = p^u (:attr:`SelectionProblem.unbiased`); ``power-of-choice`` (highest local loss
among d candidates) needs losses and is the trainer's.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from hdp_planner.accounting.calibration import GaussianRounds, epsilon_spent
from hdp_planner.accounting.validation import check_delta
from hdp_planner.methods.method import Method, SelectionTraits
from hdp_planner.methods.selection_clients import CSV_COLUMNS, read_clients
from hdp_planner.methods.selection_noise import (
    COUNT_RULE,
    SELECTION_FAILURE,
    NoiseRule,
    check_count,
    inverse_subsampled_epsilon,
    paper_noise_factor,
    record_noise_multiplier,
    selection_counts,
)

__all__ = [
    "ACCOUNTANTS",
    "COUNT_RULE",
    "CSV_COLUMNS",
    "METHODS",
    "NOISE_REPORTS",
    "PRIVACY_MODEL",
    "SELECTION_FAILURE",
    "ClientNoise",
    "NoiseReport",
    "NoiseRule",
    "SelectionProblem",
    "SelectionSolution",
    "client_noise",
    "config_dict",
    "inverse_subsampled_epsilon",
    "kkt_residual",
    "paper_noise_factor",
    "read_clients",
    "record_noise_multiplier",
    "selection_counts",
    "solve_selection",
]

Accountant = Literal["paper", "exact", "both"]


@dataclass(frozen=True, kw_only=True)
class NoiseReport:
    """Which record-level noise multipliers ``select --accountant`` reports: the paper's rule, the exact RDP σ, or
    both (then also the ε the paper's σ truly spends)."""

    paper: bool
    exact: bool


NOISE_REPORTS: dict[str, NoiseReport] = {
    "paper": NoiseReport(paper=True, exact=False),
    "exact": NoiseReport(paper=False, exact=True),
    "both": NoiseReport(paper=True, exact=True),
}
ACCOUNTANTS: tuple[str, ...] = tuple(NOISE_REPORTS)
PRIVACY_MODEL = (
    "record-level (ε_k, δ)-DP for each client k on its own examples (add/remove one example); "
    "local DP-SGD with per-example clipping, clients selected with replacement"
)
_SOLVER_TOL = 1e-12  # Clarabel's gap and feasibility tolerances (1e-10 left p 1.6e-5 off in near-flat instances)
_GOOD_KKT = 1e-6  # a residual above this triggers the second, rescaled solve


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")


@dataclass(frozen=True, kw_only=True)
class SelectionProblem:
    """The inputs of the paper's Problem 1 and noise rule. Defaults are the paper's where it states them: δ = 10⁻⁵,
    K = N^select = 10 clients per round (Section VI-C), r = 0.1 for every client (Fig. 3; ``batch_size`` B gives
    r_k = min(1, B/|M_k|) instead, B = 128 in Tables III-IV). The paper states neither T^g, T^l, C nor η; ours
    are T^g = 100, T^l = 5, C = 1 and η = 10⁵ (about 200 η* on ``examples/clients.csv``, where p/p^u then spans
    0.05 to 1.8; η ≤ η* gives p = p^u)."""

    epsilon: tuple[float, ...]
    num_samples: tuple[int, ...]
    delta: float = 1e-5
    sample_rate: float = 0.1
    batch_size: int | None = None
    clients_per_round: int = 10
    rounds: int = 100
    local_steps: int = 5
    clip: float = 1.0
    eta: float = 1e5

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", tuple(float(e) for e in self.epsilon))
        if not self.epsilon:
            raise ValueError("no clients")
        if len(self.epsilon) != len(self.num_samples):
            raise ValueError(f"{len(self.epsilon)} budgets for {len(self.num_samples)} dataset sizes")
        for e in self.epsilon:
            if not (math.isfinite(e) and e > 0):
                raise ValueError(f"every epsilon must be positive and finite, got {e}")
        for m in self.num_samples:
            check_count("every num_samples", m)
        object.__setattr__(self, "num_samples", tuple(int(m) for m in self.num_samples))
        check_delta(self.delta)
        if not (isinstance(self.sample_rate, (int, float)) and 0 < self.sample_rate <= 1):
            raise ValueError(f"sample rate must lie in (0, 1], got {self.sample_rate}")
        if self.batch_size is not None:
            check_count("batch size", self.batch_size)
        check_count("clients per round", self.clients_per_round)
        check_count("rounds", self.rounds)
        check_count("local steps", self.local_steps)
        _check_positive("clip", self.clip)
        _check_positive("eta", self.eta)

    @property
    def count(self) -> int:
        return len(self.epsilon)

    @property
    def rates(self) -> np.ndarray:
        """r_k: each local step's example sampling rate."""
        sizes = np.asarray(self.num_samples, dtype=float)
        if self.batch_size is None:
            return np.full(self.count, float(self.sample_rate))
        return np.minimum(1.0, self.batch_size / sizes)

    @property
    def unbiased(self) -> np.ndarray:
        """p^u_k = |M_k|/Σ_i|M_i| (eq. 5): the unbiased baseline."""
        sizes = np.asarray(self.num_samples, dtype=float)
        return sizes / sizes.sum()

    @property
    def noise_factor(self) -> np.ndarray:
        """V_k of eq. (7)."""
        return paper_noise_factor(self.epsilon, self.delta, self.num_samples, self.rates)

    @property
    def unbiased_dp_term(self) -> float:
        """Σ_k (p^u_k)² V_k: the DP term of Problem 1 at the unbiased baseline p = p^u."""
        return float(np.sum(self.unbiased**2 * self.noise_factor))

    @property
    def unbiased_threshold(self) -> float:
        """η* = 4 Σ_k V_k (p^u_k)² / (max_k p^u_k V_k − min_k p^u_k V_k)²: p = p^u is optimal iff η ≤ η*
        (KKT at p^u with ‖p − p^u‖₁ = 0; infinite when every p^u_k V_k is equal)."""
        pu, v = self.unbiased, self.noise_factor
        spread = float(np.ptp(pu * v))
        return math.inf if spread == 0 else 4.0 * float(np.sum(v * pu * pu)) / spread**2

    def objective(self, p: Sequence[float] | np.ndarray) -> float:
        """Problem 1's objective at selection probabilities ``p``."""
        p = np.asarray(p, dtype=float)
        gap = float(np.abs(p - self.unbiased).sum())
        return gap + math.sqrt(gap * gap + self.eta * float(np.sum(self.noise_factor * p * p)))


@dataclass(frozen=True, kw_only=True)
class SelectionSolution:
    """Problem 1's optimum p, its objective and the unbiased p^u's, and the KKT residual of the solver's
    primal-dual point (0 at an exact optimum; see :func:`solve_selection`)."""

    problem: SelectionProblem
    p: tuple[float, ...]
    objective: float
    unbiased_objective: float
    kkt_residual: float

    @property
    def selection_gap(self) -> float:
        """‖p − p^u‖₁ (eq. 15 without the clipping gap)."""
        return float(np.abs(np.asarray(self.p) - self.problem.unbiased).sum())


def kkt_residual(problem: SelectionProblem, *, p: np.ndarray, nu: float, lam: float, mu: np.ndarray) -> float:
    """Largest relative violation of Problem 1's KKT conditions at ``p`` with multipliers ν (Σp = 1),
    λ (u ≥ ‖p − p^u‖₁) and μ (p ≥ 0); 0 at an exact optimum.

    With t = ‖p − p^u‖₁, R = sqrt(t² + ηΣV p²) and b_k = ηV_k p_k/R (the gradient of the square root),
    stationarity in u is λ = 1 + t/R, and in p_k it is b_k + λ s_k + ν − μ_k = 0 with s_k a subgradient of
    |p_k − p^u_k|: g_k = μ_k − ν − b_k must satisfy |g_k| ≤ λ and Σ g_k (p_k − p^u_k) = λt. With every
    p_k > 0 (Proposition 2), complementary slackness gives μ = 0. Violations in p are relative to λ + max b.
    """
    w = problem.eta * problem.noise_factor
    d = p - problem.unbiased
    t = float(np.abs(d).sum())
    r = math.sqrt(t * t + float(np.sum(w * p * p)))
    b = w * p / r
    g = mu - nu - b
    scale = lam + float(b.max())
    return max(
        (float(np.abs(g).max()) - lam) / scale,
        abs(float(g @ d) - lam * t) / scale,
        abs(lam - (1.0 + t / r)) / lam,
        float(np.abs(mu).max()) / scale,
        0.0,
    )


def _solve_scaled(problem: SelectionProblem, scale: float) -> tuple[np.ndarray, float] | None:
    """One cvxpy solve of Problem 1 with the objective divided by ``scale``: p and its KKT residual, or None."""
    import cvxpy as cp

    pu, w = problem.unbiased, problem.eta * problem.noise_factor
    p, u = cp.Variable(problem.count), cp.Variable()  # u ≥ ‖·‖₁ ≥ 0 already: a bound on u would change λ
    constraints = [cp.sum(p) == 1, cp.norm1(p - pu) <= u, p >= 0]
    cost = (u + cp.norm(cp.hstack([u, cp.multiply(np.sqrt(w), p)]), 2)) / scale
    cvx = cp.Problem(cp.Minimize(cost), constraints)
    with warnings.catch_warnings():  # "may be inaccurate": judged by the KKT residual instead
        warnings.simplefilter("ignore", UserWarning)
        try:
            cvx.solve(solver=cp.CLARABEL, tol_gap_abs=_SOLVER_TOL, tol_gap_rel=_SOLVER_TOL, tol_feas=_SOLVER_TOL)
        except cp.error.SolverError:
            return None
    if cvx.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or p.value is None:
        return None
    x = np.clip(np.asarray(p.value, dtype=float), 0.0, None)
    x = x / x.sum()
    nu, lam = (scale * float(c.dual_value) for c in constraints[:2])
    return x, kkt_residual(problem, p=x, nu=nu, lam=lam, mu=scale * np.asarray(constraints[2].dual_value, dtype=float))


def solve_selection(problem: SelectionProblem) -> SelectionSolution:
    """Solve Problem 1 with cvxpy (Clarabel) in the epigraph form min u + ‖(u, √(ηV)∘p)‖₂ subject to
    ‖p − p^u‖₁ ≤ u, Σp = 1, p ≥ 0, and report :func:`kkt_residual` at the solver's multipliers.

    If the residual exceeds ``_GOOD_KKT`` (η far above η* makes the problem badly scaled), it is solved again
    with the objective divided by its value at p^u, and the point with the smaller residual is kept. One
    client is always selected: p = (1,).
    """
    pu = problem.unbiased
    if problem.count == 1:
        return SelectionSolution(
            problem=problem,
            p=(1.0,),
            objective=problem.objective(pu),
            unbiased_objective=problem.objective(pu),
            kkt_residual=0.0,
        )
    best: tuple[np.ndarray, float] | None = None
    for scale in (1.0, problem.objective(pu)):
        found = _solve_scaled(problem, scale)
        if found is not None and (best is None or found[1] < best[1]):
            best = found
        if best is not None and best[1] <= _GOOD_KKT:
            break
    if best is None:
        raise ValueError("Problem 1: the solver failed (Clarabel found no optimum)")
    x, residual = best
    if np.any(x <= 0):  # Proposition 2: never at an optimum
        raise ValueError("Problem 1: the solver returned a zero selection probability")
    return SelectionSolution(
        problem=problem,
        p=tuple(float(v) for v in x),
        objective=problem.objective(x),
        unbiased_objective=problem.objective(pu),
        kkt_residual=residual,
    )


@dataclass(frozen=True, kw_only=True)
class ClientNoise:
    """Each client's local DP-SGD noise at selection probabilities p: T_k, the noise multiplier z_k by the
    paper's rule, by the exact accountant (accountant ``exact`` or ``both``), and the ε that the exact accountant
    measures for the paper's z_k (``both``). σ_k = z_k·C/(r_k|M_k|) is the std on the averaged clipped
    gradient (Algorithm 1, line 17)."""

    problem: SelectionProblem
    accountant: Accountant
    p: tuple[float, ...]
    selections: tuple[int, ...]
    multiplier_paper: tuple[float, ...]
    multiplier_exact: tuple[float, ...] | None
    epsilon_of_paper: tuple[float, ...] | None

    @property
    def report(self) -> NoiseReport:
        return NOISE_REPORTS[self.accountant]

    def sigma(self, rule: NoiseRule) -> np.ndarray:
        z = self.multiplier_paper if rule == "paper" else self.multiplier_exact
        if z is None:
            raise ValueError("the exact noise was not computed (accountant 'paper')")
        batch = np.asarray(self.problem.num_samples, dtype=float) * self.problem.rates
        return np.asarray(z) * self.problem.clip / batch

    @property
    def dp_term(self) -> float:
        """Σ_k p_k² V_k: Problem 1's DP error term (G^DP of eq. 16 without D) at these p."""
        return float(np.sum(np.asarray(self.p) ** 2 * self.problem.noise_factor))


def client_noise(problem: SelectionProblem, p: Sequence[float] | np.ndarray, accountant: Accountant) -> ClientNoise:
    """Per-client noise at selection probabilities ``p`` (Problem 1's optimum, or p^u for the baseline)."""
    if accountant not in NOISE_REPORTS:
        raise ValueError(f"unknown accountant {accountant!r}; choose one of {', '.join(ACCOUNTANTS)}")
    report = NOISE_REPORTS[accountant]
    counts = selection_counts(p, rounds=problem.rounds, clients_per_round=problem.clients_per_round)
    steps = [int(c) * problem.local_steps for c in counts]
    rates = problem.rates.tolist()
    args = list(zip(problem.epsilon, rates, steps))
    paper = tuple(record_noise_multiplier(e, delta=problem.delta, rate=r, steps=n, rule="paper") for e, r, n in args)
    exact = spent = None
    if report.exact:
        exact = tuple(
            record_noise_multiplier(e, delta=problem.delta, rate=r, steps=n, rule="exact") for e, r, n in args
        )
    if report.paper and report.exact:
        spent = tuple(
            epsilon_spent(GaussianRounds(noise_multiplier=z, q=r, rounds=n), delta=problem.delta)
            for z, (_, r, n) in zip(paper, args)
        )
    return ClientNoise(
        problem=problem,
        accountant=accountant,
        p=tuple(float(v) for v in p),
        selections=tuple(int(c) for c in counts),
        multiplier_paper=paper,
        multiplier_exact=exact,
        epsilon_of_paper=spent,
    )


def config_dict(problem: SelectionProblem) -> dict[str, object]:
    """The problem's settings (everything but the per-client columns), for output files."""
    return {f.name: getattr(problem, f.name) for f in fields(problem) if f.name not in ("epsilon", "num_samples")}


METHODS = tuple(  # the trainer's selection family: each client the ε of its group in the plan's GDPFed+ row
    Method(key=key, row="GDPFed+", family="selection", selection=traits)
    for key, traits in (
        ("privacy-aware", SelectionTraits(optimised=True)),
        ("unbiased", SelectionTraits()),
        ("power-of-choice", SelectionTraits(candidates=True)),
    )
)
