"""Plans on Flower (hdp_planner_flower): the strategy against the simulator's rules, trust models, refusals, and one
real run of ``hdp-plan flower`` on Flower's simulation engine (Ray)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("flwr")

from conftest import digits_settings  # noqa: E402
from flwr.app import Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.ledger.store import Ledger  # noqa: E402
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines  # noqa: E402
from hdp_planner.planning.trust import SecaggParameters  # noqa: E402
from hdp_planner.trust.secagg import SecureAggregation  # noqa: E402
from hdp_planner_cli.app import app as cli_app  # noqa: E402
from hdp_planner_flower.app import client_app, model_arrays, train  # noqa: E402
from hdp_planner_flower.membership import FlowerRunError, groups_from_file  # noqa: E402
from hdp_planner_flower.records import ARRAYS, HDP, flatten  # noqa: E402
from hdp_planner_flower.simulation import FLOWER_METHODS  # noqa: E402
from hdp_planner_flower.strategy import HdpStrategy  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.rules.aggregate import Observers, aggregate  # noqa: E402
from hdp_planner_train.rules.noise_sources import SeededNoise  # noqa: E402
from hdp_planner_train.rules.sampling import round_seed, sample_round  # noqa: E402
from hdp_planner_train.rules.specs import METHOD_NAMES, method_spec  # noqa: E402

N = 30  # virtual clients
ROUNDS = 4  # the plan's T
SEED = 3
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def flower_plan():
    base = plan([0.5, 1.5, 3.0], n=N, rounds=ROUNDS, q=0.4, clip=1.5, sparsity=(0.7, 0.8, 0.9))
    d = sum(p.numel() for p in make_model("digits").parameters())
    return add_baselines(base, tuple(BASELINES.values()), BaselineOptions(model_dim=d, pfa_dim=2, pfa_window=3))


@pytest.fixture(scope="module")
def plan_path(flower_plan, tmp_path_factory):
    path = tmp_path_factory.mktemp("flower") / "plan.json"
    save_plan(flower_plan, path)
    return path


SETTINGS = digits_settings(clients=N, seed=SEED, local_steps=2, lr_decay=0.99)


class LocalGrid:
    """A Grid that runs a ClientApp in this process (no Ray): node i has partition-id i; ``drop`` nodes never reply."""

    def __init__(self, app, nodes: int = N, partition=None, drop=()):
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
        self.app = app
        self.node_ids = [1000 + 7 * i for i in range(nodes)]
        self.partition = partition or (lambda i: i)
        self.drop = set(drop)

    def get_node_ids(self):
        return list(self.node_ids)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            i = self.node_ids.index(msg.metadata.dst_node_id)
            if i in self.drop and msg.metadata.message_type == "train":
                continue
            ctx = Context(1, msg.metadata.dst_node_id, {"partition-id": self.partition(i)}, RecordDict(), {})
            replies.append(self.app(msg, ctx))
        return replies


def unchanged(msg: Message, context: Context) -> Message:
    """A user's train function that learns nothing: the private update is exactly the noise share (or 0)."""
    return Message(RecordDict({ARRAYS: msg.content[ARRAYS]}), reply_to=msg)


def run_strategy(flower_plan, method, app, rounds=1, grid=None, **options):
    spec = method_spec(flower_plan, method)
    strategy = HdpStrategy(flower_plan, spec, **{"diagnostics": True, **options})
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    result = strategy.start(grid or LocalGrid(app), arrays, num_rounds=rounds, train_config=SETTINGS.record())
    return strategy, arrays, result


class SeededUniform:
    """The simulator's sampling stream of a round (tests only): ``sample_round``'s generator."""

    def __init__(self, seed, rnd):
        self.rng = np.random.default_rng(round_seed(seed, rnd=rnd, stream=0))

    def random(self, size):
        return self.rng.random(size)


def flower_round_and_simulator(flower_plan, method):
    """One seeded Flower round (server trust) and aggregate() on the updates its clients sent, with the same noise
    stream: (strategy, the clients that sent, the Flower round's θ, the simulator's θ, the simulator's stats)."""
    sent: dict[int, torch.Tensor] = {}

    def record(msg, ctx, call_next):
        reply = call_next(msg, ctx)
        sent[int(reply.content[HDP]["client-id"])] = flatten(reply.content[ARRAYS])
        return reply

    strategy, arrays, result = run_strategy(
        flower_plan, method, client_app(mods=[record]),
        uniform=SeededUniform(SEED, 0), noise_for=lambda rnd: SeededNoise(SEED, rnd),
    )  # fmt: skip
    spec = strategy.spec
    sampled = sample_round(spec, seed=SEED, rnd=0)
    ids = np.concatenate(sampled)
    group_of_row = np.concatenate([np.full(len(s), m) for m, s in enumerate(sampled)])
    deltas = torch.stack([sent[int(i)] for i in ids]) if len(ids) else torch.zeros(0, flatten(arrays).numel())
    update, stats = aggregate(deltas, group_of_row, spec, SeededNoise(SEED, 0), rnd=0, public_history=[])
    return strategy, sorted(sent), flatten(result.arrays), flatten(arrays) + update, stats


@pytest.mark.parametrize("method", FLOWER_METHODS)
def test_round_equals_simulator_for_the_same_clients_and_noise(flower_plan, method):
    """One Flower round (server trust) = aggregate() on the updates the clients sent, with the same noise stream."""
    strategy, sent, flower_theta, simulator_theta, stats = flower_round_and_simulator(flower_plan, method)
    sampled = sample_round(strategy.spec, seed=SEED, rnd=0)
    assert sent == sorted(np.concatenate(sampled).tolist())  # the simulator's clients for this stream
    assert torch.equal(flower_theta, simulator_theta)
    assert stats.joined == strategy.log.joined[0]
    assert stats.lambda_measured == pytest.approx(strategy.log.lambda_measured[0], rel=1e-12)


@pytest.mark.parametrize("method", ["gdpfed+", "idp-fedavg-sample"])
def test_audited_round_equals_the_simulators_audit(flower_plan, method):
    """--audit on Flower: the strategy draws the canaries with its nodes and inserts them as train --audit does,
    through the same clipping and noise, and observes the same releases, so one round's update, canary projections
    and checks are equal."""
    from hdp_planner_train.audit.canaries import CanaryAuditor

    sent: dict[int, torch.Tensor] = {}

    def record(msg, ctx, call_next):
        reply = call_next(msg, ctx)
        sent[int(reply.content[HDP]["client-id"])] = flatten(reply.content[ARRAYS])
        return reply

    spec = method_spec(flower_plan, method)
    d = flatten(model_arrays("digits", num_classes=10, seed=SEED)).numel()
    ours = CanaryAuditor(spec, d, SEED, per_group=200)
    _, arrays, result = run_strategy(
        flower_plan, method, client_app(mods=[record]), auditor=ours,
        uniform=SeededUniform(SEED, 0), noise_for=lambda rnd: SeededNoise(SEED, rnd),
    )  # fmt: skip
    theirs = CanaryAuditor(spec, d, SEED, per_group=200)
    sampled = theirs.take(sample_round(spec, seed=SEED, rnd=0, extra=theirs.extra), spec.offsets, spec.sizes)
    ids = np.concatenate(sampled)
    group_of_row = np.concatenate([np.full(len(s), m) for m, s in enumerate(sampled)]).astype(np.int64)
    deltas = torch.stack([sent[int(i)] for i in ids]) if len(ids) else torch.zeros(0, d)
    clients = len(group_of_row)
    deltas, group_of_row = theirs.insert(deltas, group_of_row, 0)
    assert len(group_of_row) > clients  # canaries joined this round
    update, _ = aggregate(deltas, group_of_row, spec, SeededNoise(SEED, 0), rnd=0, public_history=[],
                          observers=Observers(observe=theirs.observe))  # fmt: skip
    assert torch.equal(flatten(result.arrays), flatten(arrays) + update)
    for z_ours, z_theirs in zip(ours.z, theirs.z):
        np.testing.assert_array_equal(np.stack(z_ours), np.stack(z_theirs))
    assert ours.clients == theirs.clients and ours.unfaithful == theirs.unfaithful == [0] * len(spec.sizes)
    with pytest.raises(FlowerRunError, match="--trust server"):
        distrusted = SecureAggregation(parameters=SecaggParameters(model_dim=1))
        HdpStrategy(flower_plan, dataclasses.replace(spec, trust=distrusted), auditor=ours)


def test_clients_send_clipped_updates_of_their_own_training(flower_plan):
    """The mod turns the user's trained model into Δ clipped to C; the reply carries nothing data-dependent besides Δ
    (no clipped bit: only the group and the client id)."""
    sent = []

    def record(msg, ctx, call_next):
        reply = call_next(msg, ctx)
        sent.append((flatten(reply.content[ARRAYS]), float(msg.content[HDP]["clip"]), set(reply.content[HDP])))
        return reply

    app = client_app(mods=[record])
    run_strategy(flower_plan, "dp-fedavg", app, rounds=2)
    assert sent
    for update, clip, fields in sent:
        assert float(torch.linalg.vector_norm(update)) <= clip * (1 + 1e-5)
        assert fields == {"group", "client-id"}
    # the update is the clipped difference of the user's own training
    msg_ctx = Context(1, 1, {"partition-id": 4}, RecordDict(), {})
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    from flwr.app import ConfigRecord

    msg = Message(
        RecordDict({ARRAYS: arrays, HDP: ConfigRecord({"server-round": 1}), "train": SETTINGS.record()}),
        dst_node_id=1, message_type="train",
    )  # fmt: skip
    trained = flatten(train(msg, msg_ctx).content[ARRAYS])
    assert not torch.equal(trained, flatten(arrays))  # the user's training moved the model


def test_per_group_sampling_rates_and_messages(flower_plan):
    """Each group's nodes join with probability q_m (OS-entropy Poisson sampling); messages carry C_m, σ_m, c_m."""
    spec = method_spec(flower_plan, "gdpfed+")
    strategy = HdpStrategy(flower_plan, spec)
    grid = LocalGrid(client_app())
    strategy.enroll(grid)
    trials = 3000
    counts = np.zeros(3)
    arrays = model_arrays("digits", num_classes=10, seed=SEED)
    for r in range(trials):
        msgs = strategy.configure_train(1 + r % ROUNDS, arrays, SETTINGS.record(), grid)
        for msg in msgs:
            rules = msg.content[HDP]
            m = int(rules["group"])
            counts[m] += 1
            assert int(rules["joined"]) == strategy.joined[m]
            assert float(rules["clip"]) == spec.clips[m]
            assert float(rules["noise-multiplier"]) == spec.noise_multiplier[m]
            assert strategy.group_of_client[strategy.client_of_node[msg.metadata.dst_node_id]] == m
    expected = trials * np.asarray(spec.q) * np.asarray(spec.sizes)
    sd = np.sqrt(expected * (1 - np.asarray(spec.q)))
    assert np.all(np.abs(counts - expected) < 5 * sd), (counts, expected)


@pytest.mark.parametrize("method", ["dp-fedavg", "gdpfed-op", "idp-fedavg-sample", "idp-fedavg-scale", "hdp-pooled"])
def test_applied_noise_matches_exact_lambda_even_with_dropouts(flower_plan, method):
    """Clients that learn nothing: the applied update is pure noise, E‖u‖²/d = Λ_exact (no Top-k in these methods),
    also when a third of the nodes drop out (the server adds each group's full noise)."""
    spec = method_spec(flower_plan, method)
    assert all(k == 1.0 for k in spec.k_ratio)
    grid = LocalGrid(client_app(unchanged), drop=range(0, N, 3))
    strategy, arrays, result = run_strategy(flower_plan, method, None, rounds=ROUNDS, grid=grid)
    assert strategy.log.next_round == ROUNDS
    total = (flatten(result.arrays) - flatten(arrays)).double()  # Σ_r u_r, independent zero-mean rounds
    d = total.numel()
    lam = float(torch.sum(total**2)) / d / ROUNDS
    planned = flower_plan.method(METHOD_NAMES[method]).lambda_exact
    assert lam == pytest.approx(planned, rel=5 * np.sqrt(2 / d))  # sd of χ²_d/d is √(2/d) ≈ 3% at d = 2410


def test_ledger_stops_before_a_group_exceeds_its_epsilon(flower_plan):
    strategy, _, _ = run_strategy(flower_plan, "gdpfed+", client_app(unchanged), rounds=ROUNDS + 3)
    assert strategy.log.next_round == ROUNDS
    assert strategy.stopped == f"stopped before round {ROUNDS + 1}: a group would exceed its ε"
    assert strategy.affordable(ROUNDS) and not strategy.affordable(ROUNDS + 1)


def test_a_deployed_strategy_records_nothing_that_reveals_who_took_part(flower_plan):
    """Without --diagnostics (the default: noise and sampling are secure) no per-round joined count, measured noise
    or round time is kept: only the accuracy history and the rounds run."""
    spec = method_spec(flower_plan, "gdpfed+")
    rounds = []
    strategy = HdpStrategy(flower_plan, spec, on_round=lambda rnd, stats, seconds, res: rounds.append(rnd))
    strategy.start(LocalGrid(client_app(unchanged)), model_arrays("digits", num_classes=10, seed=SEED), num_rounds=2,
                   train_config=SETTINGS.record())  # fmt: skip
    assert strategy.log.next_round == 2 and rounds == [1, 2]
    assert strategy.log.joined == [] and strategy.log.lambda_measured == [] and strategy.log.round_seconds == []
    assert "joined_per_round_mean" not in strategy.log.summary()


def test_wrong_node_count_and_repeated_ids_are_refused(flower_plan):
    with pytest.raises(FlowerRunError, match=f"has {N + 1} nodes but the plan has n = {N} clients"):
        run_strategy(flower_plan, "gdpfed+", None, grid=LocalGrid(client_app(), nodes=N + 1))
    with pytest.raises(FlowerRunError, match="two nodes report client id 0"):
        run_strategy(flower_plan, "gdpfed+", None, grid=LocalGrid(client_app(), partition=lambda i: i // 2))
    strategy = HdpStrategy(flower_plan, method_spec(flower_plan, "gdpfed+"))
    with pytest.raises(FlowerRunError, match=f"has {N - 1} nodes but the plan has n = {N} clients"):
        strategy.enroll(LocalGrid(client_app(), nodes=N - 1), wait=0.5)


def test_enrolment_waits_for_nodes_still_connecting(flower_plan):
    class Connecting(LocalGrid):  # the simulation engine registers its nodes while the ServerApp starts
        calls = 0

        def get_node_ids(self):
            self.calls += 1
            return self.node_ids[: min(N, 10 * self.calls)]

    grid = Connecting(client_app())
    strategy = HdpStrategy(flower_plan, method_spec(flower_plan, "gdpfed+"))
    strategy.enroll(grid, wait=30)
    assert sorted(strategy.client_of_node.values()) == list(range(N)) and grid.calls == 3


def test_a_client_claiming_another_group_is_refused(flower_plan):
    def liar(msg, ctx, call_next):
        reply = call_next(msg, ctx)
        if int(ctx.node_config["partition-id"]) < N // 3:  # group 1 (ε = 0.5) claims group 3
            meta = reply.content[HDP]
            reply.content[HDP] = MetricRecord({"group": 2, "client-id": meta["client-id"]})
        return reply

    everyone = SimpleNamespace(random=np.zeros)  # every node joins: group 1 is asked for certain
    with pytest.raises(FlowerRunError, match=r"claims group 3 .* the plan puts it in group 1: reply refused") as err:
        run_strategy(flower_plan, "gdpfed+", client_app(unchanged, mods=[liar]), rounds=ROUNDS, uniform=everyone)
    assert "\n" not in str(err.value)


def test_groups_file_maps_client_ids_and_checks_each_budget(flower_plan, tmp_path):
    spec = method_spec(flower_plan, "gdpfed+")
    eps = flower_plan.groups.epsilon
    groups = np.array([2, 0, 1] * (N // 3))
    path = tmp_path / "groups.csv"

    def write(rows):
        path.write_text(
            "client_id,epsilon,group,group_epsilon\n" + "".join(f"{i},{e!r},{g},{ge!r}\n" for i, e, g, ge in rows)
        )

    write([(i, eps[g], g + 1, eps[g]) for i, g in enumerate(groups)])
    assert np.array_equal(groups_from_file(path, spec, eps, None), groups)
    with pytest.raises(FlowerRunError, match="digest mismatch"):
        groups_from_file(path, spec, eps, "0" * 64)
    write([(i, eps[0], 1, eps[0]) for i in range(N)])
    with pytest.raises(FlowerRunError, match="puts"):
        groups_from_file(path, spec, eps, None)
    # the review's file: a row whose own budget is the strictest but that names the loosest group
    write([(i, eps[0] if i == 0 else eps[g], g + 1, eps[g]) for i, g in enumerate(groups)])
    with pytest.raises(FlowerRunError, match=r"client 0 has budget .* below its group 3"):
        groups_from_file(path, spec, eps, None)
    write([(i, eps[g], g + 1, eps[0]) for i, g in enumerate(groups)])
    with pytest.raises(FlowerRunError, match="group_epsilon"):
        groups_from_file(path, spec, eps, None)


def test_cli_refuses_bad_input_with_one_line(plan_path, tmp_path):
    runner = CliRunner()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    cases = [
        ([str(bad), "--dataset", "digits", "--clients", str(N)], "schema"),
        ([str(plan_path), "--dataset", "digits"], "plan has n = 30 clients but the digits partition gives n = 120"),
        ([str(plan_path), "--dataset", "digits", "--clients", str(N), "--method", "dp2-fedsam"], "--method must be"),
        ([str(plan_path), "--dataset", "digits", "--clients", str(N), "--trust", "none"], "--trust must be"),
    ]
    for args, message in cases:
        res = runner.invoke(cli_app, ["flower", *args])
        assert res.exit_code == 2, res.output
        assert message in res.output and res.output.count("\n") == 1, res.output


def test_cli_without_flwr_names_the_extra(plan_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)  # `import flwr` raises ImportError
    res = CliRunner().invoke(cli_app, ["flower", str(plan_path), "--dataset", "digits", "--clients", str(N)])
    assert res.exit_code == 2 and "install the flower extra" in res.output and res.output.count("\n") == 1


def test_core_cli_imports_neither_flwr_nor_torch():
    code = "import sys, hdp_planner_cli.app; print('flwr' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert out.stdout.split() == ["False", "False"], out.stderr


@pytest.fixture(scope="module")
def simulated(plan_path, tmp_path_factory):
    """One real `hdp-plan flower` run on Flower's simulation engine (Ray start-up ≈ 25 s), shared by the tests."""
    out = tmp_path_factory.mktemp("flower-run")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    cmd = [sys.executable, "-m", "hdp_planner", "flower", str(plan_path), "--method", "gdpfed+", "--dataset",
           "digits", "--clients", str(N), "--rounds", "3", "--seed", str(SEED), "--out", str(out),
           "--diagnostics", "--audit", "--ledger", str(out / "ledger.sqlite")]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    return proc, out


def test_flower_simulation_writes_the_trainers_metrics(simulated, flower_plan):
    proc, out = simulated
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("round ")]
    assert [ln.split()[1] for ln in lines] == ["1/3", "2/3", "3/3"]
    m = json.loads((out / "metrics.json").read_text())
    assert m["runtime"] == "flower" and m["flwr_version"].startswith("1.41")
    assert m["trust"] == "server" and m["rounds"] == 3 and len(m["history"]) == 3
    charged = Ledger(str(out / "ledger.sqlite")).spending("flower")  # every round released in the ledger
    assert len(charged) == N and {(c.released_rounds, c.reserved_rounds) for c in charged} == {(3, 0)}
    assert m["clients"] == N and m["method"] == "gdpfed+" and m["stopped"] is None
    assert m["noise_lambda_planned"] == pytest.approx(flower_plan.method("GDPFed+").lambda_exact)
    assert m["noise_lambda_measured"] == pytest.approx(m["noise_lambda_planned"], rel=0.2)
    spent = [e["epsilon_spent"] for e in m["epsilon_spent"]]
    audit = m["audit"]["groups"]  # --audit: the trainer's audit section, one entry per group
    assert [g["epsilon_planned"] for g in audit] == pytest.approx(spent)
    assert all(g["insertions"] > 0 and g["verdict"] for g in audit)
    assert "privacy audit" in proc.stdout
    assert all(0 < s < b for s, b in zip(spent, flower_plan.method("GDPFed+").epsilon))
    assert (out / "metrics.csv").read_text().startswith("round,accuracy,loss")


@pytest.mark.parametrize("diagnostics", [False, True])
def test_cli_reports_per_round_diagnostics_only_with_the_flag(plan_path, tmp_path, diagnostics):
    """The command's own path, in this process instead of Ray: only --diagnostics adds who joined, the measured Λ
    and the round times, to the progress lines, the summary and metrics.json alike; without it none appear."""
    out = tmp_path / "run"
    args = ["flower", str(plan_path), "--dataset", "digits", "--clients", str(N), "--rounds", "1", "--in-process",
            "--ledger", "none", "--out", str(out), *(["--diagnostics"] if diagnostics else [])]  # fmt: skip
    res = CliRunner().invoke(cli_app, args)
    assert res.exit_code == 0, res.output
    metrics = json.loads((out / "metrics.json").read_text())
    revealing = {"simulation_diagnostics", "noise_lambda_measured", "joined_per_round_mean", "round_seconds"}
    assert metrics["rounds"] == 1 and metrics["flower_engine"] == "in-process"
    if diagnostics:
        assert revealing <= set(metrics) and len(metrics["round_seconds"]) == 1
        assert sum(metrics["joined_per_round_mean"]) > 0 and metrics["noise_lambda_measured"] > 0
        assert "joined" in res.output and "Λ measured" in res.output and "median round" in res.output
    else:
        assert not revealing & set(metrics)
        assert "joined" not in res.output and "median round" not in res.output
        assert f"Λ planned {metrics['noise_lambda_planned']:.4g}" in res.output


def _toy_row(plan_, options):
    """A new client-level method: GDPFed's row (every group at the plan's q, its own σ_m) under its own name."""
    from hdp_planner.planning.rows import derived_row

    return derived_row("Toy", plan_.method("GDPFed"), plan_)


def test_a_new_method_is_one_entry_and_trains_in_the_simulator_and_on_flower(flower_plan, monkeypatch, tmp_path):
    """Declared once (its plan row, round rules and builder); no trainer or Flower code names it."""
    from hdp_planner.methods.method import Method, RoundRules
    from hdp_planner.methods.registry import REGISTRY
    from hdp_planner_train import train

    toy = Method(key="toy", row="Toy", rules=RoundRules(sampling="plan-q"), build=_toy_row, audit=True, flower=True)
    monkeypatch.setitem(REGISTRY, "toy", toy)
    toy_plan = add_baselines(flower_plan, ("Toy",))
    path = tmp_path / "toy.json"
    save_plan(toy_plan, path)
    result = train(path, method="toy", dataset="digits", clients=N, rounds=2, noise="seeded", seed=SEED)
    assert result.method == "toy" and result.rounds == 2
    assert all(0 < g.epsilon_spent <= g.epsilon_budget for g in result.epsilon_spent)

    _, _, flower_theta, simulator_theta, _ = flower_round_and_simulator(toy_plan, "toy")
    assert torch.equal(flower_theta, simulator_theta)
