"""Secure aggregation on Flower (``--trust secagg``): one Flower SecAgg+ run per group with ChaCha20 masks, clients that
check the round against their pinned plan and size their shares from it alone, and group sums equal to the
simulator's integer pipeline bit for bit.

The federation runs in this process (:class:`~hdp_planner_flower.local.InProcessGrid`: every node keeps its Context
between SecAgg+ stages; no Ray), so every message the server receives can be inspected.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from conftest import UNSEEDED_ALPHA, digits_settings, pin_for, solve_secure  # noqa: E402
from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.app.message_type import MessageType  # noqa: E402
from flwr.client.mod import secaggplus_mod  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.common import Code, FitRes, Status, bytes_to_ndarray, ndarrays_to_parameters  # noqa: E402
from flwr.common.secure_aggregation.crypto.shamir import combine_shares  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, RECORD_KEY_STATE, Key, Stage  # noqa: E402
from flwr.compat.common import recorddict_compat as compat  # noqa: E402

from hdp_planner.distributed.encoding import padded_dimension  # noqa: E402
from hdp_planner.distributed.randomness import SeededBits  # noqa: E402
from hdp_planner.ledger.store import GroupRound  # noqa: E402
from hdp_planner.planfile.document import load_plan, read_document  # noqa: E402
from hdp_planner_flower import secagg_mod  # noqa: E402
from hdp_planner_flower.app import client_app, model_arrays  # noqa: E402
from hdp_planner_flower.local import InProcessGrid  # noqa: E402
from hdp_planner_flower.masks import MASK_MODULUS, MASK_USERS, chacha_masks, secure_masks  # noqa: E402
from hdp_planner_flower.node_state import NodeState, Terms  # noqa: E402
from hdp_planner_flower.pin import Pin, RoundRefused, file_sha256, load_pinned  # noqa: E402
from hdp_planner_flower.records import ARRAYS, fit_config, flatten  # noqa: E402
from hdp_planner_flower.secagg_workflow import SecAggPlus, run_secaggplus  # noqa: E402
from hdp_planner_flower.strategy import HdpStrategy  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.rules.secagg import client_message, release, round_plan  # noqa: E402
from hdp_planner_train.rules.specs import METHOD_NAMES, plan_spec  # noqa: E402

N = 24  # virtual clients, three groups of 8, all sampled every round (q = 1): the law's t = 6 and N = 8
SEED = 5
SETTINGS = digits_settings(clients=N, seed=SEED)
D = sum(p.numel() for p in make_model("digits").parameters())


@pytest.fixture(scope="module")
def secagg_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("secagg")
    return solve_secure(folder, eps="1,2,4", n=N, q=1.0, model_dim=D, extra=("--participations", "4"))


def unchanged(msg: Message, context: Context) -> Message:
    """A train function that learns nothing: each client's update is 0, the released sums are pure noise."""
    return Message(RecordDict({ARRAYS: msg.content[ARRAYS]}), reply_to=msg)


def step(msg: Message, context: Context) -> Message:
    """A train function whose update is a fixed vector per client (client id i: all coordinates 0.001·(i + 1))."""
    arrays = msg.content[ARRAYS]
    i = int(context.node_config["partition-id"])
    out = {k: type(a)(a.numpy() + 0.001 * (i + 1)) for k, a in arrays.items()}
    return Message(RecordDict({ARRAYS: type(arrays)(out)}), reply_to=msg)


def secagg_spec(path: Path, method: str = "gdpfed+"):
    plan = load_plan(path)
    return plan, plan_spec(plan, method)


class Everyone:
    """Sampling that takes every node (tests only)."""

    def random(self, size):
        return np.zeros(size)


def strategy_for(path: Path, method: str = "gdpfed+", uniform=None) -> HdpStrategy:
    plan, spec = secagg_spec(path, method)
    return HdpStrategy(plan, spec, plan_sha256=file_sha256(path), diagnostics=True, uniform=uniform)


def run_secure(path, app, rounds=1, fail=None, method="gdpfed+", uniform=None):
    grid = InProcessGrid(app, N, drop=fail, keep=True)
    strategy = strategy_for(path, method, uniform)
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    result = strategy.start(grid, arrays, num_rounds=rounds, train_config=SETTINGS.record())
    return strategy, grid, arrays, result


def test_chacha_masks_are_uniform_and_keyed_by_the_whole_seed():
    a = chacha_masks(b"k" * 32, 1 << 16, [(4000,), (3, 5)])
    assert [x.shape for x in a] == [(4000,), (3, 5)] and all(x.dtype == np.int64 for x in a)
    counts = np.bincount(a[0] >> 12, minlength=16)
    assert stats.chisquare(counts).pvalue > 1e-4
    flipped = chacha_masks(b"k" * 31 + b"j", 1 << 16, [(4000,)])[0]  # Flower's XOR fold would keep 31 of 32 bytes
    assert np.mean(flipped == a[0]) < 0.01
    with pytest.raises(ValueError, match="power of two"):
        chacha_masks(b"k" * 32, 1000, [(3,)])


def test_secure_masks_replace_flowers_generator_only_inside_the_block():
    import importlib

    client_side, server_side = (importlib.import_module(name) for name in MASK_USERS)

    before = client_side.pseudo_rand_gen
    with secure_masks(), secure_masks():
        assert client_side.pseudo_rand_gen is chacha_masks and server_side.pseudo_rand_gen is chacha_masks
    assert client_side.pseudo_rand_gen is before and server_side.pseudo_rand_gen is before


def test_the_server_sees_only_masked_uniform_vectors_and_no_clear_data(secagg_plan, tmp_path):
    """Every reply the ServerApp receives, over 2 rounds: SecAgg+ keys, encrypted shares, masked vectors that are
    uniform modulo 2^b (χ²), key shares, the enrolment's client ids; no metric, a constant example count."""
    app = client_app(step, pin=pin_for(secagg_plan, tmp_path))
    strategy, grid, _, _ = run_secure(secagg_plan, app, rounds=2)
    assert strategy.log.next_round == 2
    bits = strategy.spec.secagg.bits
    masked = []
    for reply in grid.received:
        assert not reply.has_error(), reply.error.reason
        content = reply.content
        assert not any(len(r) for r in content.array_records.values())  # arrays cleared by SecAgg+
        for name, record in content.metric_records.items():
            if name == "hdp":  # the enrolment: the node's client id only
                assert set(record) == {"client-id"}
            elif name == "fitres.num_examples":
                assert dict(record) == {"num_examples": 1}
            else:
                assert len(record) == 0, (name, dict(record))
        for name, record in content.config_records.items():
            assert name in (RECORD_KEY_CONFIGS, "fitres.metrics", "fitres.status"), name
            if name == "fitres.metrics":
                assert len(record) == 0
            if name == RECORD_KEY_CONFIGS and Key.MASKED_PARAMETERS in record:
                masked.extend(bytes_to_ndarray(b) for b in record[Key.MASKED_PARAMETERS])
    vectors = [v for v in masked if v.size > 1]
    assert len(vectors) >= 2 * 3 * 2  # two rounds, three groups, at least 2 survivors each
    values = np.concatenate(vectors).astype(np.int64) % (1 << bits)
    counts = np.bincount(values >> (bits - 6), minlength=64)  # 64 equal bins of [0, 2^b)
    assert stats.chisquare(counts).pvalue > UNSEEDED_ALPHA
    assert all(v.max() < MASK_MODULUS for v in vectors)


def capture_runs(monkeypatch) -> list:
    """Every SecAgg+ run of the strategy: (its nodes' configs, its output: (sums mod 2^b, survivors) or None)."""
    from hdp_planner_flower import strategy as strategy_module

    runs, real = [], strategy_module.modular_sums

    def capture(grid, **kw):
        out = real(grid, **kw)
        runs.append((kw["configs"], out))
        return out

    monkeypatch.setattr(strategy_module, "modular_sums", capture)
    return runs


def group_plan(spec, m: int):
    return round_plan(spec.secagg, rnd=0, group=m)


def expected_sums(grid, configs, alive, spec, seed: int) -> np.ndarray:
    """The simulator's modular sum of the survivors' messages (update 0.001·(i + 1), seeded shares)."""
    out = np.zeros(padded_dimension(D), dtype=np.int64)
    for node, config in configs.items():
        if node in alive:
            i = grid.node_ids.index(node)
            out += client_message(np.full(D, 0.001 * (i + 1)), group_plan(spec, int(config["hdp.group"])),
                                  SeededBits(seed))  # fmt: skip
    return np.mod(out, 1 << spec.secagg.bits)


class Pattern:
    """Sampling that takes the first ``counts[m]`` nodes of group m (tests only)."""

    def __init__(self, counts):
        self.counts = list(counts)

    def random(self, size):
        return (np.arange(size) >= self.counts.pop(0)).astype(float)


@pytest.mark.parametrize("counts", [(8, 8, 8), (8, 5, 1)], ids=["every group", "groups below their threshold"])
@pytest.mark.parametrize("masks", [True, False], ids=["SecAgg+", "masks off"])
def test_group_sums_equal_the_simulators_integer_pipeline_bit_for_bit(secagg_plan, tmp_path, monkeypatch, counts,
                                                                      masks):  # fmt: skip
    """With the shares' randomness seeded, the sums SecAgg+ returns (masks on), and those of the long-run mode
    without it, are exactly the simulator's modular sums of the same clients' messages. Every run carries one group
    (never several in one instance), and a group with fewer sampled clients than its t is not run at all."""
    monkeypatch.setattr(secagg_mod, "SecureBits", lambda: SeededBits(17))
    runs = capture_runs(monkeypatch)
    plan, spec = secagg_spec(secagg_plan)
    strategy = HdpStrategy(plan, spec, plan_sha256=file_sha256(secagg_plan), diagnostics=True,
                           uniform=Pattern(counts), masks=masks)  # fmt: skip
    grid = InProcessGrid(client_app(step, pin=pin_for(secagg_plan, tmp_path), masks=masks), N, keep=True)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    t = [law.threshold for law in spec.secagg.laws]
    assert len(runs) == sum(c >= tm for c, tm in zip(counts, t))
    for configs, out in runs:
        assert len({config["hdp.group"] for config in configs.values()}) == 1
        assert out is not None
        totals, alive = out
        assert alive == set(configs)
        assert np.array_equal(totals, expected_sums(grid, configs, alive, spec, 17))
    assert [w.group for w in strategy.stats.withheld] == [m for m, (c, tm) in enumerate(zip(counts, t)) if c < tm]
    assert all(w.reason.endswith(f"below the threshold t = {t[w.group]}") for w in strategy.stats.withheld)


@pytest.mark.parametrize("stage", ["setup", "share_keys", "collect_masked_vectors", "unmask"])
def test_dropouts_at_each_stage_release_planned_noise_or_nothing(secagg_plan, tmp_path, stage, monkeypatch):
    """Nodes that vanish at a SecAgg+ stage. Clients that learn nothing: a released sum is pure noise. A group
    releases iff at least its run's threshold max(t, ⌊c/2⌋ + 1) of its nodes stay to the end (SecAgg+ itself
    refuses otherwise), and then the server's top-up brings the noise to the law's N shares whatever the count."""
    runs = capture_runs(monkeypatch)
    lost = {0, 1, 8, 16, 17, 18, 19, 20}  # group 1 loses 2 of its 8 nodes, group 2 one, group 3 five
    app = client_app(unchanged, pin=pin_for(secagg_plan, tmp_path))
    strategy, grid, _, _ = run_secure(secagg_plan, app, uniform=Everyone(),
                                      fail=lambda i, s: i in lost and s == stage)  # fmt: skip
    _, spec = secagg_spec(secagg_plan)
    released = 0
    for configs, out in runs:
        m = int(next(iter(configs.values()))["hdp.group"])
        ids = [grid.node_ids.index(n) for n in configs]
        staying = sum(i not in lost for i in ids)
        summed = len(ids) if stage == "unmask" else staying  # unmask-stage dropouts already sent their vectors
        rplan = group_plan(spec, m)
        t = rplan.law.run_threshold(len(ids))
        assert (out is not None) == (staying >= t), (m, stage, staying, t)
        if out is not None:
            released += 1
            assert len(out[1]) == summed >= t
            y = release(out[0], rplan, len(out[1]), SeededBits(3))
            per_share = rplan.law.encoding.gamma**2 * rplan.law.share_sigma2  # update units², per coordinate
            measured = float(np.sum(y**2)) / D / per_share  # ≈ the number of shares in the sum (d = 2410)
            assert measured == pytest.approx(rplan.law.shares, rel=5 * np.sqrt(2 / D) + 0.02)
    assert len(strategy.stats.withheld) == 3 - released


@pytest.mark.parametrize("fixed", [True, False])
def test_flowers_workflow_loses_the_round_when_a_node_drops_before_sharing_its_keys(secagg_plan, tmp_path, fixed,
                                                                                    monkeypatch):  # fmt: skip
    """Flower 1.41's SecAggPlusWorkflow keeps a node that vanished at the share-keys stage among the nodes to unmask;
    survivors hold no key share of it and fail, and the group releases nothing. With the bookkeeping fix
    (:class:`SecAggPlus`) the 7 survivors of each group of 8 (t = 6) release their sum."""
    from flwr.server.workflow import SecAggPlusWorkflow

    from hdp_planner_flower import secagg_workflow

    if not fixed:
        monkeypatch.setattr(secagg_workflow, "SecAggPlus", SecAggPlusWorkflow)
    app = client_app(unchanged, pin=pin_for(secagg_plan, tmp_path))
    strategy, grid, _, _ = run_secure(secagg_plan, app, uniform=Everyone(),
                                      fail=lambda i, s: i in (0, 8, 16) and s == "share_keys")  # fmt: skip
    assert strategy.stats.joined == [8, 8, 8]
    errors = [r.error.reason for r in grid.received if r.has_error()]
    if fixed:
        assert len(strategy.stats.withheld) == 0 and not errors
    else:
        assert len(strategy.stats.withheld) == 3 and any(e.startswith("KeyError") for e in errors)


def test_a_client_refuses_a_round_that_differs_from_its_pin(secagg_plan, tmp_path):
    pinned = load_pinned(pin_for(secagg_plan, tmp_path))
    rules = {"plan-sha256": pinned.sha256, "trust": "secagg", "method": "gdpfed+", "group": 0, "server-round": 1,
             "clip": pinned.clips[0], "noise-multiplier": pinned.noise[0][0], "q": pinned.q[0], "joined": 8,
             "run-size": 8}  # fmt: skip
    b = pinned.secagg.bits
    assert pinned.secagg.laws[0].threshold == 6
    ok = dict(client=0, sampled=8, share_number=8, threshold=6, keys=8, quantization=(float(1 << (b - 1)), 1 << b,
              MASK_MODULUS, 1.0))  # fmt: skip
    large = dict(ok, sampled=14, share_number=14, keys=14)  # 14 clients (Sybils): a majority, 8, is required
    assert pinned.check(rules, **ok) == 0
    bad = [
        ({**rules, "plan-sha256": "0" * 64}, ok, "not the pinned one"),
        ({**rules, "trust": "server"}, ok, "under server"),
        ({**rules, "group": 1}, ok, "the plan in group 1"),
        ({**rules, "noise-multiplier": pinned.noise[0][0] / 2}, ok, "noise-multiplier"),
        ({**rules, "clip": 2.0}, ok, "clip"),
        ({**rules, "q": 0.9}, ok, "q"),
        ({**rules, "run-size": 10**6, "joined": 10**6}, ok, "SecAgg\\+ shows 8 sampled"),
        (rules, {**ok, "keys": 3}, "3 public keys"),
        (rules, {**ok, "share_number": 3}, "3 shares"),
        (rules, {**ok, "threshold": 7}, "threshold is 7; the plan's law needs 6"),
        (rules, {**ok, "threshold": 4}, "at most half of the 8 clients"),
        ({**rules, "run-size": 14}, {**large, "threshold": 7}, "at most half of the 14 clients"),
        ({**rules, "run-size": 14}, {**large, "threshold": 6}, "at most half of the 14 clients"),
        (rules, {**ok, "quantization": (8.0, 1 << 22, MASK_MODULUS, 1000.0)}, "quantization"),
        ({**rules, "server-round": 99}, ok, "outside"),
    ]
    for r, kw, match in bad:
        with pytest.raises(RoundRefused, match=match):
            pinned.check(r, **kw)
    assert pinned.check({**rules, "run-size": 14}, **{**large, "threshold": 8}) == 0


def test_a_client_refuses_a_plan_file_that_is_not_the_pinned_one(secagg_plan, tmp_path):
    other = tmp_path / "plan.json"
    doc = json.loads(secagg_plan.read_text())
    other.write_text(json.dumps(doc, indent=1))  # the same plan, other bytes
    with pytest.raises(RoundRefused, match="SHA-256"):
        load_pinned(
            Pin(
                plan=str(other), sha256=file_sha256(secagg_plan), method="gdpfed+", groups=None, state_dir=str(tmp_path)
            )
        )


def test_nodes_past_their_cap_drop_out_of_the_protocol(secagg_plan, tmp_path):
    """The plan caps K = 4 participations; nodes that already used them refuse, SecAgg+ sees them as dropouts."""
    sha = file_sha256(secagg_plan)
    for i in range(N):
        state = NodeState(tmp_path, i)
        for r in range(4):
            state.admit(
                plan_sha256=sha,
                run_id=7,
                server_round=r + 1,
                terms=Terms(costs=(GroupRound(q=0.1, noise_multiplier=50.0),) * 4, delta=1e-5, cap=4, budget=9.0),
            )
    app = client_app(unchanged, pin=pin_for(secagg_plan, tmp_path))
    charged = []
    account = type("Account", (), {"release": lambda self, rnd: charged.append(rnd), "finish": lambda self: None})()
    grid = InProcessGrid(app, N, keep=True)
    strategy = strategy_for(secagg_plan)
    strategy.account = account
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    result = strategy.start(grid, arrays, num_rounds=1, train_config=SETTINGS.record())
    assert len(strategy.stats.withheld) == 3  # every group: nobody contributes, nothing released
    assert charged == [0]  # charged all the same: the plan counts every round, whoever took part
    assert torch.equal(flatten(result.arrays), flatten(arrays))
    assert any(r.has_error() and "cap K = 4" in r.error.reason for r in grid.received)


def test_hdp_plan_flower_in_process_runs_a_secure_plan_and_reports_both_adversaries(secagg_plan, tmp_path):
    """The command's path (in this process instead of Ray): the run's ε per group is the distributed accounting's,
    and metrics.json carries ε against third parties and against the server at the clients' cap K."""
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_flower.simulation import run_flower
    from hdp_planner_train.run.options import configure

    cfg = configure(FlowerConfig, plan=str(secagg_plan), dataset="digits", clients=N, rounds=2, trust="secagg",
                       in_process=True, out=str(tmp_path / "run"), ledger="none")  # fmt: skip
    metrics = run_flower(cfg, progress=lambda line: None)
    assert metrics["flower_engine"] == "in-process" and metrics["trust"] == "secagg"
    sa = metrics["secagg"]
    assert sa["participation_cap"] == 2 and "dropout_simulated" not in sa  # min(K = 4, rounds run)
    plan, spec = secagg_spec(secagg_plan)
    row = plan.method(METHOD_NAMES["gdpfed+"])
    for m, entry in enumerate(metrics["epsilon_spent"]):
        want = spec.trust.epsilon_spent(row, plan.config, group=m, rounds=2)
        assert entry["epsilon_spent"] == pytest.approx(want, rel=1e-12) == sa["epsilon_third_parties"][m]
        assert sa["epsilon_server"][m] >= entry["epsilon_spent"] * (1 - 1e-12)  # no amplification against the server
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["secagg"] == sa
    row = read_document(secagg_plan)["trust"]["rows"][METHOD_NAMES["gdpfed+"]]
    assert metrics["noise_lambda_planned"] == row["lambda_secagg"]  # the secure row's Λ, not the trusted server's


def test_a_target_alone_with_other_groups_and_an_inflated_count_still_sends_the_plans_share(secagg_plan, tmp_path):
    """A malicious server runs one target of group 1 with 7 nodes of groups 2 and 3 (each told its own group) and
    announces a run of 23 clients, the shrink-the-share attack on a slot of one. The target's share is sized by its
    group's law alone: its message (the long-run mode, no masks, so the test can see it) carries σ²_s of the plan."""
    from hdp_planner_flower.records import fit_config
    from hdp_planner_flower.secagg_workflow import modular_sums

    _, spec = secagg_spec(secagg_plan)
    law = spec.secagg.laws[0]
    grid = InProcessGrid(client_app(unchanged, pin=pin_for(secagg_plan, tmp_path), masks=False), N, keep=True)
    strategy = strategy_for(secagg_plan)
    strategy.enroll(grid)
    strategy.joined = [23, 23, 23]
    target, others = strategy.members[0][0], strategy.members[1][:4] + strategy.members[2][:3]
    group_of = {target: 0} | {n: 1 for n in strategy.members[1]} | {n: 2 for n in strategy.members[2]}
    configs = {n: fit_config(strategy.rules(1, m=group_of[n]), SETTINGS.record()) for n in [target, *others]}
    for config in configs.values():
        config["hdp.run-size"] = 23
    modular_sums(grid, configs=configs, server_round=1, arrays=model_arrays("digits", num_classes=10, seed=SEED),
                 bits=spec.secagg.bits, threshold=law.run_threshold(23), masks=False)  # fmt: skip
    reply = next(r for r in grid.received if r.metadata.src_node_id == target and not r.has_error()
                 and "fitres.parameters" in r.content.array_records)  # fmt: skip
    from flwr.common import parameters_to_ndarrays
    from flwr.compat.common import recorddict_compat as compat

    sent = parameters_to_ndarrays(compat.recorddict_to_fitres(reply.content, keep_input=True).parameters)[0]
    half = 1 << (spec.secagg.bits - 1)
    share = np.mod(np.rint(sent + half).astype(np.int64) + half, 1 << spec.secagg.bits) - half
    assert float(share.var()) == pytest.approx(law.share_sigma2, rel=5 * np.sqrt(2 / share.size))


def test_a_pinned_plan_with_survivors_at_half_is_refused(secagg_plan, tmp_path):
    """F ≤ 1/2 never runs: a plan file edited to F = 0.5 (and re-pinned) fails the client's own verification."""
    doc = json.loads(secagg_plan.read_text())
    doc["trust"]["survivors"] = 0.5
    edited = tmp_path / "half.json"
    edited.write_text(json.dumps(doc))
    with pytest.raises(RoundRefused, match="survivors F must lie in \\(1/2, 1\\]"):
        load_pinned(pin_for(edited, tmp_path))


def test_the_strategy_tops_every_release_up_to_the_laws_shares(secagg_plan, tmp_path, monkeypatch):
    """Zero updates, 6 and 8 clients sampled in groups 1 and 2: what the strategy releases of each group carries the
    law's N shares (the N − c drawn while the clients work, the rest after), not the c the clients sent."""
    from hdp_planner_flower import strategy as strategy_module

    released, real = [], strategy_module.release

    def capture(total, plan, survivors, bits):
        y = real(total, plan, survivors, bits)
        released.append((plan.law, y))
        return y

    monkeypatch.setattr(strategy_module, "release", capture)
    plan, spec = secagg_spec(secagg_plan)
    strategy = HdpStrategy(plan, spec, plan_sha256=file_sha256(secagg_plan), diagnostics=True,
                           uniform=Pattern((6, 8, 0)))  # fmt: skip
    grid = InProcessGrid(client_app(unchanged, pin=pin_for(secagg_plan, tmp_path)), N, keep=True)
    strategy.start(
        grid, model_arrays("digits", num_classes=10, seed=SEED), num_rounds=1, train_config=SETTINGS.record()
    )
    assert len(released) == 2
    for law, y in released:
        measured = float(np.sum(y**2)) / D / (law.encoding.gamma**2 * law.share_sigma2)
        assert measured == pytest.approx(law.shares, rel=5 * np.sqrt(2 / D) + 0.02)


# ---------------------------------------------------------------- SecAgg+'s inconsistent-dropouts attack, replayed
# A malicious server tells some nodes that a target survived and the others that it dropped, so the first return shares
# of the target's self-mask seed and the second shares of its pairwise-mask key (Flower's SecAgg+ has no consistency
# round); with both it unmasks the target's own vector. It needs a threshold of at most half the run: the pin refuses
# such a run, and at the plan's threshold (a strict majority) the two halves never both reach it.


class InconsistentUnmask(SecAggPlus):
    """A malicious server's unmask stage: the target (the smallest node id) and ``told_alive`` others are told the
    target survived, every other node that it dropped. ``stolen``: the target's seed shares and key shares."""

    def __init__(self, *, told_alive: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.told_alive = told_alive
        self.stolen: tuple[list[bytes], list[bytes]] | None = None

    def unmask_stage(self, grid, context, state) -> bool:
        nodes = sorted(state.active_node_ids)
        target = nodes[0]
        alive = set(nodes[: self.told_alive + 1])

        def make(nid: int) -> Message:
            dead = [] if nid in alive else [target]
            cfg = {Key.STAGE: Stage.UNMASK, Key.ACTIVE_NODE_ID_LIST: [n for n in nodes if n not in dead],
                   Key.DEAD_NODE_ID_LIST: dead}  # fmt: skip
            return Message(RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(cfg)}), dst_node_id=nid,
                           message_type=MessageType.TRAIN, group_id="1")  # fmt: skip

        seeds, keys = [], []
        for reply in grid.send_and_receive([make(n) for n in nodes]):
            if reply.has_error():
                continue
            res = reply.content.config_records[RECORD_KEY_CONFIGS]
            for owner, share in zip(res[Key.NODE_ID_LIST], res[Key.SHARE_LIST]):
                if owner == target:
                    (seeds if reply.metadata.src_node_id in alive else keys).append(share)
        self.stolen = (seeds, keys)
        return False  # the attack only collects


def attack(grid, configs: dict, threshold: int, told_alive: int, arrays) -> InconsistentUnmask:
    workflow = InconsistentUnmask(told_alive=told_alive, num_shares=1.0, reconstruction_threshold=threshold,
                                  max_weight=1.0, clipping_range=float(1 << 15), quantization_range=1 << 16,
                                  modulus_range=MASK_MODULUS)  # fmt: skip
    with secure_masks():
        run_secaggplus(grid, workflow, configs=configs, server_round=1, arrays=arrays)
    return workflow


def pinned_round(secagg_plan, tmp_path):
    """Group 1's 8 pinned nodes, every one sampled: (grid, their configs, the law's run threshold, the model)."""
    grid = InProcessGrid(client_app(unchanged, pin=pin_for(secagg_plan, tmp_path)), N, keep=True)
    strategy = strategy_for(secagg_plan, uniform=Everyone())
    strategy.enroll(grid)
    nodes = strategy.sample(1)[0]
    configs = {n: fit_config(strategy.rules(1, m=0), SETTINGS.record()) for n in nodes}
    return (
        grid,
        configs,
        strategy.spec.secagg.laws[0].run_threshold(len(nodes)),
        model_arrays("digits", num_classes=10, seed=SEED),
    )


def test_at_the_plans_majority_threshold_the_two_halves_never_both_reach_it(secagg_plan, tmp_path):
    grid, configs, t, arrays = pinned_round(secagg_plan, tmp_path)
    assert t > len(configs) / 2
    workflow = attack(grid, configs, t, told_alive=len(configs) // 2 - 1, arrays=arrays)
    seeds, keys = workflow.stolen  # every node answered the inconsistent stories: only the threshold protects
    assert len(seeds) + len(keys) == len(configs) < 2 * t
    assert len(seeds) < t and len(keys) < t  # neither secret of the target can be rebuilt


def test_a_threshold_at_half_is_refused_before_any_vector_is_sent(secagg_plan, tmp_path):
    grid, configs, _, arrays = pinned_round(secagg_plan, tmp_path)
    half = len(configs) // 2
    workflow = attack(grid, configs, half, told_alive=half - 1, arrays=arrays)
    assert workflow.stolen is None  # the run halted before unmasking: no masked vector left any node
    refusals = [r.error.reason for r in grid.received if r.has_error()]
    assert len(refusals) == len(configs) and all("at most half" in r for r in refusals)


def plain_train(msg: Message, context) -> Message:
    """An unpinned client of Flower's own SecAgg+: its update is a constant vector."""
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.full(4, 3.0)]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)


def test_without_the_pin_a_threshold_at_half_gives_the_server_both_secrets():
    """The control: Flower's SecAgg+ clients accept a threshold of 4 of 8, and each half returns 4 shares of one
    of the target's secrets: the server rebuilds both, its self-mask seed and its pairwise-mask key."""
    app = ClientApp(mods=[secaggplus_mod])
    app.train()(plain_train)
    grid = InProcessGrid(app, 8)
    configs = {n: {} for n in grid.get_node_ids()}
    workflow = attack(grid, configs, 4, told_alive=3, arrays=model_arrays("digits", num_classes=10, seed=SEED))
    seeds, keys = workflow.stolen
    assert len(seeds) == len(keys) == 4
    secrets = grid.contexts[min(configs)].state.config_records[RECORD_KEY_STATE]
    assert combine_shares(seeds) == secrets["rd_seed"] and combine_shares(keys) == secrets["sk1"]
