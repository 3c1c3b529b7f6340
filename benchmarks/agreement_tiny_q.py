"""RDP calibration against dp-accounting's ``calibrate_dp_mechanism`` on a grid of tiny-q settings.

    PYTHONPATH=. python benchmarks/agreement_tiny_q.py

Grid: q ∈ {1e-7, 1e-5, 1e-3}, ε ∈ {0.003, 0.01, 0.03}, T ∈ {1, 50, 1000}, δ ∈ {1e-4, 1e-6, 1e-9} (81 settings), where
small ε is met only through the KL branch. Each setting is counted as: within 1% of the reference; below it where
the closed-form bound of orders 1.1 … 2 certifies ε = 0 (``kl_certifies_zero``); above it where the reference's own
ε = 0 is refuted (``reference_kl_refuted``: every order it certifies with has a true RDP above the threshold); the
reference failing; or anything else (a disagreement to explain). Prints every setting that is not within 1%, then
the counts.
"""

from __future__ import annotations

import itertools

import dp_accounting as dpa
from dp_accounting.rdp import RdpAccountant

from hdp_planner.accounting.calibration import GaussianRounds, dp_event, quiet_dp_accounting, reference_kl_refuted
from hdp_planner.accounting.rdp import calibrate_sigma_rdp, kl_certifies_zero

GRID = list(itertools.product((0.003, 0.01, 0.03), (1e-4, 1e-6, 1e-9), (1e-7, 1e-5, 1e-3), (1, 50, 1000)))


def classify(eps: float, delta: float, q: float, rounds: int) -> tuple[str, float, float]:
    """(verdict, our σ, the reference σ) for one setting."""
    ours = calibrate_sigma_rdp(epsilon=eps, delta=delta, q=q, rounds=rounds)
    try:
        with quiet_dp_accounting():
            ref = float(
                dpa.calibrate_dp_mechanism(RdpAccountant, lambda s: dp_event(s, q=q, rounds=rounds), eps, delta)
            )
    except Exception:  # its bracket search stops at 2^30
        return "reference failed", ours, float("nan")
    if abs(ours / ref - 1) <= 0.01:
        return "within 1%", ours, ref
    if ours > ref and reference_kl_refuted(GaussianRounds(noise_multiplier=ref, q=q, rounds=rounds), delta=delta):
        return "above: the reference's ε = 0 refuted", ours, ref
    if ours < ref and kl_certifies_zero([(ours, q, rounds)], delta):
        return "below: ε = 0 by the closed-form bound", ours, ref
    return "other", ours, ref


def main() -> None:
    counts: dict[str, int] = {}
    print("| ε | δ | q | T | σ ours | σ dp-accounting | ratio | verdict |")
    print("| --- " * 8 + "|")
    for eps, delta, q, rounds in GRID:
        verdict, ours, ref = classify(eps, delta, q, rounds)
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict != "within 1%":
            print(f"| {eps} | {delta:g} | {q:g} | {rounds} | {ours:.5g} | {ref:.5g} | {ours / ref:.3g} | {verdict} |")
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())), f"(of {len(GRID)})")


if __name__ == "__main__":
    main()
