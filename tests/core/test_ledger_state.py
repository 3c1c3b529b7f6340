"""The ledger's state machine and its names: a round is charged once, an event no ledger writes is refused, the
refusals name the right client, the chain's JSON is canonical, and a run's plan is named by its numbers alone."""

from __future__ import annotations

import pytest

from hdp_planner import plan
from hdp_planner.ledger.chain import canonical
from hdp_planner.ledger.runs import plan_digest
from hdp_planner.ledger.state import LedgerState, LedgerStateError, run_event
from hdp_planner.ledger.store import GroupRound, Ledger, LedgerError

ROUND = GroupRound(q=0.1, noise_multiplier=2.0)


def started(state: LedgerState, run_id: str = "r", rounds: int = 3, budgets=(1.0, 2.0)) -> dict:
    data = run_event(run_id=run_id, federation="f", label="run", plan_sha256="0" * 64, start=0, started=0.0,
                     delta=1e-5, membership={"0": 0, "1": 1}, budgets_of={"0": budgets[0], "1": budgets[1]},
                     planned=[[ROUND, ROUND]] * rounds)  # fmt: skip
    state.apply(1, "run", data)
    return data


def test_a_round_is_released_once_and_only_if_reserved():
    state = LedgerState()
    started(state)
    state.apply(2, "release", {"run_id": "r", "round": 0})
    for bad in (0, 3, -1):  # released already; beyond the run's rounds; before its first
        with pytest.raises(LedgerStateError, match=f"round {bad + 1} was not reserved"):
            state.apply(3, "release", {"run_id": "r", "round": bad})
    assert state.runs["r"].released == {0}


def test_events_of_unknown_or_finished_runs_are_refused_by_name():
    state = LedgerState()
    with pytest.raises(LedgerStateError, match=r"is not one a ledger writes: an unknown run$"):
        state.apply(1, "release", {"run_id": "r", "round": 0})
    started(state)
    state.apply(2, "finish", {"run_id": "r"})
    with pytest.raises(LedgerStateError, match=r"is not one a ledger writes: a finished run$"):
        state.apply(3, "release", {"run_id": "r", "round": 1})


def test_a_budget_conflict_counts_the_other_clients_only_when_there_are_any():
    state = LedgerState()
    started(state)
    one = run_event(run_id="s", federation="f", label="run", plan_sha256="0" * 64, start=0, started=0.0, delta=1e-5,
                    membership={"0": 0, "1": 1}, budgets_of={"0": 3.0, "1": 2.0}, planned=[[ROUND, ROUND]])  # fmt: skip
    why = state.refusal(one, "L")
    assert why.startswith("client 0 has the lifetime budget ε 1 in the privacy ledger L and ε 3 in this run's plan:")
    assert "more clients" not in why
    two = one | {"clients": {"0": [0, 3.0], "1": [1, 5.0]}}
    assert "ε 3 in this run's plan (and 1 more clients):" in state.refusal(two, "L")


def test_a_refused_run_names_the_client_furthest_past_its_budget(tmp_path):
    """Client 0 (ε 1) would spend about 6x its budget and client 1 (ε 2) about 2.5x: the message names client 0,
    though client 1's ε is the larger number."""
    book = Ledger(str(tmp_path / "l.sqlite"))
    planned = [[GroupRound(q=1.0, noise_multiplier=0.8), GroupRound(q=1.0, noise_multiplier=0.9)]]
    spent = {
        s.client_id: s.epsilon_spent
        for s in book.would_exceed(
            federation="f", membership={"0": 0, "1": 1}, budgets_of={"0": 1.0, "1": 2.0}, delta=1e-5, planned=planned
        )
    }
    assert spent["0"] / 1.0 > spent["1"] / 2.0 and spent["0"] * 1.0 < spent["1"] * 2.0  # ratio and product disagree
    with pytest.raises(LedgerError) as refused:
        book.start_run(federation="f", label="run", plan_sha256="0" * 64, membership={"0": 0, "1": 1},
                       budgets_of={"0": 1.0, "1": 2.0}, delta=1e-5, planned=planned)  # fmt: skip
    assert "2 client(s) would exceed" in str(refused.value) and "e.g. client 0: ε " in str(refused.value)


def test_the_chains_json_is_canonical_whatever_the_order_of_its_keys():
    assert canonical({"b": 1, "a": [2.5, "é"]}) == canonical({"a": [2.5, "é"], "b": 1}) == '{"a":[2.5,"\\u00e9"],"b":1}'
    with pytest.raises(ValueError):
        canonical({"a": float("nan")})


def test_a_plans_digest_ignores_the_library_versions_that_wrote_it(monkeypatch):
    from hdp_planner.planfile import document

    p = plan((1.0, 2.0), 40, rounds=4, q=0.2, clip=1.0)
    before = plan_digest(p)
    monkeypatch.setattr(document, "library_versions", lambda: {"python": "0.0", "numpy": "0.0"})
    assert plan_digest(p) == before
    assert plan_digest(plan((1.0, 2.0), 40, rounds=5, q=0.2, clip=1.0)) != before
