"""A node's side of the cohort seed's commitment round (:mod:`hdp_planner_flower.cohort_seed`): one secret per plan,
one commitment list it reveals for, a seed only from reveals that open that list."""

from __future__ import annotations

import stat

import pytest

pytest.importorskip("flwr")

from hdp_planner.distributed.cohort_rule import cohort_seed, commitment, fresh_reveal
from hdp_planner_flower.cohort_seed import SeedState, list_digest, read_registry, registry_refusal
from hdp_planner_flower.pin import RoundRefused

PLAN = "ab" * 32
CLIENTS = {"0", "1", "2"}


def others() -> dict[str, bytes]:
    return {"1": fresh_reveal(), "2": fresh_reveal()}


def test_a_node_commits_once_per_plan_and_keeps_its_secret_private(tmp_path):
    state = SeedState(tmp_path, 0)
    first = state.commit(PLAN)
    assert state.commit(PLAN) == first  # asked again (a restarted server): the same commitment
    assert SeedState(tmp_path, 0).commit("cd" * 32) != first  # another plan: another secret
    assert stat.S_IMODE(state.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700


def test_a_node_reveals_for_one_commitment_list_only(tmp_path):
    state = SeedState(tmp_path, 0)
    mine = state.commit(PLAN)
    rest = others()
    listed = {"0": mine} | {c: commitment(r) for c, r in rest.items()}
    reveal = state.reveal(PLAN, listed, client="0", clients=CLIENTS)
    assert commitment(reveal) == mine
    assert state.reveal(PLAN, listed, client="0", clients=CLIENTS) == reveal  # the same list again: the same answer
    regrind = listed | {"2": commitment(fresh_reveal())}  # a server that wants another seed changes a colluder's entry
    with pytest.raises(RoundRefused, match="revealed for another commitment list"):
        state.reveal(PLAN, regrind, client="0", clients=CLIENTS)


def test_a_node_refuses_a_list_without_its_commitment_or_with_other_clients(tmp_path):
    state = SeedState(tmp_path, 0)
    state.commit(PLAN)
    rest = {c: commitment(r) for c, r in others().items()}
    with pytest.raises(RoundRefused, match="does not hold client 0's commitment"):
        state.reveal(PLAN, {"0": commitment(fresh_reveal())} | rest, client="0", clients=CLIENTS)
    with pytest.raises(RoundRefused, match="names 2 clients; the plan has 3"):
        state.reveal(PLAN, {"0": state.commit(PLAN), "1": rest["1"]}, client="0", clients=CLIENTS)


def test_the_seed_comes_only_from_reveals_that_open_the_list_the_node_revealed_for(tmp_path):
    state = SeedState(tmp_path, 0)
    mine = state.commit(PLAN)
    rest = others()
    listed = {"0": mine} | {c: commitment(r) for c, r in rest.items()}
    assert state.seed(PLAN) is None
    reveals = {"0": state.reveal(PLAN, listed, client="0", clients=CLIENTS)} | rest
    with pytest.raises(RoundRefused, match="do not open the commitment list"):
        state.fix_seed(PLAN, reveals | {"1": fresh_reveal()})  # a reveal swapped after the list closed
    assert state.seed(PLAN) is None
    seed = state.fix_seed(PLAN, reveals)
    assert seed == cohort_seed(reveals, listed) and state.seed(PLAN) == seed


def test_the_list_digest_depends_on_every_entry_not_on_their_order():
    listed = {"0": "a" * 64, "1": "b" * 64}
    assert list_digest(listed) == list_digest(dict(reversed(listed.items())))
    assert list_digest(listed) != list_digest(listed | {"1": "c" * 64})
    assert list_digest({"0": "a", "1": "b"}) != list_digest({"0": "a\x001", "": "b"})


def test_a_member_checks_the_servers_names_against_the_deployments_registry(tmp_path):
    """The registry (node ids of the registered keys, and their clients): a node presented under a drawn client's id,
    or a registry that does not hold this node as this client, is refused; the registry's own pairs pass."""
    path = tmp_path / "nodes.csv"
    path.write_text("node_id,client_id\n101,0\n102,1\n103,2\n")
    registry = read_registry(path)
    assert registry == {101: "0", 102: "1", 103: "2"}
    run = dict(members=["0", "1", "2"], client="0", node=101)
    assert registry_refusal(registry, nodes=[101, 102, 103], **run) is None
    assert registry_refusal(registry, nodes=[101, 102, 999], **run) == (
        "the server names node 999 client 2; the deployment's registry holds it as no client"
    )  # a Sybil as client 2
    assert registry_refusal(registry, nodes=[101, 103, 102], **run) == (
        "the server names node 103 client 1; the deployment's registry holds it as client 2"
    )
    assert registry_refusal(registry, members=["0"], nodes=[102], client="0", node=102) == (
        "the deployment's registry does not hold node 102 as client 0"
    )
    path.write_text("node,client\n1,2\n")
    with pytest.raises(RoundRefused, match=r"registry .* cannot be read"):
        read_registry(path)
