"""The ledger's head recorded outside its database: the next run finds a removed tail (the last event, the last
three), a chain recomputed from an edited event on, and the database put back from an older copy, with no digest
pinned by hand; a chain that only grew (other runs, another machine) passes; the head file is owner-only and never
goes back."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat

import pytest
from typer.testing import CliRunner

from hdp_planner import plan
from hdp_planner.ledger.anchor import Anchor, Head
from hdp_planner.ledger.chain import canonical, event_digest
from hdp_planner.ledger.runs import round_costs, simulated_clients
from hdp_planner.ledger.store import Ledger, LedgerError
from hdp_planner_cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def small():
    return plan((1.0, 2.0), 40, rounds=10, q=0.2, clip=1.0)


def run(book, p, rounds=3):
    """One run of ``rounds`` rounds, each released, then finished: 2 + rounds events."""
    membership, budgets = simulated_clients(p, p.groups)
    run_id = book.start_run(federation="f", label="run", plan_sha256="0" * 64, membership=membership,
                            budgets_of=budgets, delta=p.config.delta,
                            planned=round_costs(p, p.groups.name, start=0, rounds=rounds))  # fmt: skip
    for r in range(rounds):
        book.release(run_id, r)
    book.finish(run_id)


@pytest.fixture
def ledger(tmp_path, small):
    """Two runs of three rounds (10 events) written on this machine."""
    path = tmp_path / "l.sqlite"
    book = Ledger(str(path))
    run(book, small)
    run(book, small)
    book.engine.dispose()
    return path


def refused(path, p, found):
    """The next run is refused before it reserves anything, and ``ledger check`` fails, both saying ``found``."""
    with pytest.raises(LedgerError, match=rf"is broken: .*{found}.*refuses every run"):
        run(Ledger(str(path)), p)
    done = runner.invoke(app, ["ledger", "check", "--ledger", str(path)])
    assert done.exit_code == 1 and "FAIL the hash chain" in done.output and found in done.output, done.output


@pytest.mark.parametrize("cut", [1, 3])
def test_a_removed_tail_is_found_by_the_next_run(ledger, small, cut):
    """The last event, or the last three, deleted: the chain is still unbroken, but it no longer reaches the
    head recorded at the last write."""
    with sqlite3.connect(ledger) as db:
        db.execute("DELETE FROM ledger_events WHERE seq > ?", (10 - cut,))
    refused(ledger, small, f"ends at event {10 - cut}, but it was left at event 10")


def test_a_chain_recomputed_from_an_edited_event_is_found_by_the_next_run(ledger, small):
    """A run's σ raised tenfold in its reservation and every digest from there on recomputed: an unbroken chain
    whose head is not the one recorded."""
    with sqlite3.connect(ledger) as db:
        rows = db.execute("SELECT seq, kind, body FROM ledger_events ORDER BY seq").fetchall()
        prev = db.execute("SELECT prev FROM ledger_events WHERE seq = 1").fetchone()[0]
        for seq, kind, body in rows:
            if seq == 6:  # the second run's reservation
                data = json.loads(body)
                data["rounds"] = [[[q, s * 10, t, a] for q, s, t, a in groups] for groups in data["rounds"]]
                body = canonical(data)
            digest = event_digest(seq=seq, kind=kind, prev=prev, body=body)
            db.execute(
                "UPDATE ledger_events SET body = ?, prev = ?, digest = ? WHERE seq = ?", (body, prev, digest, seq)
            )
            prev = digest
    assert Ledger(str(ledger), heads=ledger.parent / "another-machine").check_chain().problem is None  # unbroken
    refused(ledger, small, "event 10 is not the one the chain was left at")


def test_an_older_copy_put_back_is_found_by_the_next_run(tmp_path, small):
    """The database copied after one run and put back after the second: a shorter, unbroken chain."""
    path = tmp_path / "l.sqlite"
    book = Ledger(str(path))
    run(book, small)
    book.engine.dispose()
    shutil.copy(path, tmp_path / "copy.sqlite")
    run(Ledger(str(path)), small)
    shutil.copy(tmp_path / "copy.sqlite", path)
    refused(path, small, "ends at event 5, but it was left at event 10")


def test_an_older_copy_put_back_and_written_past_the_head_is_found(tmp_path, small):
    """The older copy put back and then written by a machine that never saw the later runs, until the chain is as
    long as the one recorded: the event at the recorded place is another one."""
    path = tmp_path / "l.sqlite"
    book = Ledger(str(path))
    run(book, small)
    book.engine.dispose()
    shutil.copy(path, tmp_path / "copy.sqlite")
    run(Ledger(str(path)), small)
    shutil.copy(tmp_path / "copy.sqlite", path)
    other = Ledger(str(path), heads=tmp_path / "another-machine")
    run(other, small)
    run(other, small)
    other.engine.dispose()
    refused(path, small, "event 10 is not the one the chain was left at")


def test_a_chain_that_grew_elsewhere_passes_and_the_run_records_what_it_found(ledger, small, tmp_path):
    """Runs written on another machine (its own head file) only extend the chain: this machine's recorded head
    is still in it, and the next run here goes ahead, recording the head it found and the one it left."""
    other = Ledger(str(ledger), heads=tmp_path / "another-machine")
    run(other, small, rounds=1)
    other.engine.dispose()
    book = Ledger(str(ledger))
    run(book, small, rounds=1)
    assert book.found == Head(events=13, digest=book.found.digest) and book.head.events == 16
    assert book.anchor.recorded() == book.head
    done = runner.invoke(app, ["ledger", "check", "--ledger", str(ledger)])
    assert done.exit_code == 0 and "holds event 16, the head recorded in" in done.output, done.output


def test_the_head_file_is_owner_only_and_never_goes_back(tmp_path):
    anchor = Anchor(url="sqlite:////x/l.sqlite", folder=tmp_path / "heads")
    anchor.record(Head(events=7, digest="a" * 64))
    anchor.record(Head(events=5, digest="b" * 64))  # a process that wrote earlier records late: kept at 7
    assert anchor.recorded() == Head(events=7, digest="a" * 64)
    assert stat.S_IMODE(anchor.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(anchor.folder.stat().st_mode) == 0o700
    assert Anchor(url="sqlite:////x/other.sqlite", folder=tmp_path / "heads").recorded() is None


def test_a_head_file_that_cannot_be_read_refuses_the_run(ledger, small):
    book = Ledger(str(ledger))
    book.anchor.path.write_text("not json")
    with pytest.raises(LedgerError, match="cannot read the ledger's recorded head"):
        run(book, small)
