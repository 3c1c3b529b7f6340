"""Benchmark hdp_planner's RDP/PLD calibration against dp-accounting's calibrate_dp_mechanism.

    PYTHONPATH=. python benchmarks/bench_calibration.py [--quick]

Prints, per setting, the reference and our σ (or q), the relative difference, ε of both according to
dp-accounting itself, both wall times and the speed ratio, then the geometric-mean / minimum speed-up.
Reference and ours run interleaved (reference, ours, reference, ours, …: ``--rounds`` rounds, 5 warm runs of ours
per round for RDP; PLD runs cold, its memo cleared), so both see the same load; times are medians, and the
speed-up of the minimum times is printed beside that of the medians. The load average is printed before and after.
The PLD reference runs dp-accounting's PLDAccountant at the discretization our calibration chose for ε (the
default 1e-4 unless ε is small), the same accountant. On a loaded machine, use ``--rounds 3`` or more.
"""

from __future__ import annotations

import argparse
import functools
import logging
import math
import os
import statistics
import time

import dp_accounting as dpa
from dp_accounting.mechanism_calibration import ExplicitBracketInterval
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from hdp_planner.accounting import pld
from hdp_planner.accounting.calibration import GaussianRounds, dp_event, quiet_dp_accounting, reference_epsilon
from hdp_planner.accounting.pld import calibrate_sigma_pld, discretization
from hdp_planner.accounting.rdp import calibrate_q_rdp, calibrate_sigma_rdp
from hdp_planner.report.results import Result, Table, write_result

# (epsilon, delta, q, rounds): ε 0.1–20, δ 1e-9–1e-3, q 1e-4–0.5, rounds 1–1e4
SIGMA_SETTINGS = [
    (0.1, 1e-5, 1e-4, 10000),
    (0.1, 1e-9, 0.01, 100),
    (0.3, 1e-6, 0.001, 1000),
    (0.5, 1e-5, 0.02, 50),
    (1.0, 1e-5, 0.01, 1000),
    (1.0, 1e-6, 0.3, 100),
    (1.0, 1e-9, 1e-4, 10000),
    (2.0, 1e-3, 0.5, 1),
    (2.0, 1e-7, 0.05, 300),
    (3.0, 1e-5, 0.1, 10),
    (4.0, 1e-8, 0.002, 5000),
    (5.0, 1e-5, 0.5, 1000),
    (8.0, 1e-4, 0.2, 30),
    (10.0, 1e-6, 0.001, 10000),
    (15.0, 1e-3, 0.05, 2),
    (20.0, 1e-9, 0.5, 10000),
    (0.03, 1e-9, 1e-7, 50),  # tiny q: ε = 0 by the KL branch (this raised "did not converge" before)
    (0.003, 1e-4, 1e-3, 1000),
]
# (epsilon, delta, sigma, rounds) — ε(q=1) > target in all of them
Q_SETTINGS = [
    (0.5, 1e-5, 1.0, 1000),
    (1.0, 1e-6, 0.8, 100),
    (1.0, 1e-9, 2.0, 10000),
    (3.0, 1e-5, 1.5, 500),
    (8.0, 1e-3, 0.7, 10),
    (0.2, 1e-7, 5.0, 2000),
]
PLD_SETTINGS = [
    (1.0, 1e-5, 0.01, 1000),
    (1.0, 1e-6, 0.3, 100),
    (4.0, 1e-7, 0.1, 50),
    (0.05, 1e-5, 0.01, 1000),  # small ε: a finer discretization (4.1e-5)
]


def ref_eps(sigma: float, q: float, rounds: int, delta: float, v: float | None = None) -> float:
    """dp-accounting's ε: RDP, or PLD at discretization v."""
    if v is None:
        return reference_epsilon(
            GaussianRounds(noise_multiplier=sigma, q=q, rounds=rounds), delta=delta, accountant="rdp"
        )
    with quiet_dp_accounting():
        return float(
            PLDAccountant(value_discretization_interval=v)
            .compose(dp_event(sigma, q=q, rounds=rounds))
            .get_epsilon(delta)
        )


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _interleaved(ref, ours, rounds: int, repeat: int) -> tuple[object, object, float, float, float, float]:
    """Both results and their median and minimum wall times: ``rounds`` rounds of one reference call then
    ``repeat`` calls of ours (after one warm-up call of ours), interleaved so that both see the same load."""
    ours_result = ours()
    ref_times, our_times = [], []
    for _ in range(rounds):
        ref_result, t = _timed(ref)
        ref_times.append(t)
        our_times += [_timed(ours)[1] for _ in range(repeat)]
    return (
        ref_result,
        ours_result,
        statistics.median(ref_times),
        min(ref_times),
        statistics.median(our_times),
        min(our_times),
    )


RECORDED: list[Table] = []
"""The tables printed so far, for ``--record``."""
SPEED_UPS: list[str] = []


def _cells(markdown_row: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in markdown_row.strip().strip("|").split("|"))


def _table(title: str, head: str, rows: list[tuple]) -> list[float]:
    print(f"\n## {title}\n")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(r[0])
    RECORDED.append(Table(caption=title, columns=_cells(head), rows=tuple(_cells(r[0]) for r in rows)))
    for label, ratios in (("medians", [r[1] for r in rows]), ("minimums", [r[2] for r in rows])):
        mean = math.exp(statistics.fmean(math.log(x) for x in ratios))
        line = f"speed-up of the {label}: geometric mean {mean:.0f}x, min {min(ratios):.0f}x, max {max(ratios):.0f}x"
        print(f"\n{line}")
        SPEED_UPS.append(f"{title}: {line}")
    return [r[1] for r in rows]


def _row(cells: str, t_ref: float, t_ref_min: float, t_ours: float, t_ours_min: float, ms: bool = True) -> tuple:
    unit = 1e3 if ms else 1.0
    line = (
        f"{cells} | {t_ref * unit:.{0 if ms else 2}f} | {t_ours * unit:.2f} | {t_ref / t_ours:.0f}x "
        f"| {t_ref_min / t_ours_min:.0f}x |"
    )
    return line, t_ref / t_ours, t_ref_min / t_ours_min


def bench_sigma_rdp(settings, repeat: int, rounds_ref: int) -> list[float]:
    rows = []
    for eps, delta, q, rounds in settings:
        ref, ours, t_ref, t_ref_min, t_ours, t_ours_min = _interleaved(
            lambda eps=eps, delta=delta, q=q, rounds=rounds: dpa.calibrate_dp_mechanism(
                RdpAccountant, lambda s: dp_event(s, q=q, rounds=rounds), eps, delta
            ),
            functools.partial(calibrate_sigma_rdp, epsilon=eps, delta=delta, q=q, rounds=rounds),
            rounds_ref,
            repeat,
        )
        e_ref, e_ours = ref_eps(ref, q, rounds, delta), ref_eps(ours, q, rounds, delta)
        assert e_ours <= eps, (eps, delta, q, rounds, ours, e_ours)
        cells = (
            f"| {eps:g} | {delta:.0e} | {q:g} | {rounds} | {ref:.6f} | {ours:.6f} | {ours / ref - 1:+.1e} "
            f"| {e_ref:.9f} | {e_ours:.9f}"
        )
        rows.append(_row(cells, t_ref, t_ref_min, t_ours, t_ours_min))
    head = (
        "| ε | δ | q | T | σ ref | σ ours | rel diff | ε(σ ref) | ε(σ ours) | ref ms | ours ms | speed-up (medians) "
        "| speed-up (minimums) |"
    )
    return _table("calibrate_sigma_rdp vs calibrate_dp_mechanism(RdpAccountant)", head, rows)


def bench_q_rdp(settings, repeat: int, rounds_ref: int) -> list[float]:
    rows = []
    for eps, delta, sigma, rounds in settings:
        ref, ours, t_ref, t_ref_min, t_ours, t_ours_min = _interleaved(
            lambda eps=eps, delta=delta, sigma=sigma, rounds=rounds: dpa.calibrate_dp_mechanism(
                RdpAccountant,
                lambda q: dp_event(sigma, q=q, rounds=rounds),
                eps,
                delta,
                bracket_interval=ExplicitBracketInterval(1e-12, 1.0),
                tol=1e-9,
            ),
            functools.partial(calibrate_q_rdp, epsilon=eps, delta=delta, noise_multiplier=sigma, rounds=rounds),
            rounds_ref,
            repeat,
        )
        e_ref, e_ours = ref_eps(sigma, ref, rounds, delta), ref_eps(sigma, ours, rounds, delta)
        assert e_ours <= eps, (eps, delta, sigma, rounds, ours, e_ours)
        cells = (
            f"| {eps:g} | {delta:.0e} | {sigma:g} | {rounds} | {ref:.6g} | {ours:.6g} | {ours / ref - 1:+.1e} "
            f"| {e_ref:.9f} | {e_ours:.9f}"
        )
        rows.append(_row(cells, t_ref, t_ref_min, t_ours, t_ours_min))
    head = (
        "| ε | δ | σ | T | q ref | q ours | rel diff | ε(q ref) | ε(q ours) | ref ms | ours ms | speed-up (medians) "
        "| speed-up (minimums) |"
    )
    return _table("calibrate_q_rdp vs calibrate_dp_mechanism over q (RdpAccountant, tol 1e-9)", head, rows)


def _cold_pld(eps: float, delta: float, q: float, rounds: int) -> float:
    pld._pld_epsilon.cache_clear()  # time the search, not the memo
    return calibrate_sigma_pld(epsilon=eps, delta=delta, q=q, rounds=rounds)


def bench_sigma_pld(settings, rounds_ref: int) -> list[float]:
    rows = []
    for eps, delta, q, rounds in settings:
        v = discretization(eps, delta=delta, rounds=rounds)
        ref, ours, t_ref, t_ref_min, t_ours, t_ours_min = _interleaved(
            lambda eps=eps, delta=delta, q=q, rounds=rounds, v=v: dpa.calibrate_dp_mechanism(
                lambda: PLDAccountant(value_discretization_interval=v),
                lambda s: dp_event(s, q=q, rounds=rounds),
                eps,
                delta,
            ),
            functools.partial(_cold_pld, eps, delta, q, rounds),
            rounds_ref,
            1,
        )
        e_ref, e_ours = ref_eps(ref, q, rounds, delta, v), ref_eps(ours, q, rounds, delta, v)
        assert e_ours <= eps, (eps, delta, q, rounds, ours, e_ours)
        cells = (
            f"| {eps:g} | {delta:.0e} | {q:g} | {rounds} | {v:.2g} | {ref:.6f} | {ours:.6f} | {ours / ref - 1:+.1e} "
            f"| {e_ref:.7f} | {e_ours:.7f}"
        )
        rows.append(_row(cells, t_ref, t_ref_min, t_ours, t_ours_min, ms=False))
    head = (
        "| ε | δ | q | T | v | σ ref | σ ours | rel diff | ε(σ ref) | ε(σ ours) | ref s | ours s | speed-up (medians) "
        "| speed-up (minimums) |"
    )
    return _table("calibrate_sigma_pld vs calibrate_dp_mechanism(PLDAccountant) at the same discretization", head, rows)


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small subset (~30 s)")
    parser.add_argument("--rounds", type=int, default=1, help="reference runs per setting (medians are reported)")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/bench_calibration.json")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # dp-accounting's "failed to converge" warnings (script only)
    if args.quick:
        sig, qs, plds, repeat = SIGMA_SETTINGS[4:8] + SIGMA_SETTINGS[-2:], Q_SETTINGS[:2], PLD_SETTINGS[1:2], 3
    else:
        sig, qs, plds, repeat = SIGMA_SETTINGS, Q_SETTINGS, PLD_SETTINGS, 5
    print(f"before: {_load()}")
    t0 = time.perf_counter()
    bench_sigma_rdp(sig, repeat, args.rounds)
    bench_q_rdp(qs, repeat, args.rounds)
    bench_sigma_pld(plds, args.rounds)
    print(f"\ntotal benchmark time {time.perf_counter() - t0:.0f} s; after: {_load()}")
    if args.record:
        result = Result(
            name="bench_calibration",
            title="Calibration against dp-accounting" + (" (--quick subset)" if args.quick else ""),
            tables=tuple(RECORDED),
            notes=(*SPEED_UPS, f"load after: {_load()}"),
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
