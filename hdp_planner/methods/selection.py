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

**The paper's noise rule** (eqs. 6-7, Lemmas 1-2): σ_k² = V_k T_k T^l C² with

    V_k = 8 log(e + ε'_k/δ'_k) / ((|M_k| r_k)² ε'_k²),   ε'_k = log(1 + (e^ε_k − 1)/r_k),   δ'_k = δ/r_k,

the inverse subsampling lemma (Lemma 1, sampling without replacement at r_k) applied to the strong-composition
Gaussian bound (Lemma 2) over the T_k T^l local steps. σ_k is the std of the noise on the *averaged* clipped
gradient, so it equals z_k C/(r_k|M_k|) with noise multiplier z_k = sqrt(8 T_k T^l log(e + ε'_k/δ'_k))/ε'_k.

**The exact alternative** (:func:`record_noise_multiplier` with ``"exact"``): the same T_k T^l steps accounted
by :func:`hdp_planner.accounting.calibration.calibrate_sigma` (RDP): each step is a Poisson sample of the client's
examples at rate q = r_k under add/remove-one-example neighbours, the noise N(0, z²C²) is added to the clipped *sum* and
divided by the expected batch size r_k|M_k| (not the realized one), so the mean's sensitivity is C/(r_k|M_k|),
exactly the sensitivity the paper's rule assumes. Where the paper is ambiguous we take the privacy-safe reading:

- **no amplification from client selection**: the honest-but-curious server knows whom it selected, so only
  the example sampling inside a client amplifies; T_k is a count of participations, not a sampling rate;
- **T_k**: Algorithm 1 preselects all rounds (line 3) and calibrates to the realized count (line 4); a plan has
  only its expectation T^g K p_k and uses ⌈T^g K p_k⌉ (at least 1). A trainer must recompute σ_k for the
  realized count with :func:`record_noise_multiplier`;
- **neighbours**: the paper's rule takes the mean's sensitivity as C/B, which holds for add/remove-one; under its
  own "differ in one entry" wording (replace-one) the sensitivity would be 2C/B. The exact σ is for add/remove
  with Poisson sampling, which the trainer must implement (not fixed-size batches).

Baselines: ``unbiased`` is p = p^u (:attr:`SelectionProblem.unbiased`); ``power-of-choice`` (highest local loss
among d candidates) needs losses and is the trainer's.
"""

from __future__ import annotations

import csv
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

import numpy as np

from hdp_planner.accounting.calibration import GaussianRounds, calibrate_sigma, epsilon_spent
from hdp_planner.accounting.validation import check_delta
from hdp_planner.methods.method import Method, SelectionTraits

NoiseRule = Literal["paper", "exact"]
Accountant = Literal["paper", "exact", "both"]


@dataclass(frozen=True)
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
CSV_COLUMNS: tuple[str, ...] = ("client_id", "epsilon", "num_samples")
_SOLVER_TOL = 1e-12  # Clarabel's gap and feasibility tolerances (1e-10 left p 1.6e-5 off in near-flat instances)
_GOOD_KKT = 1e-6  # a residual above this triggers the second, rescaled solve


def _check_count(name: str, value: int, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer ≥ {least}, got {value}")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value}")


@dataclass(frozen=True)
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
            _check_count("every num_samples", m)
        object.__setattr__(self, "num_samples", tuple(int(m) for m in self.num_samples))
        check_delta(self.delta)
        if not (isinstance(self.sample_rate, (int, float)) and 0 < self.sample_rate <= 1):
            raise ValueError(f"sample rate must lie in (0, 1], got {self.sample_rate}")
        if self.batch_size is not None:
            _check_count("batch size", self.batch_size)
        _check_count("clients per round", self.clients_per_round)
        _check_count("rounds", self.rounds)
        _check_count("local steps", self.local_steps)
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


def inverse_subsampled_epsilon(epsilon: np.ndarray | Sequence[float], rate: np.ndarray | float) -> np.ndarray:
    """ε' = log(1 + (e^ε − 1)/r) of Lemma 1, evaluated as ε + log(e^−ε + (1 − e^−ε)/r) (no overflow)."""
    e = np.asarray(epsilon, dtype=float)
    return e + np.log(np.exp(-e) - np.expm1(-e) / rate)


def paper_noise_factor(
    epsilon: Sequence[float] | np.ndarray,
    delta: float,
    num_samples: Sequence[int] | np.ndarray,
    rate: np.ndarray | float,
) -> np.ndarray:
    """V_k of eq. (7): 8 log(e + ε'/δ') / ((|M_k| r_k)² ε'²) with ε' from Lemma 1 and δ' = δ/r_k."""
    eps_p = inverse_subsampled_epsilon(epsilon, rate)
    batch = np.asarray(num_samples, dtype=float) * rate
    return 8.0 * np.log(math.e + rate * eps_p / delta) / (batch**2 * eps_p**2)


def record_noise_multiplier(epsilon: float, delta: float, rate: float, steps: int, rule: NoiseRule) -> float:
    """Noise multiplier z of one client's ``steps`` local DP-SGD steps at example sampling rate ``rate``:
    the noise std on the averaged clipped gradient is σ = z·C/(r|M|), linear in the clip bound C.

    ``paper``: z = sqrt(8·steps·log(e + ε'/δ'))/ε' (eqs. 6-7 with steps = T_k T^l); ``exact``: the smallest z
    whose Poisson(r)-subsampled Gaussian, composed ``steps`` times, meets (ε, δ) by RDP.
    """
    _check_count("steps", steps)
    if rule == "exact":
        return calibrate_sigma(epsilon=epsilon, delta=delta, q=rate, rounds=steps)
    if rule != "paper":
        raise ValueError(f"unknown noise rule {rule!r}; choose paper or exact")
    eps_p = float(inverse_subsampled_epsilon([epsilon], rate)[0])
    return math.sqrt(8.0 * steps * math.log(math.e + rate * eps_p / delta)) / eps_p


SELECTION_FAILURE = 1e-6
"""β: the probability, per client, that a run draws the client more often than the planned T_k."""
COUNT_RULE = (
    "T_k = the smallest count that client k's Binomial(T·K, p_k) number of draws (with replacement) exceeds with "
    "probability ≤ β = {beta:g} (at least ⌈T·K·p_k⌉ and 1); σ_k is calibrated for T_k, so the planned σ_k holds for "
    "the run unless a client is drawn more often (probability ≤ β per client), and the trainer recalibrates σ_k "
    "for the realized draws"
)


def selection_counts(
    p: Sequence[float] | np.ndarray, rounds: int, clients_per_round: int, failure: float = SELECTION_FAILURE
) -> np.ndarray:
    """T_k: a high-probability upper bound on client k's number of draws, P(Binomial(T^g K, p_k) > T_k) ≤ β.

    The expectation ⌈T^g K p_k⌉ is exceeded by about half the clients of a run (32% drew more than
    planned); the planner must not promise a σ_k the run will not keep. At least 1 and at least ⌈T^g K p_k⌉."""
    from scipy.stats import binom

    if not 0 < failure < 1:
        raise ValueError(f"failure probability must lie in (0, 1), got {failure}")
    draws = rounds * clients_per_round
    prob = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    counts = np.asarray(binom.isf(failure, draws, prob), dtype=float)
    counts = np.where(binom.sf(counts, draws, prob) > failure, counts + 1, counts)  # isf's rounding: never below
    expected = np.ceil(np.round(draws * prob, 9))
    return np.maximum(1, np.maximum(counts, expected)).astype(int)


@dataclass(frozen=True)
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


def kkt_residual(problem: SelectionProblem, p: np.ndarray, nu: float, lam: float, mu: np.ndarray) -> float:
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
    return x, kkt_residual(problem, x, nu, lam, scale * np.asarray(constraints[2].dual_value, dtype=float))


def solve_selection(problem: SelectionProblem) -> SelectionSolution:
    """Solve Problem 1 with cvxpy (Clarabel) in the epigraph form min u + ‖(u, √(ηV)∘p)‖₂ subject to
    ‖p − p^u‖₁ ≤ u, Σp = 1, p ≥ 0, and report :func:`kkt_residual` at the solver's multipliers.

    If the residual exceeds ``_GOOD_KKT`` (η far above η* makes the problem badly scaled), it is solved again
    with the objective divided by its value at p^u, and the point with the smaller residual is kept. One
    client is always selected: p = (1,).
    """
    pu = problem.unbiased
    if problem.count == 1:
        return SelectionSolution(problem, (1.0,), problem.objective(pu), problem.objective(pu), 0.0)
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
    return SelectionSolution(problem, tuple(float(v) for v in x), problem.objective(x), problem.objective(pu), residual)


@dataclass(frozen=True)
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
    counts = selection_counts(p, problem.rounds, problem.clients_per_round)
    steps = [int(c) * problem.local_steps for c in counts]
    rates = problem.rates.tolist()
    args = list(zip(problem.epsilon, rates, steps))
    paper = tuple(record_noise_multiplier(e, problem.delta, r, n, "paper") for e, r, n in args)
    exact = spent = None
    if report.exact:
        exact = tuple(record_noise_multiplier(e, problem.delta, r, n, "exact") for e, r, n in args)
    if report.paper and report.exact:
        spent = tuple(epsilon_spent(GaussianRounds(z, r, n), delta=problem.delta) for z, (_, r, n) in zip(paper, args))
    return ClientNoise(
        problem, accountant, tuple(float(v) for v in p), tuple(int(c) for c in counts), paper, exact, spent
    )


def config_dict(problem: SelectionProblem) -> dict[str, object]:
    """The problem's settings (everything but the per-client columns), for output files."""
    return {f.name: getattr(problem, f.name) for f in fields(problem) if f.name not in ("epsilon", "num_samples")}


# --------------------------------------------------------------------------------------------- reading


def _number(text: str, where: str, cid: str, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where}: client {cid!r} has {column} {text!r}, not a number") from None


def read_clients(path: str | os.PathLike[str]) -> tuple[list[str], tuple[float, ...], tuple[int, ...]]:
    """Read a CSV with columns client_id, epsilon, num_samples (any order, extra columns ignored).

    Raises ValueError with a one-line message for a missing file or column, an empty file, a non-numeric
    value, ε ≤ 0 or not finite, num_samples not a whole number ≥ 1, and a duplicate client_id.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: file not found")
    ids: list[str] = []
    eps: list[float] = []
    sizes: list[int] = []
    seen: set[str] = set()
    with path.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise ValueError(f"{path}: empty file; expected a header {','.join(CSV_COLUMNS)} and one row per client")
        names = [h.strip().lower() for h in header]
        for col in CSV_COLUMNS:
            if col not in names:
                raise ValueError(f"{path}: missing column {col!r} (header has: {', '.join(header)})")
        ci, ei, si = (names.index(c) for c in CSV_COLUMNS)
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            where = f"{path}, line {line}"
            if len(row) <= max(ci, ei, si):
                raise ValueError(f"{where}: expected {len(names)} columns, got {len(row)}")
            cid = row[ci].strip()
            if not cid:
                raise ValueError(f"{where}: empty client_id")
            if cid in seen:
                raise ValueError(f"{where}: duplicate client_id {cid!r}")
            seen.add(cid)
            e = _number(row[ei].strip(), where, cid, "epsilon")
            if not (math.isfinite(e) and e > 0):
                raise ValueError(
                    f"{where}: client {cid!r} has epsilon {row[ei].strip()}; ε must be positive and finite"
                )
            m = _number(row[si].strip(), where, cid, "num_samples")
            if not (math.isfinite(m) and m.is_integer() and m >= 1):
                raise ValueError(f"{where}: client {cid!r} has num_samples {row[si].strip()}; need a whole number ≥ 1")
            ids.append(cid)
            eps.append(e)
            sizes.append(int(m))
    if not ids:
        raise ValueError(f"{path}: no clients (only a header)")
    return ids, tuple(eps), tuple(sizes)


METHODS = tuple(  # the trainer's selection family: each client the ε of its group in the plan's GDPFed+ row
    Method(key, "GDPFed+", family="selection", selection=traits)
    for key, traits in (
        ("privacy-aware", SelectionTraits(optimised=True)),
        ("unbiased", SelectionTraits()),
        ("power-of-choice", SelectionTraits(candidates=True)),
    )
)
