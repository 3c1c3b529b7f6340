"""The privacy ledger: composed spending across runs, refusal before round 1, and nothing lost under concurrency, a
killed run, or a ledger that cannot be written. SQLite always; PostgreSQL where Debian's server is installed."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner.ledger.runs import default_ledger, round_costs, simulated_clients
from hdp_planner.ledger.store import GroupRound, Ledger, LedgerError, compose
from hdp_planner.planfile.document import save_plan
from hdp_planner_cli.app import app

runner = CliRunner()
PG_BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), default=Path("/usr/lib/postgresql/none/bin"))


def _run_args(p, rounds=None):
    membership, budgets = simulated_clients(p, p.groups)
    return dict(federation="f", membership=membership, budgets_of=budgets, delta=p.config.delta,
                planned=round_costs(p, p.groups.name, start=0, rounds=rounds or p.config.rounds))  # fmt: skip


@pytest.fixture(scope="module")
def small():
    return plan((1.0, 2.0), 40, rounds=10, q=0.2, clip=1.0)


def _start(book, p, rounds=None, label="run"):
    return book.start_run(label=label, plan_sha256="0" * 64, **_run_args(p, rounds))


def check_ledger(url: str, p) -> None:
    """Two runs of half the plan compose to the plan's ε; a third is refused before round 1."""
    book = Ledger(url)
    for _ in range(2):
        run_id = _start(book, p, rounds=5)
        for r in range(5):
            book.release(run_id, r)
        book.finish(run_id)
    spent = {s.client_id: s for s in book.spending("f")}
    for m, eps in enumerate(p.groups.epsilon):
        client = spent[str(sum(p.groups.size[:m]))]
        assert client.released_rounds == 10 and client.reserved_rounds == 0
        assert client.epsilon_spent == pytest.approx(p.groups.epsilon_spent[m], rel=1e-6)  # 10 rounds: the plan's ε
        assert client.epsilon_spent <= eps * (1 + 1e-9)
    with pytest.raises(LedgerError, match="refused before round 1"):
        _start(book, p, rounds=1)


def test_sqlite_ledger_composes_runs_and_refuses_past_the_budget(tmp_path, small):
    check_ledger(str(tmp_path / "ledger.sqlite"), small)


def test_a_client_has_one_budget_two_plans_that_disagree_are_refused_naming_both(tmp_path, small):
    book = Ledger(str(tmp_path / "l.sqlite"))
    _start(book, small, rounds=1)
    stricter = plan((0.5, 2.0), 40, rounds=10, q=0.2, clip=1.0)  # client 0: ε 1 in the ledger, 0.5 in this plan
    with pytest.raises(LedgerError, match=r"client 0 has the lifetime budget ε 1 .* and ε 0\.5 in this run's plan"):
        _start(book, stricter, rounds=1)
    with pytest.raises(LedgerError, match="19 more clients"):
        book.would_exceed(**_run_args(stricter, 1))
    assert len(book.runs()) == 1 and {s.epsilon_budget for s in book.spending()} == {1.0, 2.0}  # nothing written


def test_a_ledger_never_holds_a_simulations_clients_beside_real_ones(tmp_path, small):
    simulated, real = Ledger(str(tmp_path / "sim.sqlite")), Ledger(str(tmp_path / "real.sqlite"))
    args = _run_args(small, 1)
    simulated.start_run(label="a simulation", plan_sha256="0" * 64, simulated=True, **args)
    real.start_run(label="real clients", plan_sha256="0" * 64, simulated=False, **args)
    with pytest.raises(LedgerError, match=r"holds a simulation's clients .*: real clients are never written"):
        simulated.start_run(label="real clients", plan_sha256="0" * 64, simulated=False, **args)
    with pytest.raises(LedgerError, match=r"holds real clients .*: a simulation's clients 0\.\.39 are never written"):
        real.start_run(label="a simulation", plan_sha256="0" * 64, simulated=True, **args)
    simulated.start_run(label="again", plan_sha256="0" * 64, simulated=True, **args)  # the same kind: charged
    assert [len(b.runs()) for b in (simulated, real)] == [2, 1]


def test_train_charges_the_ledger_and_ledger_show_reports_each_client(tmp_path, small):
    pytest.importorskip("torch")
    plan_path = tmp_path / "plan.json"
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0), plan_path)
    ledger = tmp_path / "l.sqlite"
    common = ["train", str(plan_path), "--method", "gdpfed+", "--dataset", "digits", "--ledger", str(ledger)]
    for i in (1, 2):
        result = runner.invoke(app, [*common, "--rounds", "2", "--out", str(tmp_path / f"r{i}")])
        assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["ledger", "show", str(plan_path), "--ledger", str(ledger), "--json"])
    doc = json.loads(shown.output)
    assert len(doc) == 120 and {c["released_rounds"] for c in doc} == {4}
    assert max(c["epsilon_spent"] / c["epsilon_budget"] for c in doc) == pytest.approx(1.0, rel=1e-3)
    refused = runner.invoke(app, [*common, "--out", str(tmp_path / "r3")])
    assert refused.exit_code == 2 and "refused before round 1" in refused.output
    assert not (tmp_path / "r3" / "metrics.json").exists()
    check = runner.invoke(app, ["ledger", "check", str(plan_path), "--ledger", str(ledger)])
    assert check.exit_code == 1 and "cannot take part" in check.output


def test_compare_charges_every_run_to_the_same_clients(tmp_path):
    """compare --ledger: each (method, seed) run is charged to the same simulated clients (off by default), so the
    second method of a grid that spends the whole budget is refused before its round 1."""
    pytest.importorskip("torch")
    ledger = tmp_path / "l.sqlite"
    args = ["compare", "--dataset", "digits", "--methods", "dp-fedavg,gdpfed+", "--seeds", "1", "--rounds", "2",
            "--eps", "1,2,4"]  # fmt: skip
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "off")])
    assert result.exit_code == 0, result.output
    assert not ledger.exists()
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "on"), "--ledger", str(ledger)])
    assert result.exit_code == 2 and "refused before round 1" in result.output
    assert "--seeded-noise" not in result.output  # compare's runs are seeded already: only --ledger helps
    assert (tmp_path / "on" / "dp-fedavg" / "seed0" / "run.json").is_file()
    assert not (tmp_path / "on" / "gdpfed+" / "seed0" / "metrics.json").exists()
    doc = json.loads(runner.invoke(app, ["ledger", "show", str(tmp_path / "on" / "plan.json"), "--ledger",
                                         str(ledger), "--json"]).output)  # fmt: skip
    assert {c["released_rounds"] for c in doc} == {2}  # the first run's two rounds, every client


def _race(url: str, p, federation: str, barrier, results) -> None:
    book = Ledger(url)
    args = {**_run_args(p), "federation": federation}
    barrier.wait()
    try:
        book.start_run(label="race", plan_sha256="0" * 64, **args)
        results.put("started")
    except LedgerError:
        results.put("refused")


def _two_at_once(url: str, p, federation: str) -> list[str]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(url, p, federation, barrier, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
    return sorted(results.get(timeout=5) for _ in range(2))


def test_two_runs_at_once_never_overspend(tmp_path, small):
    """The budget admits one run of the plan: of two started at the same instant, exactly one gets it."""
    url = str(tmp_path / "race.sqlite")
    Ledger(url)
    assert _two_at_once(url, small, "f") == ["refused", "started"]


def _killed(url: str, p) -> None:
    book = Ledger(url)
    run_id = _start(book, p)
    book.release(run_id, 0)
    book.release(run_id, 1)
    os.kill(os.getpid(), signal.SIGKILL)  # mid-run, between releases


def test_a_run_killed_mid_round_keeps_its_reservation(tmp_path, small):
    url = str(tmp_path / "killed.sqlite")
    proc = multiprocessing.get_context("spawn").Process(target=_killed, args=(url, small))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL
    spent = Ledger(url).spending("f")
    assert {(s.released_rounds, s.reserved_rounds) for s in spent} == {(2, 8)}  # nothing lost: all 10 rounds count
    assert all(s.epsilon_spent == pytest.approx(e, rel=1e-6) for s, e in
               zip(spent, [small.groups.epsilon_spent[0 if int(s.client_id) < 20 else 1] for s in spent]))  # fmt: skip


@pytest.mark.slow  # a real run of 60 rounds, killed and resumed: about 25 s
def test_a_training_run_killed_mid_run_keeps_its_charge_and_resumes_under_it(tmp_path):
    """A real ``hdp-plan train`` killed with SIGKILL after a few rounds: its released rounds stay charged and its
    reservation stays counted. ``--resume`` closes the killed run's reservation in the transaction that opens its
    own: it continues when the checkpoint holds every released round; when the kill fell between a round's release
    and its checkpoint, the ledger has released more rounds than the checkpoint holds: refused, the round staying
    charged."""
    pytest.importorskip("torch")
    from hdp_planner_train.simulator import checkpoint

    rounds = 60
    path = tmp_path / "plan.json"
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=rounds, q=0.2, clip=1.0), path)
    ledger, out = tmp_path / "l.sqlite", tmp_path / "run"
    args = [sys.executable, "-m", "hdp_planner", "train", str(path), "--dataset", "digits", "--ledger", str(ledger),
            "--out", str(out), "--eval-every", "1000"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    killed = Ledger(str(ledger)).spending("simulation")
    released = {s.released_rounds for s in killed}
    assert len(released) == 1 and {s.released_rounds + s.reserved_rounds for s in killed} == {rounds}
    released, saved = released.pop(), checkpoint.load(out)["next_round"]
    assert saved <= released <= saved + 1
    done = subprocess.run([*args, "--resume"], capture_output=True, text=True, timeout=300)
    after = Ledger(str(ledger)).spending("simulation")
    assert all(s.reserved_rounds == 0 for s in after)
    if released == saved:
        assert done.returncode == 0, done.stderr
        assert {s.released_rounds for s in after} == {rounds}
    else:
        assert done.returncode == 2 and "but its checkpoint holds" in done.stderr
        assert {s.released_rounds for s in after} == {released}


def test_a_ledger_that_cannot_be_written_refuses_the_run(tmp_path, small):
    """The refusal names the ledger and gives the database's own one-line reason."""
    path = tmp_path / "ro.sqlite"
    Ledger(str(path))
    readonly = f"sqlite:///file:{path}?mode=ro&uri=true"
    with pytest.raises(LedgerError) as caught:
        _start(Ledger(readonly), small)
    assert str(caught.value) == f"cannot write the privacy ledger {readonly}: attempt to write a readonly database"
    missing = tmp_path / "missing-dir" / "sub" / "l.sqlite"
    with pytest.raises(LedgerError) as caught:
        Ledger(str(missing))
    assert str(caught.value) == f"cannot open the privacy ledger {missing}: No such file or directory"
    with pytest.raises(LedgerError) as caught:
        Ledger(str(tmp_path / "none.sqlite"), create=False)
    assert (
        str(caught.value) == f"no privacy ledger at {tmp_path / 'none.sqlite'}"
        and not (tmp_path / "none.sqlite").exists()
    )


def test_runs_are_listed_in_the_order_they_started_and_by_federation(tmp_path, small):
    book = Ledger(str(tmp_path / "l.sqlite"))
    first = _start(book, small, rounds=1, label="one")
    book.release(first, 0)
    book.finish(first)
    membership, budgets = simulated_clients(small, small.groups)
    second = book.start_run(federation="g", label="two", plan_sha256="1" * 64, membership=membership,
                            budgets_of=budgets, delta=small.config.delta, start=3,
                            planned=round_costs(small, small.groups.name, start=3, rounds=5))  # fmt: skip
    runs = book.runs()
    assert [(r.run_id, r.federation, r.label, r.status, r.start, len(r.rounds)) for r in runs] == [
        (first, "f", "one", "finished", 0, 1),
        (second, "g", "two", "running", 3, 2),
    ]
    assert runs[0].plan_sha256 == "0" * 64 and runs[1].plan_sha256 == "1" * 64
    assert [r.run_id for r in book.runs("g")] == [second] and book.runs("h") == []
    assert runs[0].released_through == 1 and runs[1].released_through == 3


def test_the_default_ledger(monkeypatch, tmp_path):
    monkeypatch.setenv("HDP_PLANNER_LEDGER", "postgresql://ledger.example/db")
    assert default_ledger() == "postgresql://ledger.example/db"
    monkeypatch.setenv("HDP_PLANNER_LEDGER", "")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_ledger() == str(tmp_path / "xdg" / "hdp-planner" / "ledger.sqlite")
    monkeypatch.delenv("HDP_PLANNER_LEDGER")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_ledger() == str(tmp_path / "home" / ".local" / "share" / "hdp-planner" / "ledger.sqlite")


def test_a_run_stops_before_releasing_an_uncharged_round(tmp_path, small, monkeypatch):
    pytest.importorskip("torch")
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, run

    plan_path = tmp_path / "plan.json"
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=3, q=0.2, clip=1.0), plan_path)

    def broken(self, run_id, round_index):
        raise LedgerError("disk full")

    monkeypatch.setattr(Ledger, "release", broken)
    out = tmp_path / "run"
    cfg = configure(TrainConfig, method="gdpfed+", dataset="digits", out=str(out), progress=False,
                      ledger=str(tmp_path / "l.sqlite"))  # fmt: skip
    with pytest.raises(TrainError, match="stopped before round 1 was released: disk full"):
        run(cfg, plan_path)
    assert not (out / "metrics.json").exists() and not (out / "checkpoint.pt").exists()


def test_composition_is_dp_accountings(small):
    g = GroupRound(q=small.groups.q[0], noise_multiplier=small.groups.noise_multiplier[0])
    assert compose({g: 10}, small.config.delta) == pytest.approx(small.groups.epsilon_spent[0], rel=1e-6)
    assert compose({}, 1e-5) == 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL cluster (Debian's server, run as the postgres user), or a skip saying why."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL server not installed (Debian package postgresql)")
    pytest.importorskip("psycopg", reason="the PostgreSQL driver psycopg is not installed")
    if shutil.which("runuser") is None or os.geteuid() != 0:
        pytest.skip("needs root to run the server as the postgres user")
    base = Path(tempfile.mkdtemp(prefix="hdp-ledger-pg-"))
    shutil.chown(base, "postgres")
    port = _free_port()
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, str(PG_BIN / "initdb"), "-D", str(base / "data"), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)  # fmt: skip
    options = f"-p {port} -k {base} -c listen_addresses=127.0.0.1"
    start = [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(base / "data"), "-l", str(base / "log"), "-w", "-o", options]
    subprocess.run([*start, "start"], check=True, capture_output=True)
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(base / "data"), "-m", "immediate", "stop"],
                       capture_output=True)  # fmt: skip
        time.sleep(0.2)
        shutil.rmtree(base, ignore_errors=True)


def fresh_database(server: str, name: str) -> str:
    """A new, empty database on the test cluster (budgets are lifetime budgets of client ids: tests that reuse the
    simulated ids 0..n-1 need ledgers of their own)."""
    from sqlalchemy import create_engine, text

    engine = create_engine(server, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return server.rsplit("/", 1)[0] + "/" + name


def test_postgresql_ledger(postgres, small):
    """As on SQLite, and the chain holds there too: an edited event is found and refuses every run."""
    from sqlalchemy import text

    url = fresh_database(postgres, "composes")
    check_ledger(url, small)
    book = Ledger(url)
    assert book.check_chain().problem is None
    with book.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_events SET body = replace(body, :old, :new) WHERE seq = 3"),
                     {"old": '"round":1', "new": '"round":2'})  # fmt: skip
    assert "event 3 (release) was edited" in book.check_chain().problem
    with pytest.raises(LedgerError, match="is broken"):
        _start(book, small, rounds=1)


def test_postgresql_two_runs_at_once_never_overspend(postgres, small):
    assert _two_at_once(fresh_database(postgres, "race"), small, "race") == ["refused", "started"]


def test_distributed_rounds_compose_as_the_distributed_accounting():
    """Rounds of distributed discrete Gaussian noise (``tau_d``) compose as the planner's distributed accounting; a
    client with both kinds of rounds is charged at least what either kind alone would cost, and the generic bound
    used for mixing never reports less than dp-accounting's exact sampled Gaussian."""
    from hdp_planner.distributed.accounting import epsilon_third_parties
    from hdp_planner.ledger.composition import compose_distributed

    ddg, gauss = GroupRound(q=0.05, noise_multiplier=1.3, tau_d=1e-6), GroupRound(q=0.05, noise_multiplier=1.3)
    planned = epsilon_third_parties(noise_multiplier=1.3, q=0.05, rounds=20, delta=1e-5, tau_d=1e-6)
    assert compose({ddg: 20}, 1e-5) == pytest.approx(planned, rel=1e-12)
    mixed = compose({ddg: 10, gauss: 10}, 1e-5)
    assert compose({gauss: 20}, 1e-5) <= mixed <= compose({ddg: 20}, 1e-5) * (1 + 1e-12)
    assert compose_distributed({gauss: 20}, 1e-5) >= compose({gauss: 20}, 1e-5) * (1 - 1e-9)
