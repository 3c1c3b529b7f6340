"""The ledger is an append-only hash chain: a deleted or edited event, deleted charges, or a run moved to another
federation name are found by ``ledger check`` and refuse every run; a pinned head finds a removed tail; a ledger of
the unchained schema is copied into the chain; budgets are a client id's, whatever federation name a run uses; and
every ledger subcommand's bad input ends in one line."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner.ledger.chain import canonical, event_digest
from hdp_planner.ledger.composition import GroupRound
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.store import Ledger, LedgerError
from hdp_planner_cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def small():
    return plan((1.0, 2.0), 40, rounds=10, q=0.2, clip=1.0)


def _start(book, p, rounds, federation="f"):
    membership, budgets = simulated_clients(p, p.groups)
    return book.start_run(federation=federation, label="run", plan_sha256="0" * 64, membership=membership,
                          budgets_of=budgets, delta=p.config.delta,
                          planned=round_costs(p, p.groups.name, start=0, rounds=rounds))  # fmt: skip


def _ledger(tmp_path, p, runs=2, rounds=4):
    path = tmp_path / "l.sqlite"
    book = Ledger(str(path))
    for _ in range(runs):
        run_id = _start(book, p, rounds)
        for r in range(rounds):
            book.release(run_id, r)
        book.finish(run_id)
    book.engine.dispose()
    return path


def _sql(path, statement, *args):
    with sqlite3.connect(path) as db:
        db.execute(statement, args)


def _check(path, *extra):
    return runner.invoke(app, ["ledger", "check", "--ledger", str(path), *extra])


def _refused(path, p):
    with pytest.raises(LedgerError, match=r"is broken: .*refuses every run"):
        _start(Ledger(str(path)), p, 1)


def test_an_unbroken_chain_checks_and_prints_its_head(tmp_path, small):
    path = _ledger(tmp_path, small)
    done = _check(path)
    assert done.exit_code == 0, done.output
    assert "chain: 12 events unbroken" in done.output and "OK: 40 clients within budget" in done.output
    head = Ledger(str(path)).check_chain().head
    assert head in done.output and _check(path, "--head", head).exit_code == 0


@pytest.mark.parametrize(
    ("statement", "found"),
    [
        ("DELETE FROM ledger_events WHERE seq = 3", "event 3 deleted"),  # one release removed
        ("DELETE FROM ledger_events WHERE kind = 'release'", "deleted"),  # every charge removed
        ("DELETE FROM ledger_events WHERE seq <= 6", "event 1..6 deleted"),  # the first run removed
        (
            'UPDATE ledger_events SET body = replace(body, \'"federation":"f"\', \'"federation":"g"\') '
            "WHERE kind = 'run'",
            "was edited",
        ),  # runs moved to another federation name
        ("UPDATE ledger_events SET kind = 'finish' WHERE seq = 2", "was edited"),
    ],
)
def test_deleted_or_edited_events_are_found_and_refuse_every_run(tmp_path, small, statement, found):
    path = _ledger(tmp_path, small)
    _sql(path, statement)
    done = _check(path)
    assert done.exit_code == 1 and "FAIL the hash chain" in done.output and found in done.output, done.output
    _refused(path, small)


def test_a_run_under_way_refuses_to_release_once_the_chain_is_broken(tmp_path, small):
    path = _ledger(tmp_path, small, runs=1)
    book = Ledger(str(path))
    run_id = _start(book, small, 2)
    book.release(run_id, 0)
    _sql(path, "UPDATE ledger_events SET body = replace(body, '\"round\":1', '\"round\":0') WHERE seq = 3")
    with pytest.raises(LedgerError, match=r"is broken: event 3 \(release\) was edited"):
        book.release(run_id, 1)


def test_an_edit_with_its_digest_recomputed_breaks_the_next_link(tmp_path, small):
    """Someone who edits a run's σ and recomputes that event's digest: the next event no longer follows it."""
    path = _ledger(tmp_path, small)
    with sqlite3.connect(path) as db:
        seq, kind, body, prev = db.execute("SELECT seq, kind, body, prev FROM ledger_events WHERE seq = 1").fetchone()
        data = json.loads(body)
        data["rounds"] = [[[q, s * 10, t, a] for q, s, t, a in groups] for groups in data["rounds"]]
        body = canonical(data)
        digest = event_digest(seq=seq, kind=kind, prev=prev, body=body)
        db.execute("UPDATE ledger_events SET body = ?, digest = ? WHERE seq = 1", (body, digest))
    done = _check(path)
    assert done.exit_code == 1 and "event 2 does not follow event 1" in done.output
    _refused(path, small)


def test_a_removed_tail_is_found_by_the_pinned_head(tmp_path, small):
    """Deleting the last run's events leaves a shorter chain that is still unbroken. The machine that wrote them
    finds it by the head it recorded (tests/core/test_ledger_anchor.py); on a machine that never wrote the ledger
    only a head pinned before finds it. That is what the printed head is for."""
    path = _ledger(tmp_path, small)
    head = Ledger(str(path)).check_chain().head
    _sql(path, "DELETE FROM ledger_events WHERE seq > 6")
    elsewhere = {"HDP_PLANNER_LEDGER_HEADS": str(tmp_path / "another-machine")}
    assert runner.invoke(app, ["ledger", "check", "--ledger", str(path)], env=elsewhere).exit_code == 0
    done = runner.invoke(app, ["ledger", "check", "--ledger", str(path), "--head", head], env=elsewhere)
    assert done.exit_code == 1 and "pinned head" in done.output


def test_a_new_sqlite_ledger_is_owner_only(tmp_path):
    import stat

    Ledger(str(tmp_path / "l.sqlite"))
    assert stat.S_IMODE((tmp_path / "l.sqlite").stat().st_mode) == 0o600


def test_budgets_are_a_client_ids_whatever_the_federation_name(tmp_path, small):
    """The plan's whole budget spent under one name: a run under another name, for the same client ids, is
    refused before round 1, and each client's spending is the same whichever name is asked."""
    book = Ledger(str(tmp_path / "l.sqlite"))
    run_id = _start(book, small, 10, federation="first")
    for r in range(10):
        book.release(run_id, r)
    book.finish(run_id)
    with pytest.raises(LedgerError, match="refused before round 1"):
        _start(book, small, 1, federation="second")
    assert book.spending("first") == book.spending() and book.spending("second") == []


def test_a_run_that_releases_an_unreserved_round_is_refused(tmp_path, small):
    book = Ledger(str(tmp_path / "l.sqlite"))
    run_id = _start(book, small, 2)
    book.release(run_id, 0)
    for bad in (0, 2):
        with pytest.raises(LedgerError, match="was not reserved"):
            book.release(run_id, bad)
    book.finish(run_id)
    with pytest.raises(LedgerError, match="was not reserved"):
        book.release(run_id, 1)
    assert [s.released_rounds + s.reserved_rounds for s in book.spending()][:1] == [1]  # the given-back round


OLD_SCHEMA = """
CREATE TABLE ledger_lock (id INTEGER PRIMARY KEY, version INTEGER);
CREATE TABLE budgets (federation VARCHAR(200), client_id VARCHAR(200), epsilon FLOAT NOT NULL, delta FLOAT NOT NULL,
                      PRIMARY KEY (federation, client_id));
CREATE TABLE runs (run_id VARCHAR(36) PRIMARY KEY, federation VARCHAR(200) NOT NULL, label VARCHAR(400) NOT NULL,
                   plan_sha256 VARCHAR(64) NOT NULL, planned_rounds INTEGER NOT NULL, started FLOAT NOT NULL,
                   status VARCHAR(16) NOT NULL);
CREATE TABLE members (run_id VARCHAR(36), client_id VARCHAR(200), group_index INTEGER NOT NULL,
                      PRIMARY KEY (run_id, client_id));
CREATE TABLE charges (run_id VARCHAR(36), round INTEGER, group_index INTEGER, q FLOAT NOT NULL,
                      noise_multiplier FLOAT NOT NULL, status VARCHAR(16) NOT NULL, tau_d FLOAT,
                      PRIMARY KEY (run_id, round, group_index));
"""


def test_a_ledger_of_the_unchained_schema_is_copied_into_the_chain(tmp_path, small):
    """Two runs under two federation names (one finished after 4 rounds, one killed after 2 of 3 reserved): the
    copy keeps every charge, merges the budgets by client id, records itself, and refuses what no longer fits."""
    path = tmp_path / "old.sqlite"
    membership, budgets = simulated_clients(small, small.groups)
    costs = round_costs(small, small.groups.name, start=0, rounds=4)
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        for fed, run_id, planned, released, status in (("a", "r1", 4, 4, "finished"), ("b", "r2", 3, 2, "running")):
            db.executemany("INSERT OR IGNORE INTO budgets VALUES (?, ?, ?, ?)",
                           [(fed, c, budgets[c], small.config.delta) for c in membership])  # fmt: skip
            db.execute("INSERT INTO runs VALUES (?, ?, 'old', ?, ?, ?, ?)", (run_id, fed, "0" * 64, planned,
                                                                              float(planned), status))  # fmt: skip
            db.executemany("INSERT INTO members VALUES (?, ?, ?)", [(run_id, c, g) for c, g in membership.items()])
            db.executemany("INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?, NULL)",
                           [(run_id, r, m, g.q, g.noise_multiplier, "released" if r < released else "reserved")
                            for r in range(planned) for m, g in enumerate(costs[r])])  # fmt: skip
    book = Ledger(str(path))
    spent = {s.client_id: s for s in book.spending()}
    assert {(s.released_rounds, s.reserved_rounds) for s in spent.values()} == {(6, 1)}
    same = Ledger(str(tmp_path / "chained.sqlite"))  # the same runs written by this ledger
    r1, r2 = _start(same, small, 4), _start(same, small, 3)
    for r in range(4):
        same.release(r1, r)
    same.finish(r1)
    for r in range(2):
        same.release(r2, r)
    assert {c: s.epsilon_spent for c, s in spent.items()} == {s.client_id: s.epsilon_spent for s in same.spending()}
    report = book.check_chain()
    assert report.problem is None and report.migrated
    assert Ledger(str(path)).check_chain().events == report.events  # copied once
    assert "copy of an unchained ledger" in _check(path).output
    with pytest.raises(LedgerError, match="refused before round 1"):
        _start(book, small, 4)


def test_the_copy_keeps_every_field_of_every_run_and_each_clients_smallest_budget(tmp_path):
    """Four runs of an unchained ledger (with the later ``accountant`` column), stored out of order: the copy lists
    them by start time, keeps their fields, groups and rounds (numbered from the run's first, however the rows
    numbered them), releases only the rounds every group released, finishes the finished run, takes each client's
    smallest ε and smallest δ under any name and each run's δ from its budgeted members (1 without any), and records
    what it copied."""
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA.replace("tau_d FLOAT,", "tau_d FLOAT, accountant VARCHAR(16),"))
        db.executemany("INSERT INTO budgets VALUES (?, ?, ?, ?)", [
            ("a", "c0", 2.0, 1e-5), ("b", "c0", 1.5, 1e-6), ("a", "c1", 1.0, 1e-5), ("b", "c1", 3.0, 1e-7),
            ("b", "c2", 4.0, 1e-5)])  # fmt: skip
        db.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", [
            ("r1", "a", "first", "1" * 64, 3, 20.0, "finished"),
            ("r2", "b", "second", "2" * 64, 2, 10.0, "running"),
            ("r3", "a", "third", "3" * 64, 1, 30.0, "running"),
            ("r4", "c", "fourth", "4" * 64, 1, 40.0, "running")])  # fmt: skip
        db.executemany("INSERT INTO members VALUES (?, ?, ?)", [
            ("r1", "c0", 0), ("r1", "c1", 1), ("r2", "c2", 1), ("r2", "c0", 0), ("r3", "c3", 0), ("r3", "c2", 1),
            ("r4", "c4", 0)])  # fmt: skip
        db.executemany("INSERT INTO charges VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
            ("r1", 0, 1, 0.2, 2.0, "released", None, "pld"), ("r1", 0, 0, 0.1, 1.0, "released", None, None),
            ("r1", 1, 0, 0.1, 1.0, "released", None, None), ("r1", 1, 1, 0.2, 2.0, "reserved", None, "pld"),
            ("r1", 2, 0, 0.1, 1.0, "reserved", None, None), ("r1", 2, 1, 0.2, 2.0, "reserved", None, "pld"),
            ("r2", 7, 0, 0.3, 1.5, "reserved", 1e-6, None), ("r2", 7, 1, 0.3, 1.5, "reserved", 2e-6, None),
            ("r2", 5, 0, 0.3, 1.5, "released", 1e-6, None), ("r2", 5, 1, 0.3, 1.5, "released", 2e-6, None),
            ("r3", 0, 0, 0.5, 3.0, "reserved", None, None),
            ("r4", 0, 0, 0.5, 3.0, "released", None, None)])  # fmt: skip
    book = Ledger(str(path))
    runs = book.runs()
    assert [r.run_id for r in runs] == ["r2", "r1", "r3", "r4"]
    r2, r1 = runs[0], runs[1]
    assert (r1.federation, r1.label, r1.plan_sha256, r1.start, r1.started) == ("a", "first", "1" * 64, 0, 20.0)
    assert (r2.federation, r2.label, r2.plan_sha256, r2.started) == ("b", "second", "2" * 64, 10.0)
    assert r1.clients == {"c0": 0, "c1": 1} and r2.clients == {"c2": 1, "c0": 0}
    plain, pld = GroupRound(q=0.1, noise_multiplier=1.0), GroupRound(q=0.2, noise_multiplier=2.0, accountant="pld")
    assert r1.rounds == [[plain, pld]] * 3 and r1.released == {0} and r1.finished
    ddg = [GroupRound(q=0.3, noise_multiplier=1.5, tau_d=1e-6), GroupRound(q=0.3, noise_multiplier=1.5, tau_d=2e-6)]
    assert r2.rounds == [ddg, ddg] and r2.released == {0} and not r2.finished
    assert [(r.released, r.finished) for r in runs[2:]] == [(set(), False), ({0}, False)]
    state = book.state()
    # a run's δ is its budgeted members' smallest (r1: c1's 1e-7, r2: c0's 1e-6, r3: c2's 1e-5, r4: none, 1)
    assert state.budgets == {"c0": (1.5, 1e-7), "c1": (1.0, 1e-7), "c2": (4.0, 1e-6), "c3": (0.0, 1e-5),
                             "c4": (0.0, 1.0)}  # fmt: skip
    assert state.migrated == {"from": "unchained tables budgets, runs, members, charges", "runs": 4, "charges": 12,
                              "released": 3}  # fmt: skip
    assert book.check_chain().events == 4 + 3 + 1 + 1


@pytest.mark.parametrize(
    "args",
    [
        ["show", "{plan}", "--ledger", "/nonexistent/dir/l.sqlite"],
        ["check", "--ledger", "/nonexistent/dir/l.sqlite"],
        ["check", "{plan}", "--ledger", "/nonexistent/dir/l.sqlite"],
        ["show", "{missing}"],
        ["check", "{plan}", "--rounds", "0"],
        ["show", "{plan}", "--ledger", "{notadb}"],
        ["check", "--ledger", "{notadb}"],
        ["check", "--ledger", "nosuchdriver://x/y"],
        ["check", "--head", "abc"],
    ],
)
def test_bad_input_to_every_ledger_subcommand_is_one_line(tmp_path, small, args):
    from hdp_planner.planfile.document import save_plan

    save_plan(small, tmp_path / "plan.json")
    (tmp_path / "notadb").write_text("not a database\n")
    names = {"plan": tmp_path / "plan.json", "missing": tmp_path / "missing.json", "notadb": tmp_path / "notadb"}
    done = runner.invoke(app, ["ledger", *(a.format(**names) for a in args)])
    assert done.exit_code == 2, done.output
    assert done.output.startswith("error: ") and done.output.count("\n") == 1, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert not (tmp_path / "l.sqlite").exists()


def test_a_run_charges_the_clients_of_its_groups_file_at_their_own_budgets(tmp_path):
    """``ledger check`` of a plan made from per-client budgets needs ``assign``'s groups file (the default id → group
    mapping is refused); a groups file whose groups do not have the plan's sizes is refused, naming both."""
    eps = [3.0] * 100 + [1.5] * 100 + [0.5] * 100
    budgets, path, groups = tmp_path / "budgets.csv", tmp_path / "plan.json", tmp_path / "groups.csv"
    budgets.write_text("client_id,epsilon\n" + "".join(f"{i},{e}\n" for i, e in enumerate(eps)))
    assert (
        runner.invoke(
            app, ["solve", "--budgets", str(budgets), "--groups", "3", "--rounds", "2", "-o", str(path)]
        ).exit_code
        == 0
    )
    assert runner.invoke(app, ["assign", str(path), str(budgets), "-o", str(groups)]).exit_code == 0
    ledger = tmp_path / "l.sqlite"
    Ledger(str(ledger)).engine.dispose()
    check = ["ledger", "check", str(path), "--ledger", str(ledger)]
    done = runner.invoke(app, check)
    assert done.exit_code == 2 and done.output == (
        "error: the plan was made from per-client budgets: give --groups (hdp-plan assign --output) so that every "
        "client is charged in the group its budget allows; refusing the default id → group mapping\n"
    )
    done = runner.invoke(app, [*check, "--groups", str(groups)])
    assert done.exit_code == 0, done.output
    even = tmp_path / "even.json"  # the same ε, 100 clients a group, solved without the budgets: no digest to match
    assert (
        runner.invoke(app, ["solve", "--eps", "0.5,1.5,3.0", "--n", "300", "--rounds", "2", "-o", str(even)]).exit_code
        == 0
    )
    skewed = tmp_path / "skewed.csv"
    skewed.write_text(
        "client_id,epsilon,group\n" + "".join(f"{i},3.0,{1 + (i >= 150) + (i >= 250)}\n" for i in range(300))
    )
    done = runner.invoke(app, ["ledger", "check", str(even), "--ledger", str(ledger), "--groups", str(skewed)])
    assert done.exit_code == 2 and done.output == (
        f"error: groups file {skewed} puts (150, 100, 50) clients in the groups; the plan has (100, 100, 100)\n"
    )
    done = runner.invoke(app, ["ledger", "check", str(even), "--ledger", str(ledger), "--groups", str(groups)])
    assert done.exit_code == 0, done.output


def test_the_canonical_encoding_sorts_keys_at_every_depth():
    """Two writers that build the same event in different key orders chain to the same digest."""
    assert canonical({"b": 1, "a": {"d": 2, "c": [3, {"f": 4, "e": 5}]}}) == '{"a":{"c":[3,{"e":5,"f":4}],"d":2},"b":1}'
    assert canonical({"b": 1, "a": 2}) == canonical({"a": 2, "b": 1})
