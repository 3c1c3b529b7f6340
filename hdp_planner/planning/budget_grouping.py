"""Grouping clients by budget: the contiguous groups a plan is made of, chosen by the closed-form score.

A group's ε is the minimum of its members' budgets, so no client's budget is ever exceeded. Groups are
contiguous in sorted budget and never split a budget value: group m holds every client whose budget lies
in [ε_m, ε_{m+1}).

Groupings (``method``):

- ``unique``: one group per distinct budget value;
- ``quantile``: M groups of (nearly) equal client counts, cut at the distinct values nearest the quantiles;
- ``optimal``: the M contiguous groups that minimise Problem 1's objective.

Why ``optimal`` is a dynamic programme: at Problem 1's closed-form optimum the noise term is μ5/(R²H) with
H = Σ_m |G_m|² f(ε_m)/(7T) (:mod:`hdp_planner.planning.budget_scoring` derives it), a sum over groups of a term
that depends on the group alone (its size and its smallest budget). So the best contiguous partition into M groups
maximises an additive score: an exact DP over the K distinct budget values (O(M·K²) time, O(M·K) memory,
independent of n). Only the budget histogram (:mod:`hdp_planner.planning.budget_counts`) is used.

For K > ``EXACT_LIMIT`` distinct values the DP runs over a candidate set of ``EXACT_LIMIT`` cut points
(client quantiles and an even grid over the distinct values, plus the quantile grouping's own cuts) and
every cut is then refined one at a time over all distinct values between its neighbours until no move
improves H (exact coordinate descent). That is not guaranteed globally optimal, but it is never worse than
``quantile`` at the same M (its cuts are candidates) and stays exact whenever K ≤ EXACT_LIMIT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hdp_planner.planning.budget_counts import budget_histogram
from hdp_planner.planning.budget_files import BudgetError
from hdp_planner.planning.budget_scoring import budget_score, closed_form_noise_term, closed_form_objective
from hdp_planner.planning.grouping import Grouping, Groups

if TYPE_CHECKING:
    from hdp_planner.planning.config import PlanConfig

GROUPINGS: tuple[str, ...] = ("unique", "quantile", "optimal")
MAX_GROUPS = 64
"""Most groups a plan may have (each group is calibrated with the accountant)."""
AUTO_CAP = 16
"""``--groups auto`` tries M = 1 … min(AUTO_CAP, distinct budgets)."""
AUTO_TOL = 1e-3
"""``--groups auto`` takes the fewest groups whose H is within this fraction of the best M's."""
EXACT_LIMIT = 4096
"""Largest number of distinct budgets the DP treats exactly; above it, candidates + refinement."""
_DP_BLOCK = 1 << 20  # (cut, previous cut) pairs per block of the DP
_DP_CACHE = 1 << 21  # largest number of pairs whose gains the DP keeps across group counts


def _dp(
    prefix: np.ndarray, score: np.ndarray, starts: np.ndarray, max_groups: int
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """Best Σ f(ε_start)·size² over contiguous partitions whose groups start at ``starts`` (sorted, first 0).

    ``prefix[k]`` = clients with the k smallest distinct values; ``score[k]`` = f(values[k]).
    Returns best[m] for m = 1..max_groups (−inf where impossible) and the chosen starts per m.
    """
    c = len(starts)
    p = np.append(prefix[starts], prefix[-1])  # cut positions, with the end as sentinel index c
    f = score[starts]
    best = np.full(c + 1, -np.inf)  # best[b]: covering [0, cut b) with m groups
    best[1:] = f[0] * p[1:] ** 2  # m = 1: one group starting at cut 0
    back = [np.zeros(c + 1, dtype=np.int64)]
    results = np.full(max_groups + 1, -np.inf)
    results[1] = best[c]
    rows = max(1, _DP_BLOCK // c)
    blocks = [np.arange(lo, min(lo + rows, c + 1)) for lo in range(1, c + 1, rows)]

    def gain(b: np.ndarray) -> np.ndarray:
        """f(start a)·size² of a last group from cut a to cut b, for every a < b (−inf otherwise): (b, a)."""
        size = p[b][:, None] - p[None, :c]
        return np.where(np.arange(c)[None, :] < b[:, None], f[None, :] * size * size, -np.inf)

    # the gains do not depend on the number of groups: keep them when they are small enough
    cached = [gain(b) for b in blocks] if c * c <= _DP_CACHE else None
    for m in range(2, max_groups + 1):
        new = np.full(c + 1, -np.inf)  # cuts b < m stay −inf: best[a] is −inf for every a < m − 1
        arg = np.zeros(c + 1, dtype=np.int64)
        for bi, b in enumerate(blocks):
            val = best[None, :c] + (cached[bi] if cached is not None else gain(b))
            j = np.argmax(val, axis=1)
            new[b] = val[np.arange(len(b)), j]
            arg[b] = j
        best = new
        back.append(arg)
        results[m] = best[c]
    chosen: list[np.ndarray | None] = [None]
    for m in range(1, max_groups + 1):
        if not np.isfinite(results[m]):
            chosen.append(None)
            continue
        cuts = []
        b = c
        for layer in range(m, 1, -1):
            a = int(back[layer - 1][b])
            cuts.append(a)
            b = a
        cuts.append(0)
        chosen.append(starts[np.asarray(cuts[::-1], dtype=np.int64)])
    return results, chosen


def _score_of(prefix: np.ndarray, score: np.ndarray, starts: np.ndarray) -> float:
    ends = np.append(prefix[starts[1:]], prefix[-1])
    size = ends - prefix[starts]
    return float(np.sum(score[starts] * size * size))


def _refine(prefix: np.ndarray, score: np.ndarray, starts: np.ndarray, sweeps: int = 20) -> np.ndarray:
    """Move each cut over every distinct value between its neighbours to the best place, until stable."""
    s = starts.copy()
    k = len(score)
    for _ in range(sweeps):
        moved = False
        for m in range(1, len(s)):
            lo, hi = s[m - 1], (s[m + 1] if m + 1 < len(s) else k)
            x = np.arange(lo + 1, hi)
            end = prefix[hi] if hi < k else prefix[-1]
            left = prefix[x] - prefix[lo]
            right = end - prefix[x]
            val = score[lo] * left * left + score[x] * right * right
            j = int(x[np.argmax(val)])
            cur = score[lo] * (prefix[s[m]] - prefix[lo]) ** 2 + score[s[m]] * (end - prefix[s[m]]) ** 2
            if j != s[m] and val.max() > cur * (1 + 1e-13):
                s[m] = j
                moved = True
        if not moved:
            break
    return s


def _quantile_starts(prefix: np.ndarray, m: int) -> np.ndarray:
    """Cuts at the distinct-value boundaries nearest the client quantiles i·n/m (strictly increasing)."""
    k = len(prefix) - 1
    n = prefix[-1]
    starts = np.zeros(m, dtype=np.int64)
    for i in range(1, m):
        target = n * i / m
        j = int(np.searchsorted(prefix, target))  # first boundary >= target
        if j > 0 and target - prefix[j - 1] <= prefix[min(j, k)] - target:
            j -= 1
        starts[i] = min(max(j, 1), k - 1)
    for i in range(1, m):  # strictly increasing, room for the groups after
        starts[i] = max(starts[i], starts[i - 1] + 1)
    for i in range(m - 1, 0, -1):
        starts[i] = min(starts[i], k - (m - i))
        if i + 1 < m:
            starts[i] = min(starts[i], starts[i + 1] - 1)
    return starts


def _optimal_starts(prefix: np.ndarray, score: np.ndarray, max_groups: int) -> list[np.ndarray | None]:
    k = len(score)
    if k <= EXACT_LIMIT:
        return _dp(prefix, score, np.arange(k), max_groups)[1]
    n = prefix[-1]
    ranks = np.linspace(0, n, EXACT_LIMIT // 2, endpoint=False)[1:]
    by_clients = np.searchsorted(prefix, ranks)
    by_values = np.linspace(0, k - 1, EXACT_LIMIT // 2).astype(np.int64)
    quantile = [_quantile_starts(prefix, m) for m in range(1, max_groups + 1)]
    cand = np.unique(np.concatenate([[0], by_clients, by_values, *quantile]))
    cand = cand[(cand >= 0) & (cand < k)]
    chosen = _dp(prefix, score, cand, max_groups)[1]
    return [None if s is None else _refine(prefix, score, s) for s in chosen]


def _make(method: str, starts: np.ndarray, values: np.ndarray, counts: np.ndarray, config: PlanConfig) -> Grouping:
    k = len(values)
    ends = np.append(starts[1:], k)
    sizes = tuple(int(counts[a:b].sum()) for a, b in zip(starts, ends))
    group_eps = values[starts]
    unused = tuple(float(np.sum(counts[a:b] * (values[a:b] - values[a]))) for a, b in zip(starts, ends))
    groups = Groups(epsilons=tuple(float(e) for e in group_eps), sizes=sizes)
    boundaries = tuple(float(e) for e in group_eps[1:])
    return Grouping(
        method=method,
        groups=groups,
        boundaries=boundaries,
        max_budget=tuple(float(values[b - 1]) for b in ends),
        unused=unused,
        total_unused=float(math.fsum(unused)),
        objective=closed_form_objective(sizes=sizes, epsilons=groups.epsilons, config=config),
        noise_term=closed_form_noise_term(sizes=sizes, epsilons=groups.epsilons, config=config),
    )


def parse_group_count(text: str | int | None) -> int | None:
    """``--groups``: a positive integer, or ``auto``/None (choose M by the objective)."""
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return None
    try:
        m = int(text)
    except (TypeError, ValueError):
        raise BudgetError(f"--groups must be a positive integer or 'auto', got {text!r}") from None
    if m < 1:
        raise BudgetError(f"--groups must be a positive integer or 'auto', got {text!r}")
    return m


def groups_from_budgets(
    eps: Sequence[float] | np.ndarray,
    *,
    groups: int | None,
    method: str,
    config: PlanConfig,  # its n must be the number of clients
    progress: Callable[[str], None] | None = None,
) -> Grouping:
    """Group clients by budget into contiguous groups, each with the smallest budget of its members as its ε.

    Only the budget histogram (:func:`~hdp_planner.planning.budget_counts.budget_histogram`) is used: see
    :func:`groups_from_histogram`.

    Args:
        eps: every client's budget ε_i.
        groups: the number of groups M, or None to choose it by the objective: the fewest M ≤ min(AUTO_CAP, distinct
            budgets) whose closed-form H is within AUTO_TOL of the best.
        method: ``unique``, ``quantile`` or ``optimal`` (the module docstring describes them).
        config: δ, T, q, η and τ for the objective; ``config.n`` must equal ``len(eps)``.
        progress: called with a line before a long optimal grouping, or None.

    Returns:
        The grouping, with its unused budget and closed-form objective.

    Raises:
        BudgetError: a bad budget, an unknown method, n not the number of budgets, or more groups than distinct
            budgets or than MAX_GROUPS.
    """
    values, counts = budget_histogram(eps)
    return groups_from_histogram(values, counts, groups=groups, method=method, config=config, progress=progress)


def groups_from_histogram(
    values: np.ndarray,
    counts: np.ndarray,
    *,
    groups: int | None,
    method: str,
    config: PlanConfig,
    progress: Callable[[str], None] | None = None,
) -> Grouping:
    """:func:`groups_from_budgets` from the budget histogram: time and memory depend on the number of distinct
    budgets, not on the number of clients.

    Args:
        values: the distinct budgets, ascending and positive.
        counts: how many clients hold each of ``values``.
        groups: as in :func:`groups_from_budgets`.
        method: as in :func:`groups_from_budgets`.
        config: as in :func:`groups_from_budgets`; ``config.n`` must equal ``counts.sum()``.
        progress: as in :func:`groups_from_budgets`.

    Returns:
        The grouping.

    Raises:
        BudgetError: as :func:`groups_from_budgets`.
    """
    if method not in GROUPINGS:
        raise BudgetError(f"grouping must be one of {', '.join(GROUPINGS)}, got {method!r}")
    n = int(counts.sum())
    if config.n != n:
        raise BudgetError(f"the plan's n = {config.n} but {n} client budgets are given")
    k = len(values)
    prefix = np.concatenate([[0], np.cumsum(counts)]).astype(float)
    if groups is not None:
        if groups > k:
            raise BudgetError(f"{groups} groups requested but the clients have only {k} distinct budgets")
        if groups > MAX_GROUPS:
            raise BudgetError(f"{groups} groups requested; at most {MAX_GROUPS} are supported")
    if method == "unique":
        if groups is not None and groups != k:
            raise BudgetError(f"unique grouping makes one group per distinct budget ({k}), not {groups}")
        if k > MAX_GROUPS:
            raise BudgetError(
                f"unique grouping would make {k} groups (at most {MAX_GROUPS}); use --grouping optimal or quantile"
            )
        return _make("unique", np.arange(k), values, counts, config)
    top = groups if groups is not None else min(AUTO_CAP, k)
    score = budget_score(values, delta=config.delta)
    if method == "quantile":
        options = {m: _quantile_starts(prefix, m) for m in (range(1, top + 1) if groups is None else [groups])}
    else:
        if progress:
            progress(f"optimal grouping over {k} distinct budgets, up to {top} groups")
        chosen = _optimal_starts(prefix, score, top)
        options = {m: s for m, s in enumerate(chosen) if s is not None and (groups is None or m == groups)}
    scores = {m: _score_of(prefix, score, s) for m, s in options.items()}
    best = max(scores.values())
    # auto: the fewest groups within AUTO_TOL of the best H (tiny extra groups buy nothing but calibrations)
    best_m = min(m for m, h in scores.items() if h >= best * (1 - AUTO_TOL))
    return _make(method, options[best_m], values, counts, config)
