"""The selection paper's record-level noise (Xu, Zhang and Huang, "Tackling privacy heterogeneity in differentially
private federated learning"), one client at a time, and the count of local steps it is calibrated for.

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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import numpy as np

from hdp_planner.accounting.calibration import calibrate_sigma

__all__ = [
    "COUNT_RULE",
    "SELECTION_FAILURE",
    "NoiseRule",
    "check_count",
    "inverse_subsampled_epsilon",
    "paper_noise_factor",
    "record_noise_multiplier",
    "selection_counts",
]

NoiseRule = Literal["paper", "exact"]


def check_count(name: str, value: int, *, least: int = 1) -> None:
    """Raise ValueError unless ``value`` is an integer ≥ ``least`` (a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer ≥ {least}, got {value}")


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


def record_noise_multiplier(epsilon: float, *, delta: float, rate: float, steps: int, rule: NoiseRule) -> float:
    """Noise multiplier z of one client's ``steps`` local DP-SGD steps at example sampling rate ``rate``:
    the noise std on the averaged clipped gradient is σ = z·C/(r|M|), linear in the clip bound C.

    ``paper``: z = sqrt(8·steps·log(e + ε'/δ'))/ε' (eqs. 6-7 with steps = T_k T^l); ``exact``: the smallest z
    whose Poisson(r)-subsampled Gaussian, composed ``steps`` times, meets (ε, δ) by RDP.
    """
    check_count("steps", steps)
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
    p: Sequence[float] | np.ndarray, *, rounds: int, clients_per_round: int, failure: float = SELECTION_FAILURE
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
