"""What a selection method decides before training: the selection probabilities, every round's draws, and each
client's noise calibrated for its realized count (Algorithm 1, lines 3-4 of the selection paper).

Each client takes the ε of its plan group and its data size |M_k| from the partition; ``calibrate_clients`` gives
every client both noise multipliers (eqs. 6-7 and the exact RDP accountant), ``check_budgets`` refuses a setting
whose noise would exceed a client's budget. :mod:`.private_selection` trains with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hdp_planner.accounting.calibration import GaussianRounds, epsilon_spent
from hdp_planner.methods.method import SelectionTraits
from hdp_planner.methods.registry import REGISTRY, keys
from hdp_planner.methods.selection import SelectionProblem, record_noise_multiplier, solve_selection

SELECTION_METHODS = keys("selection")
CANDIDATE_METHODS = tuple(k for k in SELECTION_METHODS if REGISTRY[k].selection.candidates)  # --candidates applies
OPTIMISED_METHODS = tuple(k for k in SELECTION_METHODS if REGISTRY[k].selection.optimised)  # --eta applies
NOISE_RULES = ("exact", "paper")
DEFAULT_ETA = 1e5  # SelectionProblem's default weight of the DP term
ACCOUNTANT = "rdp: Poisson-subsampled Gaussian, add/remove-one example, composed over the client's steps"
_PRESELECT_STREAM = 3  # SeedSequence([seed, stream]): the whole run's selections, drawn before training


@dataclass(frozen=True, kw_only=True)
class ClientPrivacy:
    """Every client's budget, data size, sampling rate, selection count, noise multipliers and ε spent."""

    group: np.ndarray  # plan group (0-based) of each client
    epsilon: np.ndarray
    sizes: np.ndarray
    rates: np.ndarray  # r_k
    counts: np.ndarray  # T_k the noise is calibrated for (power-of-choice: candidate rounds)
    multiplier_paper: np.ndarray  # z_k by eqs. 6-7 (0 where T_k = 0)
    multiplier_exact: np.ndarray  # z_k by the RDP accountant (0 where T_k = 0)
    rule: str

    @property
    def multiplier(self) -> np.ndarray:
        return self.multiplier_exact if self.rule == "exact" else self.multiplier_paper

    def sigma(self, clip: float) -> np.ndarray:
        """σ_k = z_k C/(r_k|M_k|): the noise std on the averaged clipped gradient."""
        return self.multiplier * clip / (self.rates * self.sizes)


def check_selection_options(cfg) -> None:
    """Refuse the selection options where the method does not use them, and bad values (one line each)."""
    from hdp_planner_train.run.errors import TrainError

    chosen, opts = cfg.method in SELECTION_METHODS, cfg.selection
    given = (("--noise-rule", opts.noise_rule), ("--eta", opts.eta), ("--clients-per-round", opts.per_round))
    for name, value in given:
        if value is not None and not chosen:
            raise TrainError(f"{name} applies to {', '.join(SELECTION_METHODS)}, not {cfg.method}")
    if opts.candidates is not None and cfg.method not in CANDIDATE_METHODS:
        raise TrainError(f"--candidates applies to {', '.join(CANDIDATE_METHODS)}, not {cfg.method}")
    if opts.eta is not None and cfg.method not in OPTIMISED_METHODS:
        raise TrainError(f"--eta (Problem 1's weight) applies to {', '.join(OPTIMISED_METHODS)}, not {cfg.method}")
    if opts.noise_rule is not None and opts.noise_rule not in NOISE_RULES:
        raise TrainError(f"--noise-rule must be one of {', '.join(NOISE_RULES)}, got {opts.noise_rule!r}")
    if opts.eta is not None and not (math.isfinite(opts.eta) and opts.eta > 0):
        raise TrainError(f"--eta must be positive, got {opts.eta}")
    if opts.per_round is not None and opts.per_round < 1:
        raise TrainError(f"--clients-per-round must be ≥ 1, got {opts.per_round}")
    if opts.candidates is not None and opts.candidates < 1:
        raise TrainError(f"--candidates must be ≥ 1, got {opts.candidates}")
    if chosen and cfg.output.resume:
        raise TrainError(f"--resume is not supported for {cfg.method} (its noise is calibrated for the whole run)")


def client_groups(plan, n_clients: int) -> tuple[np.ndarray, np.ndarray]:
    """Every client's plan group and budget: clients 0..n-1 join the plan's groups in order of the group sizes.

    Args:
        plan: the plan.
        n_clients: the partition's number of clients.

    Returns:
        (0-based group, ε) of every client.

    Raises:
        ValueError: the plan's groups do not hold ``n_clients`` clients.
    """
    g = plan.groups
    if sum(g.size) != n_clients:
        raise ValueError(f"the plan's groups hold {sum(g.size)} clients, the partition {n_clients}")
    group = np.repeat(np.arange(len(g.size)), g.size)
    return group, np.asarray(g.epsilon, dtype=float)[group]


def selection_problem(plan, clients: list[np.ndarray], *, rounds: int, per_round: int, batch: int, eta: float):
    """The selection paper's Problem 1 for a partition under a plan's ε per group, δ, C and τ.

    Args:
        plan: the plan.
        clients: every client's example positions.
        rounds: the rounds run.
        per_round: K, clients drawn per round.
        batch: B, the expected local batch (r_k = min(1, B/|M_k|)).
        eta: η, the weight of the DP term.

    Returns:
        The :class:`~hdp_planner.methods.selection.SelectionProblem`.
    """
    _, eps = client_groups(plan, len(clients))
    c = plan.config
    return SelectionProblem(
        epsilon=tuple(eps.tolist()),
        num_samples=tuple(len(m) for m in clients),
        delta=float(c.delta),
        batch_size=batch,
        clients_per_round=per_round,
        rounds=rounds,
        local_steps=c.local_steps,
        clip=c.clip,
        eta=eta,
    )


def selection_probabilities(problem: SelectionProblem, traits: SelectionTraits) -> tuple[np.ndarray, Any]:
    """The selection probabilities p of a selection method.

    Args:
        problem: Problem 1.
        traits: the method's selection traits.

    Returns:
        (p, solution): Problem 1's optimum and its solution (privacy-aware), or p^u ∝ |M_k| and None (eq. 5).
    """
    if traits.optimised:
        sol = solve_selection(problem)
        return np.asarray(sol.p, dtype=float), sol
    return problem.unbiased, None


def preselect(p: np.ndarray, *, rounds: int, per_round: int, seed: int) -> np.ndarray:
    """Every round's selected clients, drawn up front: K draws *with replacement* from p (Algorithm 1, line 3).

    Args:
        p: selection probabilities (normalised here).
        rounds: the rounds run.
        per_round: K.
        seed: the run's seed.

    Returns:
        (rounds, K) client ids.
    """
    rng, p = _run_draws(p, seed)
    return rng.choice(len(p), size=(rounds, per_round), replace=True, p=p)


def candidate_sets(p: np.ndarray, *, rounds: int, candidates: int, seed: int) -> np.ndarray:
    """Power-of-choice's candidates, drawn up front from the stream of :func:`preselect`: every round d distinct
    clients drawn ∝ p, without replacement.

    Args:
        p: as in :func:`preselect`.
        rounds: as in :func:`preselect`.
        candidates: d, at most the number of clients.
        seed: as in :func:`preselect`.

    Returns:
        (rounds, d) client ids, distinct within a round.
    """
    rng, p = _run_draws(p, seed)
    return np.stack([rng.choice(len(p), size=candidates, replace=False, p=p) for _ in range(rounds)])


def _run_draws(p: np.ndarray, seed: int) -> tuple[np.random.Generator, np.ndarray]:
    """The run's selection stream SeedSequence([seed, 3]) and p normalised to sum to 1."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, _PRESELECT_STREAM]))
    return rng, np.asarray(p, dtype=float) / np.sum(p)


def calibrate_clients(problem: SelectionProblem, counts: np.ndarray, rule: str, group: np.ndarray) -> ClientPrivacy:
    """Both noise multipliers of every client for its T_k·τ DP-SGD steps
    (:func:`~hdp_planner.methods.selection.record_noise_multiplier`: eqs. 6-7 and the exact RDP accountant).

    Args:
        problem: Problem 1 (ε_k, δ, r_k, τ).
        counts: T_k, the selections each client's noise is calibrated for.
        rule: the noise rule applied, ``paper`` or ``exact``.
        group: every client's plan group.

    Returns:
        Every client's budget, rate, count and both multipliers (0 where T_k = 0).

    Raises:
        TrainError: a client whose noise cannot be calibrated.
    """
    from hdp_planner_train.run.errors import TrainError

    rates, eps = problem.rates, np.asarray(problem.epsilon)
    paper, exact = np.zeros(problem.count), np.zeros(problem.count)
    cache: dict[tuple[float, float, int], tuple[float, float]] = {}
    for k in range(problem.count):
        steps = int(counts[k]) * problem.local_steps
        if steps == 0:
            continue
        key = (float(eps[k]), float(rates[k]), steps)
        if key not in cache:
            try:
                cache[key] = tuple(
                    record_noise_multiplier(key[0], delta=problem.delta, rate=key[1], steps=steps, rule=r)
                    for r in ("paper", "exact")
                )
            except ValueError as exc:
                raise TrainError(f"client {k}: cannot calibrate its noise: {exc}") from None
        paper[k], exact[k] = cache[key]
    return ClientPrivacy(
        group=np.asarray(group),
        epsilon=eps,
        sizes=np.asarray(problem.num_samples),
        rates=rates,
        counts=np.asarray(counts),
        multiplier_paper=paper,
        multiplier_exact=exact,
        rule=rule,
    )


def spent_epsilon(privacy: ClientPrivacy, steps: np.ndarray, *, delta: float) -> np.ndarray:
    """ε each client spent for its DP-SGD steps at its z_k and r_k, by the exact RDP accountant.

    Args:
        privacy: every client's noise.
        steps: every client's steps.
        delta: δ.

    Returns:
        ε per client (0 without a step).
    """
    out = np.zeros(len(steps))
    cache: dict[tuple[float, float, int], float] = {}
    for k, n in enumerate(steps):
        if n == 0:
            continue
        key = (float(privacy.multiplier[k]), float(privacy.rates[k]), int(n))
        if key not in cache:
            cache[key] = epsilon_spent(GaussianRounds(noise_multiplier=key[0], q=key[1], rounds=key[2]), delta=delta)
        out[k] = cache[key]
    return out


def check_budgets(privacy: ClientPrivacy, steps: np.ndarray, *, delta: float, rule: str) -> np.ndarray:
    """:func:`spent_epsilon`, refusing a client whose ε would exceed its budget.

    Args:
        privacy: every client's noise.
        steps: every client's steps.
        delta: δ.
        rule: the noise rule (for the message).

    Returns:
        ε per client.

    Raises:
        TrainError: a client whose ε exceeds its budget.
    """
    from hdp_planner_train.run.errors import TrainError

    spent = spent_epsilon(privacy, steps, delta=delta)
    over = np.flatnonzero(spent > privacy.epsilon * (1 + 1e-9))
    if over.size:
        k = int(over[0])
        raise TrainError(
            f"client {k} (group {privacy.group[k] + 1}): the {rule} noise rule's z = {privacy.multiplier[k]:.4g} "
            f"spends ε = {spent[k]:.4g} > its budget {privacy.epsilon[k]:g} over {steps[k]} steps at "
            f"r = {privacy.rates[k]:.3g} (exact accountant): use --noise-rule exact"
        )
    return spent
