"""The privacy ledger at scale: ``ledger check`` (the whole hash chain verified, every client's lifetime spending
composed), one round's release (the chain verified, one event appended) and a run's start, on a ledger of
``--runs`` runs × ``--rounds`` rounds × the plan's groups (FMNIST's n = 6000 clients in 3 groups by default), every
round released. Also the ε the ledger reports for a PLD plan spending its whole budget, against RDP's. Prints the
load average beside every figure; times are the median and minimum of ``--repeat`` interleaved runs. Usage::

    PYTHONPATH=. nice -n 10 python benchmarks/bench_ledger.py [--runs 100] [--rounds 50] [--n 6000] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert

from hdp_planner import plan
from hdp_planner.accounting.calibration import epsilons_spent
from hdp_planner.ledger.chain import next_event
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.state import run_event
from hdp_planner.ledger.store import Ledger, events
from hdp_planner.report.results import Result, Table, render_result, write_result


def _clients(p) -> tuple[dict[str, int], dict[str, float]]:
    """The simulation's clients, with budgets 1000 times the plan's: every run is composed, none refused."""
    membership, budgets = simulated_clients(p, p.groups)
    return membership, {c: 1000 * e for c, e in budgets.items()}


def _fill(path: str, p, runs: int, rounds: int) -> Ledger:
    """``runs`` finished runs of ``rounds`` released rounds, appended as the ledger appends them (its events, its
    chain), in one transaction."""
    membership, budgets = _clients(p)
    costs = round_costs(p, p.groups.name, start=0, rounds=rounds)
    book = Ledger(path)
    with book.engine.begin() as conn:
        last = None
        for i in range(runs):
            run = run_event(run_id=f"run-{i}", federation="bench", label="bench", plan_sha256="0" * 64, start=0,
                            started=float(i), delta=p.config.delta, membership=membership, budgets_of=budgets,
                            planned=costs)  # fmt: skip
            appended = [("run", run), *(("release", {"run_id": f"run-{i}", "round": r}) for r in range(rounds)),
                        ("finish", {"run_id": f"run-{i}", "given_back": 0})]  # fmt: skip
            for kind, data in appended:
                last = next_event(last, kind, data)
                conn.execute(insert(events).values(seq=last.seq, kind=last.kind, body=last.body, prev=last.prev,
                                                   digest=last.digest))  # fmt: skip
    return book


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--n", type=int, default=6000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    p = plan((0.5, 1.5, 3.0), a.n, rounds=a.rounds, q=0.02, clip=1.5)
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "l.sqlite")
        book = _fill(path, p, a.runs, a.rounds)
        report = book.check_chain()
        assert report.problem is None, report.problem
        size = os.path.getsize(path)
        membership, budgets = _clients(p)
        times: dict[str, list[float]] = {"check": [], "release": [], "start_run": []}
        loads = []
        for _ in range(a.repeat):
            loads.append(os.getloadavg()[0])
            times["check"].append(_timed(lambda: (book.check_chain(), book.state().spending())))
            run_id = book.start_run(federation="bench", label="timed", plan_sha256="0" * 64, membership=membership,
                                    budgets_of=budgets, delta=p.config.delta,
                                    planned=round_costs(p, p.groups.name, start=0, rounds=1))  # fmt: skip
            times["start_run"].append(_timed(lambda: book.start_run(
                federation="bench", label="timed", plan_sha256="0" * 64, membership=membership, budgets_of=budgets,
                delta=p.config.delta, planned=round_costs(p, p.groups.name, start=0, rounds=1))))  # fmt: skip
            times["release"].append(_timed(lambda run_id=run_id: book.release(run_id, 0)))
    pld = plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0, accountant="pld")
    with tempfile.TemporaryDirectory() as folder:
        book = Ledger(str(Path(folder) / "l.sqlite"))
        membership, budgets = simulated_clients(pld, pld.groups)
        run_id = book.start_run(federation="f", label="pld", plan_sha256="0" * 64, membership=membership,
                                budgets_of=budgets, delta=pld.config.delta,
                                planned=round_costs(pld, pld.groups.name, start=0, rounds=4))  # fmt: skip
        for r in range(4):
            book.release(run_id, r)
        spent = {s.client_id: s.epsilon_spent for s in book.spending()}
        ledger_eps = [spent[str(sum(pld.groups.size[:m]))] for m in range(3)]
    g = pld.groups
    rdp = epsilons_spent(noise_multipliers=g.noise_multiplier, q=g.q, rounds=4, delta=pld.config.delta)
    t = {k: (statistics.median(v), min(v)) for k, v in times.items()}
    scale = Table(
        caption=f"{a.runs} runs × {a.rounds} rounds × 3 groups of {a.n} clients ({report.events} events, "
        f"{size / 1e6:.1f} MB SQLite); seconds, median and minimum of {a.repeat}",
        columns=("operation", "median s", "min s"),
        rows=tuple((name, f"{med:.3g}", f"{low:.3g}") for name, (med, low) in (
            ("ledger check (chain verified, every client composed)", t["check"]),
            ("a run's start (chain verified, members composed, reserved)", t["start_run"]),
            ("one round's release (chain verified, one event appended)", t["release"])))
    )  # fmt: skip
    eps = Table(
        caption="A PLD plan (ε 1, 2, 4; n 120; T 4; q 0.2) spending its whole budget: ε per group",
        columns=("group", "budget", "planned (PLD)", "ledger", "RDP"),
        rows=tuple((str(m + 1), f"{g.epsilon[m]:g}", f"{g.epsilon_spent[m]:.6g}", f"{ledger_eps[m]:.6g}",
                    f"{rdp[m]:.4g}") for m in range(3)),
    )  # fmt: skip
    notes = (f"load average before each timed repeat: {', '.join(f'{x:.1f}' for x in loads)}",)
    result = Result(name="bench_ledger", title="The privacy ledger at scale", tables=(scale, eps), notes=notes)
    print(render_result(result))
    if a.record:
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
