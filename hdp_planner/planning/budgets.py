"""Per-client privacy budgets: read them, group them, and assign clients to a plan's groups.

A group's ε is the minimum of its members' budgets, so no client's budget is ever exceeded. Groups are
contiguous in sorted budget and never split a budget value: group m holds every client whose budget lies
in [ε_m, ε_{m+1}). So "the group whose ε is the largest ≤ the client's budget" is the client's group.

Groupings (``method``):

- ``unique``: one group per distinct budget value;
- ``quantile``: M groups of (nearly) equal client counts, cut at the distinct values nearest the quantiles;
- ``optimal``: the M contiguous groups that minimise Problem 1's objective.

Why ``optimal`` is a dynamic programme. Under Theorem 1's bound σ_m² = a_m q_m² with
a_m = 7T(ε_m + 2 log(1/δ))/ε_m², and with φ_m = 0 (k_m = d), Problem 1's objective at r_m = q_m|G_m| is

    μ4/R + μ5 · Σ_m a_m r_m⁴/|G_m|² / (R² (Σ_j r_j²)²),     R = qn = Σ_m r_m,

which is scale-free in x_m = r_m², so minimising Σ c_m x_m²/(Σ x)² (c_m = a_m/|G_m|²) gives x_m ∝ 1/c_m,
i.e. r_m ∝ |G_m|/√a_m, and the optimum is

    J* = μ4/R + μ5/(R² H),     H = Σ_m |G_m|²/a_m = Σ_m |G_m|² f(ε_m)/(7T),   f(ε) = ε²/(ε + 2 log(1/δ)).

H is a sum over groups of a term that depends on the group alone (its size and its smallest budget), so the
ω_m coupling disappears at the optimum and the best contiguous partition into M groups maximises an additive
score: an exact DP over the K distinct budget values (O(M·K²) time, O(M·K) memory, independent of n).
With Remark 3's φ_m* instead of φ = 0 the objective drops by a term of order B²/(4μ4R) with
B = μ5/(RH) (all groups share B at the optimum); B ≪ μ4 in every realistic setting, so H is the score
(:func:`closed_form_check` compares it with :class:`~hdp_planner.planning.problem.SamplingProblem`). The closed
form ignores q_m ≤ 1; the plan is then solved with the full Problem 1 on the chosen groups.

For K > ``EXACT_LIMIT`` distinct values the DP runs over a candidate set of ``EXACT_LIMIT`` cut points
(client quantiles and an even grid over the distinct values, plus the quantile grouping's own cuts) and
every cut is then refined one at a time over all distinct values between its neighbours until no move
improves H (exact coordinate descent). That is not guaranteed globally optimal, but it is never worse than
``quantile`` at the same M (its cuts are candidates) and stays exact whenever K ≤ EXACT_LIMIT.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from hdp_planner.planning.budget_columns import BudgetColumns, read_plain_csv
from hdp_planner.planning.grouping import Groups

if TYPE_CHECKING:
    from hdp_planner.planning.plan import PlanConfig

GroupingMethod = Literal["unique", "quantile", "optimal"]
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
HISTOGRAM_CHUNK = 1 << 18
"""Clients counted at a time by :func:`budget_histogram`."""
HASH_LIMIT = 4096
"""Most distinct budgets :func:`budget_histogram` counts by hashing; beyond, it sorts every chunk."""


class BudgetError(ValueError):
    """A budgets file or grouping request that cannot be used (one-line message)."""


# --------------------------------------------------------------------------------------------- reading


def _check_eps(values: np.ndarray, where: str, ids: Sequence[str]) -> None:
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BudgetError(
            f"{where}: client {ids[i]!r} has budget ε = {float(values[i])!r}; every ε must be positive and finite"
        )


def _first_duplicate(items: Sequence[str]) -> str | None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def _check_ids(ids: Sequence[str], where: str) -> None:
    duplicate = _first_duplicate(ids)
    if duplicate is not None:
        raise BudgetError(f"{where}: duplicate client_id {duplicate!r}")


def _parse_eps(text: object, where: str, cid: str) -> float:
    if isinstance(text, bool) or text is None:
        raise BudgetError(f"{where}: client {cid!r} has budget {text!r}, not a number")
    try:
        return float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BudgetError(f"{where}: client {cid!r} has budget {text!r}, not a number") from None


def _parse_delta(text: object, where: str, cid: str) -> float:
    value = float("nan") if isinstance(text, bool) or text in (None, "") else text
    try:
        delta = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        delta = float("nan")
    if not 0 < delta < 1:
        raise BudgetError(f"{where}: client {cid!r} has delta {text!r}; every delta must lie in (0, 1)")
    return delta


def _read_csv(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    with path.open(newline="", encoding="utf-8-sig") as fh:  # a spreadsheet's UTF-8 BOM is not part of the header
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise BudgetError(f"{path}: empty file; expected a header client_id,epsilon and one row per client")
        names = [h.strip().lower() for h in header]
        missing = [c for c in ("client_id", "epsilon") if c not in names]
        if missing:
            raise BudgetError(f"{path}: missing column {missing[0]!r} (header has: {', '.join(header)})")
        ci, ei = names.index("client_id"), names.index("epsilon")
        di = names.index("delta") if "delta" in names else None
        ids: list[str] = []
        eps: list[float] = []
        deltas: list[float] = []
        for line, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) <= max(ci, ei):
                raise BudgetError(f"{path}, line {line}: expected {len(names)} columns, got {len(row)}")
            cid = row[ci].strip()
            if not cid:
                raise BudgetError(f"{path}, line {line}: empty client_id")
            ids.append(cid)
            eps.append(_parse_eps(row[ei].strip(), f"{path}, line {line}", cid))
            if di is not None:
                deltas.append(_parse_delta(row[di].strip() if di < len(row) else None, f"{path}, line {line}", cid))
    return ids, np.asarray(eps, dtype=float), deltas if di is not None else None


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    duplicate = _first_duplicate([k for k, _ in pairs])
    if duplicate is not None:
        raise BudgetError(f"duplicate client_id {duplicate!r}")
    return dict(pairs)


def _read_json(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    text = path.read_text(encoding="utf-8-sig")
    if not text.strip():
        raise BudgetError(f"{path}: empty file")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=lambda c: float("nan"))
    except BudgetError as exc:
        raise BudgetError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BudgetError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    ids: list[str] = []
    eps: list[float] = []
    deltas: list[float] = []
    if isinstance(doc, dict):
        for cid, value in doc.items():
            ids.append(str(cid))
            eps.append(_parse_eps(value, str(path), str(cid)))
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            if not isinstance(item, dict):
                raise BudgetError(f"{path}: entry {i + 1} is not an object with client_id and epsilon")
            for key in ("client_id", "epsilon"):
                if key not in item:
                    raise BudgetError(f"{path}: entry {i + 1} is missing {key!r}")
            cid = item["client_id"]
            if isinstance(cid, (dict, list, bool)) or cid is None or str(cid).strip() == "":
                raise BudgetError(f"{path}: entry {i + 1} has an invalid client_id {cid!r}")
            ids.append(str(cid))
            eps.append(_parse_eps(item["epsilon"], str(path), str(cid)))
            if "delta" in item:
                deltas.append(_parse_delta(item["delta"], str(path), str(cid)))
        if deltas and len(deltas) != len(ids):
            raise BudgetError(f"{path}: some entries carry a delta and others do not")
    else:
        raise BudgetError(f"{path}: expected a list of {{client_id, epsilon}} objects or an {{id: epsilon}} mapping")
    return ids, np.asarray(eps, dtype=float), deltas or None


def load_budgets(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray]:
    """Read per-client budgets from CSV (columns ``client_id,epsilon``) or JSON (a list of
    ``{client_id, epsilon}`` or an ``{id: epsilon}`` mapping). Returns (ids, ε array) in file order.

    Raises :class:`BudgetError` for a missing file or column, an empty file, duplicate ids, or an ε that is
    not a positive finite number.
    """
    ids, eps, _ = load_budgets_with_delta(path)
    return ids, eps


def load_budgets_with_delta(path: str | os.PathLike[str]) -> tuple[list[str], np.ndarray, float | None]:
    """:func:`load_budgets`, and the smallest δ_i of an optional ``delta`` column (JSON: key) or None: a plan made
    from the file must use δ ≤ every client's δ_i."""
    ids, eps, deltas = _read_checked(_existing(path))
    return ids, eps, None if deltas is None else min(deltas)


def load_budget_columns(path: str | os.PathLike[str]) -> BudgetColumns:
    """:func:`load_budgets_with_delta` as columns, for millions of clients: a plain CSV file is parsed by numpy a
    block at a time (:func:`~hdp_planner.planning.budget_columns.read_plain_csv`); any other file, or one that
    fails a check, is read row by row, with the same checks and messages."""
    path = _existing(path)
    columns = None if path.suffix.lower() == ".json" else read_plain_csv(path)
    if columns is not None and _valid(columns):
        return columns
    return BudgetColumns.from_lists(*_read_checked(path))


def _valid(columns: BudgetColumns) -> bool:
    values, delta = columns.values, columns.delta
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        return False
    return (delta is None or bool(np.all((delta > 0) & (delta < 1)))) and not columns.duplicate()


def _existing(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if not path.is_file():
        raise BudgetError(f"budgets file {path} not found")
    return path


def _read_checked(path: Path) -> tuple[list[str], np.ndarray, list[float] | None]:
    try:
        ids, eps, deltas = _read_json(path) if path.suffix.lower() == ".json" else _read_csv(path)
    except UnicodeDecodeError:
        raise BudgetError(f"{path} is not a text file") from None
    if not ids:
        raise BudgetError(f"{path}: no clients (the file lists no budgets)")
    _check_ids(ids, str(path))
    _check_eps(eps, str(path), ids)
    return ids, eps, deltas


def budgets_digest(ids: Sequence[str], epsilons: Sequence[float]) -> str:
    """SHA-256 of the budgets as ``client_id,repr(ε)`` lines sorted by id: what a plan records of the budgets it was
    made from, and what every consumer of a budgets or groups file recomputes."""
    lines = sorted(f"{cid},{float(e)!r}" for cid, e in zip(ids, epsilons))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def read_assignment(
    path: str | os.PathLike[str], group_epsilons: Sequence[float], digest: str | None
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Read ``hdp-plan assign --output``'s CSV (client_id, epsilon, group 1-based, group_epsilon) against a plan whose
    groups have budgets ``group_epsilons`` (increasing): every client's ε_i must be at least its group's ε (and the
    row's group_epsilon the plan's), and, when the plan recorded the ``digest`` of the budgets it was made from, the
    file's budgets must be those. Returns (ids, 0-based groups, budgets ε_i) in file order; raises
    :class:`BudgetError`."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise BudgetError(f"cannot read groups file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BudgetError(f"groups file {path} is not a text file") from None
    missing = [c for c in ("client_id", "epsilon", "group") if rows and c not in rows[0]]
    if not rows or missing:
        raise BudgetError(f"groups file {path}: needs columns client_id,epsilon,group (hdp-plan assign --output)")
    ids, eps, groups = [], [], []
    count = len(group_epsilons)
    for line, row in enumerate(rows, start=2):
        try:
            cid, e, g = row["client_id"].strip(), float(row["epsilon"]), int(row["group"])
        except (TypeError, ValueError, AttributeError):
            raise BudgetError(
                f"groups file {path}, line {line}: epsilon must be a number and group an integer"
            ) from None
        if not 1 <= g <= count:
            raise BudgetError(f"groups file {path}, line {line}: group {g} is not one of the plan's 1..{count}")
        if not e >= group_epsilons[g - 1]:
            raise BudgetError(f"groups file {path}, line {line}: client {cid} has budget ε={e:g} below its group "
                              f"{g}'s ε={group_epsilons[g - 1]:g}")  # fmt: skip
        stated = row.get("group_epsilon")
        if stated not in (None, "") and not math.isclose(float(stated), group_epsilons[g - 1], rel_tol=1e-12):
            raise BudgetError(f"groups file {path}, line {line}: group_epsilon {stated} is not group {g}'s "
                              f"ε={group_epsilons[g - 1]:g} in the plan")  # fmt: skip
        ids.append(cid)
        eps.append(e)
        groups.append(g - 1)
    _check_ids(ids, str(path))
    if digest is not None and budgets_digest(ids, eps) != digest:
        raise BudgetError(f"groups file {path}: its budgets are not those the plan was made from (digest mismatch); "
                          "assign the plan's own budgets file")  # fmt: skip
    return ids, np.asarray(groups, dtype=np.int64), np.asarray(eps, dtype=float)


# --------------------------------------------------------------------------------------------- scoring


def budget_score(epsilon: np.ndarray | float, delta: float) -> np.ndarray:
    """f(ε) = ε²/(ε + 2 log(1/δ)): a group of size g and budget ε adds g²·f(ε)/(7T) to H."""
    e = np.asarray(epsilon, dtype=float)
    return e * e / (e + 2.0 * math.log(1.0 / delta))


def closed_form_noise_term(sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> float:
    """The grouping-dependent part μ5/(R²H) of the closed-form optimum (μ4/R does not depend on the groups)."""
    g = np.asarray(sizes, dtype=float)
    h = float(np.sum(g * g * budget_score(np.asarray(epsilons), config.delta))) / (7.0 * config.rounds)
    total = config.q * float(g.sum())
    return config.coefficients.mu5 / (total * total * h)


def closed_form_objective(sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> float:
    """Problem 1's optimum under Theorem 1's bound with φ = 0, ignoring q_m ≤ 1: μ4/R + μ5/(R²H)."""
    total = config.q * float(sum(sizes))
    return config.coefficients.mu4 / total + closed_form_noise_term(sizes, epsilons, config)


def closed_form_q(sizes: Sequence[int], epsilons: Sequence[float], config: PlanConfig) -> np.ndarray:
    """The q_m of that optimum: r_m ∝ |G_m|/√a_m with Σ r_m = qn (may exceed 1 for tiny groups)."""
    g = np.asarray(sizes, dtype=float)
    e = np.asarray(epsilons, dtype=float)
    a = 7.0 * config.rounds * (e + 2.0 * math.log(1.0 / config.delta)) / (e * e)
    r = g / np.sqrt(a)
    r = r * config.q * g.sum() / r.sum()
    return r / g


def closed_form_check(groups: Groups, config: PlanConfig) -> tuple[float, float]:
    """(closed form J*, SamplingProblem's solved objective) for ``groups``; they agree to O(B²/μ4)."""
    from hdp_planner.planning.plan import sigma2_model
    from hdp_planner.planning.problem import SamplingProblem

    problem = SamplingProblem(groups.sizes, config.q, sigma2_model(groups, config), config.coefficients)
    return closed_form_objective(groups.sizes, groups.epsilons, config), problem.solve().objective


# --------------------------------------------------------------------------------------------- grouping


@dataclass(frozen=True, eq=False)
class Grouping:
    """A grouping of clients by budget.

    ``boundaries`` are the M − 1 thresholds ε_2 < … < ε_M: a client with budget b joins group
    ``#(thresholds ≤ b)`` (0-based), the group whose ε is the largest ≤ b (:func:`assign_to_groups` applies
    it per client). ``unused[m]`` is Σ_{i ∈ G_m} (ε_i − ε_m), the budget the group leaves on the table.
    ``objective`` is the closed-form Problem 1 optimum used to compare groupings (see the module docstring)
    and ``noise_term`` its grouping-dependent part μ5/(R²H). Nothing in it grows with the number of clients.
    """

    method: str
    groups: Groups
    boundaries: tuple[float, ...]
    max_budget: tuple[float, ...]
    unused: tuple[float, ...]
    total_unused: float
    objective: float
    noise_term: float

    @property
    def count(self) -> int:
        return self.groups.count

    def to_dict(self) -> dict[str, object]:
        """The ``grouping`` object recorded in plan.json."""
        return {
            "method": self.method,
            "clients": self.groups.n,
            "epsilons": list(self.groups.epsilons),
            "sizes": list(self.groups.sizes),
            "boundaries": list(self.boundaries),
            "max_budget": list(self.max_budget),
            "unused_budget": list(self.unused),
            "total_unused_budget": self.total_unused,
            "closed_form_objective": self.objective,
            "closed_form_noise_term": self.noise_term,
        }


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
    groups = Groups(tuple(float(e) for e in group_eps), sizes)
    boundaries = tuple(float(e) for e in group_eps[1:])
    return Grouping(
        method=method,
        groups=groups,
        boundaries=boundaries,
        max_budget=tuple(float(values[b - 1]) for b in ends),
        unused=unused,
        total_unused=float(math.fsum(unused)),
        objective=closed_form_objective(sizes, groups.epsilons, config),
        noise_term=closed_form_noise_term(sizes, groups.epsilons, config),
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


@dataclass(frozen=True)
class _BudgetIndex:
    """A perfect hash of known distinct budgets: slot = (bits · mult) >> shift on each float's 64 bits
    (multiply-shift), ``table[slot]`` the budget's position, -1 where no budget hashes."""

    keys: np.ndarray  # the budgets' bits (uint64), ascending in value
    mult: np.uint64
    shift: np.uint64
    table: np.ndarray

    @classmethod
    def build(cls, values: np.ndarray) -> _BudgetIndex | None:
        """An index of ``values`` (distinct, positive), or None above :data:`HASH_LIMIT` values."""
        if len(values) > HASH_LIMIT:
            return None
        keys = values.view(np.uint64)
        bits = max(8, 2 * max(1, len(values) - 1).bit_length() + 1)  # table ≥ 2K²: a random mult rarely collides
        shift = np.uint64(64 - bits)
        for mult in np.random.default_rng(len(values)).integers(1, 2**63, 64, dtype=np.uint64) | np.uint64(1):
            slots = (keys * mult) >> shift
            if len(np.unique(slots)) == len(keys):
                table = np.full(1 << bits, -1, dtype=np.int32)
                table[slots] = np.arange(len(keys), dtype=np.int32)
                return cls(keys, mult, shift, table)
        return None

    def count(self, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the budgets of ``part`` not in the index, how many of each indexed budget ``part`` holds)."""
        if not len(self.keys):
            return part, np.zeros(0, dtype=np.int64)
        bits = part.view(np.uint64)
        where = self.table[(bits * self.mult) >> self.shift]
        known = (self.keys[where] == bits) & (where >= 0)
        if known.all():
            return part[:0], np.bincount(where, minlength=len(self.keys))
        return part[~known], np.bincount(where[known], minlength=len(self.keys))


def _run_lengths(part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of ``part`` (ascending) and their counts, by one sort."""
    part = np.sort(part)
    first = np.flatnonzero(np.concatenate(([True], part[1:] != part[:-1])))
    return part[first], np.diff(np.append(first, len(part)))


def _merge(values: Sequence[np.ndarray], counts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One histogram from several (distinct values, counts) pieces."""
    distinct, where = np.unique(np.concatenate(values), return_inverse=True)
    return distinct, np.bincount(where, weights=np.concatenate(counts), minlength=len(distinct)).astype(np.int64)


def budget_histogram(eps: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct budgets (ascending) and how many clients hold each, streamed over ``eps`` in chunks of
    ``HISTOGRAM_CHUNK`` clients: besides the input, memory is O(chunk + distinct budgets), flat in n.

    Budgets already seen are counted through a perfect hash of their bits (:class:`_BudgetIndex`: a few integer
    operations per client instead of a sort); new ones are sorted in and the index rebuilt. Above
    :data:`HASH_LIMIT` distinct budgets every chunk is sorted and the pieces merged at the end.
    Raises :class:`BudgetError` if there is no budget or one is not a positive finite number.
    """
    eps = np.ascontiguousarray(eps, dtype=float)
    if eps.ndim != 1 or len(eps) == 0:
        raise BudgetError("no client budgets given")
    values, counts = np.zeros(0), np.zeros(0, dtype=np.int64)
    index = _BudgetIndex.build(values)
    pieces: list[tuple[np.ndarray, np.ndarray]] = []  # sorted chunks, once there are too many budgets to hash
    for start in range(0, len(eps), HISTOGRAM_CHUNK):
        part = eps[start : start + HISTOGRAM_CHUNK]
        if not (part.min() > 0 and np.isfinite(part.max())):  # a NaN makes both tests fail
            raise BudgetError("every client budget ε must be a positive finite number")
        if index is None:
            pieces.append(_run_lengths(part))
            continue
        part, found = index.count(part)
        counts = counts + found
        if len(part):
            new_values, new_counts = _run_lengths(part)
            values, counts = _merge((values, new_values), (counts, new_counts))
            index = _BudgetIndex.build(values)
    if pieces:
        values, counts = _merge((values, *(v for v, _ in pieces)), (counts, *(c for _, c in pieces)))
    return values, counts


def groups_from_budgets(
    eps: Sequence[float] | np.ndarray,
    groups: int | None,
    method: str,
    config: PlanConfig,  # its n must be the number of clients
    progress: Callable[[str], None] | None = None,
) -> Grouping:
    """Group clients with budgets ``eps`` into ``groups`` groups (None: choose M by the objective: the
    fewest M ≤ min(AUTO_CAP, distinct budgets) whose closed-form H is within AUTO_TOL of the best).

    ``config`` supplies δ, T, q, η, τ for the objective; ``config.n`` must equal ``len(eps)``. Only the budget
    histogram (:func:`budget_histogram`) is used: see :func:`groups_from_histogram`.
    """
    values, counts = budget_histogram(eps)
    return groups_from_histogram(values, counts, groups, method, config, progress)


def groups_from_histogram(
    values: np.ndarray,
    counts: np.ndarray,
    groups: int | None,
    method: str,
    config: PlanConfig,
    progress: Callable[[str], None] | None = None,
) -> Grouping:
    """:func:`groups_from_budgets` from the distinct budgets ``values`` (ascending, positive) and their client
    counts: time and memory depend on the number of distinct budgets, not on the number of clients."""
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
    score = budget_score(values, config.delta)
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


# --------------------------------------------------------------------------------------------- assigning


@dataclass(frozen=True, eq=False)
class Assignment:
    """Clients assigned to a plan's groups: 0-based group per client, and unused budget per group."""

    group: np.ndarray
    group_epsilon: np.ndarray
    counts: tuple[int, ...]
    unused: tuple[float, ...]
    total_unused: float


def assign_to_groups(eps: np.ndarray, group_epsilons: Sequence[float], ids: Sequence[str]) -> Assignment:
    """Each client joins the group (in the plan's order) whose ε is the largest ≤ its budget."""
    ge = np.asarray(group_epsilons, dtype=float)
    order = np.argsort(ge, kind="stable")
    sorted_eps = ge[order]
    pos = np.searchsorted(sorted_eps, eps, side="right") - 1
    if np.any(pos < 0):
        i = int(np.flatnonzero(pos < 0)[0])
        raise BudgetError(
            f"client {ids[i]!r} has budget ε = {eps[i]:g}, below the strictest group's ε = {sorted_eps[0]:g}"
        )
    # ties in the plan's ε: the first listed group with that ε
    first = {}
    for j in order[::-1]:
        first[ge[j]] = j
    group = np.asarray([first[v] for v in sorted_eps], dtype=np.int64)[pos]
    m = len(ge)
    counts = np.bincount(group, minlength=m)
    unused = np.bincount(group, weights=eps - ge[group], minlength=m)
    return Assignment(
        group, ge[group], tuple(int(c) for c in counts), tuple(float(u) for u in unused), float(math.fsum(unused))
    )


# --------------------------------------------------------------------------------------------- writing
