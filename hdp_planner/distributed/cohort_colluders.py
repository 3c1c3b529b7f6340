"""What the cohort rule's uniform cohorts mean for colluders: the hypergeometric tail of the colluders in an honest
client's cohort (:mod:`hdp_planner.distributed.cohort_rule`, Claim 5 of the trust model) and the group bound a
per-cohort bound k stands for. Apart from the rule itself, which every node runs, so that a node need not load SciPy.
"""

from __future__ import annotations

from scipy import stats


def colluder_tail(*, size: int, colluders: int, cohort: int, tolerated: int) -> float:
    """P(more than ``tolerated`` colluders among the m − 1 other members of an honest client's cohort), the group of
    ``size`` holding ``colluders`` colluders: the hypergeometric law of m − 1 draws from the size − 1 others."""
    if not 0 <= colluders <= size - 1 or not 1 <= cohort <= size:
        raise ValueError(f"{colluders} colluders and a cohort of {cohort} in a group of {size}")
    return float(stats.hypergeom(size - 1, colluders, cohort - 1).sf(tolerated))


def tolerated_group_colluders(*, size: int, cohort: int, tolerated: int, memberships: int, delta: float) -> int:
    """The most colluders a group of ``size`` may hold for the chance that any of an honest client's ``memberships``
    cohorts of ``cohort`` holds more than ``tolerated`` of them to stay at most ``delta`` (a union bound over its K
    cohorts of :func:`colluder_tail`): what a per-cohort bound k means as a bound on the group."""
    best = 0
    for colluders in range(size):
        if memberships * colluder_tail(size=size, colluders=colluders, cohort=cohort, tolerated=tolerated) > delta:
            break
        best = colluders
    return best
