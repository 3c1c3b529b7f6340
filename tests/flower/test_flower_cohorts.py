"""Hidden participation on Flower (``--trust secagg`` on a plan solved with ``--hide-sample``): the nodes fix the cohort
rule's seed by commitments, the server names the rule's cohorts, every member checks its run against the rule, trains,
flips its private coin and sends one masked vector through its group's SecAgg+; a stacked or mixed run is refused.

The federation runs in this process (:class:`~hdp_planner_flower.local.InProcessGrid`), so every message the
ServerApp receives is recorded: heads and tails members are compared field by field.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from conftest import digits_settings, pin_for, solve_secure  # noqa: E402
from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hdp_planner.planfile.document import load_plan, read_document  # noqa: E402
from hdp_planner_cli.app import app as cli_app  # noqa: E402
from hdp_planner_flower import secagg_mod  # noqa: E402
from hdp_planner_flower.app import client_app, model_arrays  # noqa: E402
from hdp_planner_flower.local import InProcessGrid  # noqa: E402
from hdp_planner_flower.pin import file_sha256  # noqa: E402
from hdp_planner_flower.records import ARRAYS  # noqa: E402
from hdp_planner_flower.strategy import HdpStrategy  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.rules.specs import plan_spec  # noqa: E402

N = 24  # three groups of 8; cohorts of at most 6, so the rotation names different members each round
SEED = 5
SETTINGS = digits_settings(clients=N, seed=SEED)
D = sum(p.numel() for p in make_model("digits").parameters())


@pytest.fixture(scope="module")
def cohort_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cohorts")
    return solve_secure(folder, eps="1,2,4", n=N, q=0.25, model_dim=D, extra=("--hide-sample", "--max-cohort", "6"))


def strategy_for(path: Path) -> HdpStrategy:
    plan = load_plan(path)
    spec = plan_spec(plan, "gdpfed+")
    return HdpStrategy(plan, spec, plan_sha256=file_sha256(path), diagnostics=True)


def shape_of(value):
    """What a field shows apart from its random content: its type and size (strings in full: stage names)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return ("bytes", len(value))
    if isinstance(value, list):
        return ("list", tuple(shape_of(v) for v in value))
    return type(value).__name__


def fields_of(reply: Message) -> tuple:
    """Every record, key, type and size of a reply (not the values)."""
    content = reply.content
    out = []
    for kind in ("config_records", "metric_records", "array_records"):
        for name, record in sorted(getattr(content, kind).items()):
            if kind == "array_records":
                out.append((kind, name, tuple((k, a.shape, a.dtype) for k, a in record.items())))
            else:
                out.append((kind, name, tuple((k, shape_of(v)) for k, v in sorted(record.items()))))
    return tuple(out)


def test_heads_and_tails_send_the_same_fields_sizes_and_stages(cohort_plan, tmp_path, monkeypatch):
    """Two rounds; coins alternate heads and tails in the order members train. Every reply the ServerApp receives:
    each member's sequence of SecAgg+ stages and the fields and sizes of each reply are the same for heads and tails,
    every member trained (tails do the same work), and the members are exactly the cohorts the server named."""
    trained, coins = [], []
    alternate = itertools.cycle([True, False])

    def step(msg: Message, context: Context) -> Message:
        trained.append(int(context.node_config["partition-id"]))
        arrays = msg.content[ARRAYS]
        out = {k: type(a)(a.numpy() + 0.001) for k, a in arrays.items()}
        return Message(RecordDict({ARRAYS: type(arrays)(out)}), reply_to=msg)

    def recorded_flip(coin, bits):
        heads = next(alternate)
        coins.append(heads)
        return heads

    monkeypatch.setattr(secagg_mod, "flip", recorded_flip)
    named = []
    real_name = HdpStrategy.name_cohorts
    monkeypatch.setattr(HdpStrategy, "name_cohorts", lambda self, r: named.extend(real_name(self, r)) or named[-3:])
    grid = InProcessGrid(client_app(step, pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=2, train_config=SETTINGS.record()
    )
    assert strategy.log.next_round == 2 and len(strategy.stats.withheld) == 0
    cohorts = strategy.spec.secagg.cohorts
    assert [len(c) for c in named] == [g.cohort for g in cohorts] * 2
    assert len(trained) == len(coins) == 2 * sum(g.cohort for g in cohorts)  # every member trained, heads or tails
    coin_of = {}  # (round, client) → heads
    for i, (client, heads) in enumerate(zip(trained, coins)):
        coin_of[(i // sum(g.cohort for g in cohorts), client)] = heads
    assert set(coin_of.values()) == {True, False}

    seen = defaultdict(list)  # (round, client) → the fields of each reply, in the order the server received them
    started, members, last = 0, sum(g.cohort for g in cohorts), {}
    client_of = {node: i for i, node in enumerate(grid.node_ids)}
    for reply in grid.received:
        assert not reply.has_error(), reply.error.reason
        if not reply.metadata.message_type.startswith("train"):
            continue  # the enrolment
        client = client_of[reply.metadata.src_node_id]
        if Key.PUBLIC_KEY_1 in reply.content.config_records.get(RECORD_KEY_CONFIGS, {}):  # SecAgg+'s first reply
            last[client] = started // members  # no dropouts: every round opens with its members' key replies
            started += 1
        seen[(last[client], client)].append(fields_of(reply))
    assert set(seen) == set(coin_of)
    heads = {tuple(v) for k, v in seen.items() if coin_of[k]}
    tails = {tuple(v) for k, v in seen.items() if not coin_of[k]}
    assert heads == tails and len(heads) == 1  # one shape of conversation, whatever the coin
    assert len(next(iter(heads))) == 4  # keys, encrypted shares, masked vector, key shares: SecAgg+'s four stages


def test_a_cohort_of_another_size_than_the_plans_is_refused(cohort_plan, tmp_path, monkeypatch):
    """A server that names one member fewer than the plan's cohort (fewer honest shares): every member refuses."""
    monkeypatch.setattr(HdpStrategy, "name_cohorts",
                        lambda self, r: [np.arange(g.cohort - 1) for g in self.spec.secagg.cohorts])  # fmt: skip
    grid = InProcessGrid(client_app(pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    strategy.start(grid, arrays, num_rounds=1, train_config=SETTINGS.record())
    assert len(strategy.stats.withheld) == 3
    assert any(r.has_error() and "announces a cohort of" in r.error.reason for r in grid.received)


def test_hdp_plan_flower_in_process_runs_a_cohort_plan(cohort_plan, tmp_path):
    """The command: metrics carry the cohorts and each group's ε against the server, the plan's, and the summary
    line says so."""
    args = ["flower", str(cohort_plan), "--dataset", "digits", "--clients", str(N), "--rounds", "2", "--trust",
            "secagg", "--in-process", "--out", str(tmp_path / "run"), "--ledger", "none", "--node-state",
            str(tmp_path / "nodes")]  # fmt: skip
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    assert "against the server (participation hidden)" in " ".join(result.output.split())
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    sa = metrics["secagg"]
    row = read_document(cohort_plan)["hidden_participation"]["rows"]["GDPFed+"]
    assert sa["hidden_participation"] and sa["cohort"] == row["cohort"]
    assert sa["participation_cap"] == [2, 2, 2] and sa["coins"] == "OS CSPRNG"
    assert all(e <= b * (1 + 1e-9) for e, b in zip(sa["epsilon_server"], (1.0, 2.0, 4.0)))
    assert metrics["noise_lambda_planned"] == pytest.approx(row["lambda_cohort"])


def test_a_member_whose_training_fails_sends_its_share_and_does_not_drop_out(cohort_plan, tmp_path):
    """A failure must not look like tails' absence: the member still sends its noise share (a zero contribution)."""

    def failing(msg: Message, context: Context) -> Message:
        raise RuntimeError("out of memory")

    grid = InProcessGrid(client_app(failing, pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    assert len(strategy.stats.withheld) == 0
    assert not any(r.has_error() for r in grid.received)


def test_members_past_their_groups_k_memberships_refuse(cohort_plan, tmp_path):
    """Each node counts its cohort memberships in its own state: past its group's K it refuses, as a dropout."""
    from hdp_planner.ledger.store import GroupRound
    from hdp_planner_flower.node_state import NodeState, Terms

    cohorts = strategy_for(cohort_plan).spec.secagg.cohorts
    k = cohorts[0].memberships
    assert all(g.memberships == k for g in cohorts)
    for i in range(N):
        for r in range(k):
            NodeState(tmp_path, i).admit(plan_sha256=file_sha256(cohort_plan), run_id=7, server_round=r + 1,
                                         terms=Terms(costs=(GroupRound(q=0.1, noise_multiplier=50.0),) * k, delta=1e-5,
                                                     cap=k, budget=9.0))  # fmt: skip
    grid = InProcessGrid(client_app(pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    assert len(strategy.stats.withheld) == 3
    assert any(r.has_error() and f"cap K = {k}" in r.error.reason for r in grid.received)


HONEST = HdpStrategy.name_cohorts
"""What an honest server names: the rule's cohorts."""


def rule_positions(strategy: HdpStrategy, rnd: int) -> list[list[int]]:
    """Each group's cohort of round ``rnd`` by the rule, as positions in the group's nodes."""
    return [list(p) for p in HONEST(strategy, rnd)]


def run_named(cohort_plan, tmp_path, monkeypatch, name) -> tuple[HdpStrategy, InProcessGrid]:
    """One round in which the server names ``name(strategy, honest positions)`` instead of the rule's cohorts."""

    def named(self, rnd):
        return [np.array(p) for p in name(self, rule_positions(self, rnd))]

    monkeypatch.setattr(HdpStrategy, "name_cohorts", named)
    grid = InProcessGrid(client_app(pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    return strategy, grid


def refusals(grid: InProcessGrid) -> list[str]:
    return [r.error.reason for r in grid.received if r.has_error()]


def test_a_stacked_cohort_is_refused_by_its_members_and_releases_nothing(cohort_plan, tmp_path, monkeypatch):
    """The server keeps the rule's cohort of group 1 but swaps one member for a client of the group the rule did not
    draw (its Sybil, say): every member of that run refuses before sending anything; the other groups release."""

    def stacked(strategy, honest):
        others = [i for i in range(len(strategy.members[0])) if i not in honest[0]]
        return [[*honest[0][:-1], others[0]], *honest[1:]]

    strategy, grid = run_named(cohort_plan, tmp_path, monkeypatch, stacked)
    assert [w.group for w in strategy.stats.withheld] == [0]
    reasons = refusals(grid)
    assert reasons and all("whom the rule did not draw" in r or "does not draw client" in r for r in reasons)


def test_a_run_that_mixes_in_another_groups_client_is_refused(cohort_plan, tmp_path, monkeypatch):
    """Group 3's run with one member swapped for a client of group 1 that group 1's cohort does not hold this round
    (named among group 3's nodes): group 3's members refuse it, group 1's run goes ahead."""
    slipped = []

    def mixed(strategy, honest):
        spare = next(i for i in range(len(strategy.members[0])) if i not in honest[0])
        node = strategy.members[0][spare]
        slipped.append(strategy.client_of_node[node])
        strategy.members[2] = [*strategy.members[2], node]  # a group-1 node the server slips in
        return [*honest[:2], [*honest[2][:-1], len(strategy.members[2]) - 1]]

    strategy, grid = run_named(cohort_plan, tmp_path, monkeypatch, mixed)
    assert [w.group for w in strategy.stats.withheld] == [2]
    drawn = f"the run of group 3 in round 1 holds 6 clients with client {slipped[0]}, whom the rule did not draw"
    reasons = refusals(grid)
    assert any(drawn in r for r in reasons)  # the honest members of group 3
    assert all(drawn in r or f"puts client {slipped[0]} in group 3, the plan in group 1" in r for r in reasons)


def test_without_a_commitment_round_every_member_refuses(cohort_plan, tmp_path, monkeypatch):
    """A server that skips the commitment round (and names cohorts of its own seed) gets nothing."""
    from hdp_planner.distributed.cohort_rule import CohortRule

    def own_seed(self, grid, timeout=None):
        groups = tuple(tuple(str(self.client_of_node[nd]) for nd in nodes) for nodes in self.members)
        self.rule = CohortRule(seed=b"server" * 6, groups=groups, cohorts=tuple(g.cohort for g in
                                                                               self.spec.secagg.cohorts))  # fmt: skip

    monkeypatch.setattr(HdpStrategy, "draw_rule", own_seed)
    grid = InProcessGrid(client_app(pin=pin_for(cohort_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(cohort_plan)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    assert len(strategy.stats.withheld) == 3
    assert any("no cohort seed" in r for r in refusals(grid))
