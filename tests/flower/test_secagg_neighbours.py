"""SecAgg+ runs over a sparse neighbour graph (:mod:`hdp_planner.distributed.neighbours`): exact sums, releases with
dropouts down to the run's threshold and none below it, and clients that accept exactly the rule's graph, and only
when they opted in.

The federation runs in this process (:class:`~hdp_planner_flower.local.InProcessGrid`), 80 clients in two groups of
40 (q = 1, t = 30): a run of 40 has degree 13 and SecAgg+ threshold 2 instead of the full graph's 40 and 30.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from conftest import UNSEEDED_ALPHA, digits_settings, pin_for, solve_secure  # noqa: E402
from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.server.workflow.secure_aggregation import secaggplus_workflow  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hdp_planner.distributed.encoding import padded_dimension  # noqa: E402
from hdp_planner.distributed.neighbours import sparse_graph  # noqa: E402
from hdp_planner.distributed.randomness import SeededBits  # noqa: E402
from hdp_planner.planfile.document import load_plan  # noqa: E402
from hdp_planner_cli.app import app as cli_app  # noqa: E402
from hdp_planner_flower import secagg_mod, secagg_workflow  # noqa: E402
from hdp_planner_flower.app import client_app, model_arrays  # noqa: E402
from hdp_planner_flower.local import InProcessGrid  # noqa: E402
from hdp_planner_flower.masks import MASK_MODULUS  # noqa: E402
from hdp_planner_flower.pin import Pin, RoundRefused, file_sha256, load_pinned  # noqa: E402
from hdp_planner_flower.records import ARRAYS, fit_config  # noqa: E402
from hdp_planner_flower.strategy import HdpStrategy  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.rules.secagg import client_message, round_plan  # noqa: E402
from hdp_planner_train.rules.specs import plan_spec  # noqa: E402

N = 80
SEED = 5
SETTINGS = digits_settings(clients=N, seed=SEED)
D = sum(p.numel() for p in make_model("digits").parameters())


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    folder = tmp_path_factory.mktemp("neighbours")
    return solve_secure(folder, eps="1,2", n=N, q=1.0, model_dim=D, extra=("--participations", "4"))


def step(msg, context):
    """A train function whose update is a fixed vector per client (client id i: all coordinates 0.001·(i + 1))."""
    arrays = msg.content[ARRAYS]
    i = int(context.node_config["partition-id"])
    out = {k: type(a)(a.numpy() + 0.001 * (i + 1)) for k, a in arrays.items()}
    from flwr.app import Message, RecordDict

    return Message(RecordDict({ARRAYS: type(arrays)(out)}), reply_to=msg)


def spec_of(path: Path):
    plan = load_plan(path)
    return plan_spec(plan, "gdpfed+")


def one_group_run(path: Path, tmp_path: Path, *, sparse_pin: bool = True, drop=None):
    """One SecAgg+ run over group 1's 40 nodes; (its output, the grid, the configs)."""
    spec = spec_of(path)
    pin = pin_for(path, tmp_path, sparse_graph=sparse_pin)
    grid = InProcessGrid(client_app(step, pin=pin), N, drop=drop, keep=True)
    plan = load_plan(path)
    strategy = HdpStrategy(plan, spec, plan_sha256=file_sha256(path))
    strategy.enroll(grid)
    nodes = strategy.members[0]
    strategy.joined = [len(nodes), 0]
    configs = {n: fit_config(strategy.rules(1, m=0), SETTINGS.record()) for n in nodes}
    law = spec.secagg.laws[0]
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    out = secagg_workflow.modular_sums(grid, configs=configs, server_round=1, arrays=arrays, bits=spec.secagg.bits,
                                       threshold=law.run_threshold(len(nodes)), sparse=True,
                                       colluders=law.colluders)  # fmt: skip
    return out, grid, configs


def expected_sums(grid, alive, spec) -> np.ndarray:
    out = np.zeros(padded_dimension(D), dtype=np.int64)
    for node in alive:
        i = grid.node_ids.index(node)
        out += client_message(np.full(D, 0.001 * (i + 1)), round_plan(spec.secagg, rnd=0, group=0), SeededBits(17))
    return np.mod(out, 1 << spec.secagg.bits)


@pytest.fixture
def seeded(monkeypatch):
    """Seeded shares (for the expected sums) and a seeded ring order (so that dropouts hit the same neighbourhoods)."""
    monkeypatch.setattr(secagg_mod, "SecureBits", lambda: SeededBits(17))
    monkeypatch.setattr(secagg_workflow, "SYSTEM_RANDOM", random.Random(11))


def test_a_sparse_run_sums_exactly_with_each_client_sharing_with_its_d_neighbours(plan_path, tmp_path, seeded):
    out, grid, configs = one_group_run(plan_path, tmp_path)
    graph = sparse_graph(clients=40, survivors=30, colluders=0)
    assert (graph.degree, graph.threshold) == (13, 2)
    for node in configs:
        view = secagg_mod.secaggplus_view(grid.contexts[node])
        assert (view["sampled"], view["share_number"], view["threshold"], view["keys"]) == (40, 13, 2, 13)
    totals, alive = out
    assert alive == set(configs)
    assert np.array_equal(totals, expected_sums(grid, alive, spec_of(plan_path)))
    assert secaggplus_workflow.random is secagg_workflow.SYSTEM_RANDOM  # the ring's order: not Flower's global MT
    masked = [bytes_to_ndarray(b) for r in grid.received if not r.has_error()
              for b in r.content.config_records.get(RECORD_KEY_CONFIGS, {}).get(Key.MASKED_PARAMETERS, [])]  # fmt: skip
    vectors = [v for v in masked if v.size > 1]
    assert len(vectors) == 40  # what the server sees of each client: uniform modulo 2^32 with 12 neighbours' masks
    for v in vectors:
        counts = np.bincount(v.astype(np.int64) >> 26, minlength=64)  # 64 equal bins of [0, 2^32)
        assert stats.chisquare(counts).pvalue > UNSEEDED_ALPHA


@pytest.mark.parametrize(
    "stage,lost",
    [
        ("collect_masked_vectors", 10),
        ("collect_masked_vectors", 11),
        pytest.param("share_keys", 11, marks=pytest.mark.slow),
        pytest.param("unmask", 11, marks=pytest.mark.slow),
    ],
)
def test_a_sparse_run_releases_down_to_the_runs_threshold_and_nothing_below(plan_path, tmp_path, seeded, stage, lost):
    """10 of 40 lost leave the run's threshold max(t, ⌊c/2⌋ + 1) = 30: the sum of the survivors (those who sent their
    masked vectors) comes back exact; 11 lost before sending it: the server halts and nothing is released. Dropouts
    at the unmask stage already sent their vectors, so the sum carries all 40 (their masks are rebuilt from their
    neighbours' shares)."""
    out, grid, configs = one_group_run(plan_path, tmp_path, drop=lambda i, s: 4 <= i < 4 + lost and s == stage)
    staying = {n for n in configs if not 4 <= grid.node_ids.index(n) < 4 + lost}
    summed = set(configs) if stage == "unmask" else staying
    if len(summed) < 30:
        assert out is None
        return
    totals, alive = out
    assert alive == summed
    assert np.array_equal(totals, expected_sums(grid, alive, spec_of(plan_path)))


def test_clients_that_did_not_opt_in_refuse_a_sparse_graph_and_nothing_is_released(plan_path, tmp_path):
    out, grid, _ = one_group_run(plan_path, tmp_path, sparse_pin=False)
    assert out is None
    errors = {r.error.reason for r in grid.received if r.has_error()}
    assert errors and all("accepts only the full neighbour graph" in e for e in errors)


def test_a_client_accepts_exactly_the_rules_graph(plan_path, tmp_path):
    spec = spec_of(plan_path)
    rules = {"plan-sha256": file_sha256(plan_path), "trust": "secagg", "method": "gdpfed+", "group": 0,
             "server-round": 1, "clip": spec.clips[0], "noise-multiplier": spec.noise_at(0)[0], "q": spec.q[0],
             "joined": 40, "run-size": 40}  # fmt: skip
    b = spec.secagg.bits
    exact = (float(1 << (b - 1)), 1 << b, MASK_MODULUS, 1.0)
    ok = dict(client=0, sampled=40, share_number=13, threshold=2, keys=13, quantization=exact)
    opted, strict = (
        load_pinned(pin_for(plan_path, tmp_path, sparse_graph=True)),
        load_pinned(pin_for(plan_path, tmp_path)),
    )
    assert opted.check(rules, **ok) == 0
    assert opted.check(rules, **{**ok, "share_number": 40, "threshold": 30, "keys": 40}) == 0  # the full graph
    with pytest.raises(RoundRefused, match="accepts only the full neighbour graph"):
        strict.check(rules, **ok)
    big = sparse_graph(
        clients=400, survivors=spec.secagg.laws[0].run_threshold(400), colluders=0
    )  # inflating c: a larger d
    bad = [
        (rules, {**ok, "share_number": 11}, "needs 13 shares of threshold 2"),
        (rules, {**ok, "share_number": 15}, "needs 13 shares"),
        (rules, {**ok, "threshold": 3}, "threshold 3 among 40"),
        (rules, {**ok, "keys": 1}, "1 public keys"),
        (rules, {**ok, "keys": 14}, "14 public keys"),
        ({**rules, "run-size": 400}, {**ok, "sampled": 400, "share_number": 13}, f"needs {big.degree} shares"),
        ({**rules, "run-size": 41}, ok, "SecAgg\\+ shows 40 sampled"),
        (rules, {**ok, "quantization": (8.0, 1 << 22, MASK_MODULUS, 1000.0)}, "quantization"),
    ]
    for r, kw, match in bad:
        with pytest.raises(RoundRefused, match=match):
            opted.check(r, **kw)


def test_the_pin_reads_its_consent_from_the_node_config_and_the_environment(plan_path, monkeypatch):
    config = {"plan": str(plan_path), "plan-sha256": "ab"}
    assert not Pin.from_node_config(config).sparse_graph
    assert Pin.from_node_config({**config, "sparse-graph": "true"}).sparse_graph
    monkeypatch.setenv("HDP_PLAN", str(plan_path))
    monkeypatch.delenv("HDP_SPARSE_GRAPH", raising=False)
    assert not Pin.from_environment().sparse_graph
    monkeypatch.setenv("HDP_SPARSE_GRAPH", "1")
    assert Pin.from_environment().sparse_graph


class Everyone:
    """Sampling that takes every node (tests only)."""

    def random(self, size):
        return np.zeros(size)


def test_the_strategy_runs_each_group_over_the_sparse_graph_when_asked(plan_path, tmp_path):
    """``HdpStrategy(sparse_graph=True)``: both groups of 40 run SecAgg+ at degree 13 and release (topped up)."""
    grid = InProcessGrid(client_app(step, pin=pin_for(plan_path, tmp_path, sparse_graph=True)), N, keep=True)
    strategy = HdpStrategy(load_plan(plan_path), spec_of(plan_path), plan_sha256=file_sha256(plan_path),
                           uniform=Everyone(), sparse_graph=True, diagnostics=True)  # fmt: skip
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    assert len(strategy.stats.withheld) == 0 and strategy.joined == [40, 40]
    assert {secagg_mod.secaggplus_view(grid.contexts[n])["share_number"] for n in grid.node_ids} == {13}


def test_hdp_plan_flower_sparse_graph_runs_and_says_so(plan_path, tmp_path):
    """``hdp-plan flower --sparse-graph``: the simulated nodes accept the rule's graph, the run releases, and its
    metrics name the graph and the server it needs; without secagg the option is refused in one line."""
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_flower.simulation import run_flower
    from hdp_planner_train.run.options import configure

    cfg = configure(
        FlowerConfig,
        plan=str(plan_path),
        dataset="digits",
        clients=N,
        rounds=1,
        trust="secagg",
        in_process=True,
        ledger="none",
        node_state=str(tmp_path / "nodes"),
        sparse_graph=True,
        diagnostics=True,
    )
    metrics = run_flower(cfg, progress=lambda line: None)
    assert "sparse neighbour graph (honest-but-curious server)" in metrics["secagg"]["masks"]
    assert metrics["joined_per_round_mean"] == [40.0, 40.0]  # every node accepted the graph and replied
    out = CliRunner().invoke(cli_app, ["flower", str(plan_path), "--trust", "server", "--sparse-graph",
                                       "--override-trust", "--in-process", "--ledger", "none"])  # fmt: skip
    assert out.exit_code != 0 and "--sparse-graph" in out.output and "Traceback" not in out.output
