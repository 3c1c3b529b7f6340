"""The DP²-FedSAM family in the trainer: personal heads, SAM, per-client evaluation, pathological splits."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner import load_plan, plan, save_plan  # noqa: E402
from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.api import train_config  # noqa: E402
from hdp_planner_train.learning.datasets import DataError  # noqa: E402
from hdp_planner_train.learning.engines import ClientData, LocalTraining  # noqa: E402
from hdp_planner_train.learning.federated import load_federated  # noqa: E402
from hdp_planner_train.learning.models import make_model, split_head  # noqa: E402
from hdp_planner_train.learning.partitions import pathological_partition  # noqa: E402
from hdp_planner_train.rules.specs import method_spec  # noqa: E402
from hdp_planner_train.run.ledger import privacy_ledger  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator import personal  # noqa: E402
from hdp_planner_train.simulator.checkpoint import load as load_checkpoint  # noqa: E402
from hdp_planner_train.simulator.personal_eval import (  # noqa: E402
    evaluate_finetuned,
    evaluate_heads,
    label_distribution,
)
from hdp_planner_train.simulator.personal_local import (  # noqa: E402
    client_update,
    client_updates_vectorized,
    head_mask,
    sam_step,
)
from hdp_planner_train.simulator.trainer import CHECKPOINT, TrainConfig, TrainError, run  # noqa: E402

ROUNDS = 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Per-client loops of tiny models: one thread is faster than two on a shared machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory):
    """One ε (the DP-FedAvg row is what these methods use), n = the digits partition's 120 clients, q = 0.25."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan([1.0], n=120, rounds=ROUNDS, q=0.25, clip=1.0), path)
    return path


def _cfg(out, **kw) -> TrainConfig:
    base = dict(
        dataset="digits", shards=2, out=str(out), progress=False, eval_every=2, noise="seeded"
    )  # simulations: reproducible noise
    base.update(kw)
    return train_config(**base)


def _ckpt(out):
    return load_checkpoint(out)


# ------------------------------------------------------------------ partition


@pytest.mark.parametrize(("n", "s"), [(120, 2), (120, 1), (37, 3), (10, 10)])
def test_pathological_partition_gives_exactly_s_classes_and_uses_every_sample_once(n, s):
    labels = load_federated("digits").y_train
    parts = pathological_partition(labels, n, s, np.random.default_rng(1))
    assert len(parts) == n
    assert all(len(np.unique(labels[p])) == s for p in parts)
    every = np.concatenate(parts)
    assert len(every) == len(labels) and len(np.unique(every)) == len(labels)
    counts = np.bincount([c for p in parts for c in np.unique(labels[p])], minlength=10)
    assert counts.max() - counts.min() <= 1  # classes drawn evenly


def test_pathological_partition_errors_and_options():
    labels = np.repeat(np.arange(10), 5)
    with pytest.raises(DataError, match="between 1 and the 10 classes"):
        pathological_partition(labels, 4, 11, np.random.default_rng(0))
    with pytest.raises(DataError, match="cannot cover"):
        pathological_partition(labels, 3, 2, np.random.default_rng(0))
    with pytest.raises(DataError, match="samples for"):
        pathological_partition(labels, 40, 2, np.random.default_rng(0))  # 8 shards of a 5-sample class
    with pytest.raises(DataError, match="--shards and --dirichlet"):
        load_federated("digits", dirichlet=0.5, shards=2)
    a, b = load_federated("digits", shards=2, seed=3), load_federated("digits", shards=2, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a.clients, b.clients))


# ------------------------------------------------------------------ model split, SAM, local training


@pytest.mark.parametrize(
    ("dataset", "head"),
    [("digits", "fc2"), ("fmnist", "fc2"), ("svhn", "fc"), ("cifar10", "fc"), ("shakespeare", "fc")],
)
def test_split_head_is_the_final_classifier(dataset, head):
    model = make_model(dataset, 96 if dataset == "shakespeare" else 10)
    assert split_head(model) == [f"{head}.weight", f"{head}.bias"]
    last = list(model.named_parameters())[-2:]
    assert int(head_mask(model).sum()) == sum(p.numel() for _, p in last)
    assert bool(head_mask(model)[-1]) and not bool(head_mask(model)[0])


def test_sam_perturbs_only_the_body_by_rho():
    torch.manual_seed(0)
    model = make_model("digits")
    mask = head_mask(model)
    body = [p for n, p in model.named_parameters() if n not in split_head(model)]
    x, y = torch.randn(10, 1, 8, 8), torch.randint(0, 10, (10,))
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    perturbation = sam_step(model, body, x, y, rho=0.05, optimizer=torch.optim.SGD(body, lr=0.1))
    assert torch.all(perturbation[mask] == 0)
    assert torch.count_nonzero(perturbation[~mask]) > 0.9 * int((~mask).sum())
    assert float(torch.linalg.vector_norm(perturbation)) == pytest.approx(0.05, rel=1e-5)
    after = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    assert torch.equal(after[mask], before[mask]) and not torch.equal(after[~mask], before[~mask])
    # ρ = 0 is plain SGD: no perturbation
    assert torch.count_nonzero(sam_step(model, body, x, y, rho=0.0, optimizer=torch.optim.SGD(body, lr=0.1))) == 0


def test_client_update_sends_only_the_body_and_keeps_its_head():
    torch.manual_seed(0)
    model = make_model("digits")
    mask = head_mask(model)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    head = theta[mask] + 0.01
    xs, ys = torch.randn(7, 10, 1, 8, 8), torch.randint(0, 10, (7, 10))
    kw = dict(training=LocalTraining(steps=7, batch=10, lr=0.1, momentum=0.5, rho=0.1), mask=mask)
    delta, new_head = client_update(model, theta, head, xs, ys, head_steps=2, **kw)
    assert delta.numel() == int((~mask).sum()) and float(delta.norm()) > 0  # d_φ only: no head coordinate
    assert not torch.equal(new_head, head)
    # no head steps: the head is frozen while the body trains
    delta0, head0 = client_update(model, theta, head, xs[:5], ys[:5], head_steps=0, **kw)
    assert torch.equal(head0, head) and float(delta0.norm()) > 0
    # no personal head (dp-fedsam): the whole model's update
    full, none = client_update(model, theta, None, xs[:5], ys[:5], head_steps=0, **kw)
    assert none is None and full.numel() == theta.numel()


@pytest.mark.parametrize("dataset, shape", [("digits", (1, 8, 8)), ("fmnist", (1, 28, 28))])
@pytest.mark.parametrize("personal_head", [True, False])
def test_vectorized_client_updates_equal_the_loop(dataset, shape, personal_head):
    """SAM, personal heads and frozen parts for all clients at once (vmap for the MLP, the CNN's batched forward)
    against the per-client loop, in float64."""
    torch.manual_seed(1)
    model = make_model(dataset).double()
    mask = head_mask(model)
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    heads = theta[mask] + 0.05 * torch.randn(3, int(mask.sum()), dtype=torch.float64) if personal_head else None
    xs, ys = torch.randn(3, 4, 5, *shape, dtype=torch.float64), torch.randint(0, 10, (3, 4, 5))
    training = LocalTraining(steps=4, batch=5, lr=0.1, momentum=0.5, rho=0.1, chunk=2)
    kw = dict(head_steps=2 if personal_head else 0, training=training, mask=mask)
    rows, new_heads = client_updates_vectorized(model, theta, heads, xs, ys, **kw)
    for k in range(3):
        delta, head = client_update(model, theta, None if heads is None else heads[k], xs[k], ys[k], **kw)
        torch.testing.assert_close(rows[k], delta, rtol=1e-9, atol=1e-12)
        if personal_head:
            torch.testing.assert_close(new_heads[k], head, rtol=1e-9, atol=1e-12)
            assert not torch.equal(head, heads[k])
    assert new_heads is None if not personal_head else new_heads.shape == heads.shape
    assert rows.shape[1] == (int((~mask).sum()) if personal_head else theta.numel()) and float(rows.abs().max()) > 0


def test_vectorized_fine_tuning_equals_the_loop():
    torch.manual_seed(2)
    data = load_federated("digits", shards=2)
    model = make_model("digits")
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    dist = label_distribution(data.clients, data.y_train, 10)
    x, y, xt, yt = (torch.as_tensor(a) for a in (data.x_train, data.y_train, data.x_test, data.y_test))
    training = LocalTraining(steps=3, batch=5, lr=0.1, momentum=0.5, engine="loop")
    sets = dict(data=ClientData(x, y, data.clients), test=(xt, yt), dist=dist, seed=0, rnd=1)
    loop = evaluate_finetuned(model, theta, training=training, **sets)
    vectorized = dataclasses.replace(training, engine="vectorized", chunk=50)
    vec = evaluate_finetuned(model, theta, training=vectorized, **sets)
    np.testing.assert_allclose(vec[1], loop[1], rtol=1e-4, atol=1e-5)  # losses
    assert np.mean(np.abs(vec[0] - loop[0])) < 0.5  # accuracies: float32 rounding may flip a rare prediction


def test_per_client_evaluation_weights_class_accuracies_by_the_clients_labels():
    torch.manual_seed(0)
    data = load_federated("digits", shards=1)
    model = make_model("digits")
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    mask = head_mask(model)
    dist = label_distribution(data.clients, data.y_train, 10)
    assert np.allclose(dist.sum(1), 1) and np.all((dist > 0).sum(1) == 1)
    heads = theta[mask].unsqueeze(0).repeat(len(data.clients), 1)
    x, y = torch.as_tensor(data.x_test), torch.as_tensor(data.y_test)
    acc, _ = evaluate_heads(model, theta, heads=heads, x_test=x, y_test=y, dist=dist)
    pred = model(x).argmax(-1)
    for i in (0, 50, 119):  # one class per client: its accuracy is the model's accuracy on that class
        c = int(np.argmax(dist[i]))
        assert acc[i] == pytest.approx(100 * float((pred[y == c] == c).double().mean()), abs=1e-4)


# ------------------------------------------------------------------ training runs


def test_dp2_fedsam_heads_never_leave_the_clients(plan_file, tmp_path, monkeypatch):
    seen = []
    real = personal.GroupAggregator.round

    def spy(self, rows, *args, **kwargs):
        seen.append(rows.shape[1])
        return real(self, rows, *args, **kwargs)

    monkeypatch.setattr(personal.GroupAggregator, "round", spy)
    m = run(_cfg(tmp_path / "a", method="dp2-fedsam"), plan_file)
    model = make_model("digits")
    mask = head_mask(model)
    assert set(seen) == {m["d_shared"]} == {int((~mask).sum())} and m["d_head"] == int(mask.sum())
    torch.manual_seed(0)
    init = torch.nn.utils.parameters_to_vector(make_model("digits").parameters()).detach()
    state = _ckpt(tmp_path / "a")
    assert torch.equal(state["theta"][mask], init[mask])  # the global head never moves
    assert not torch.equal(state["theta"][~mask], init[~mask])
    changed = (state["heads"] != init[mask]).any(1)
    assert 0 < int(changed.sum()) < 120  # sampled clients trained their heads; the others keep the initial one
    assert m["privacy_model"] == "client-level (ε, δ)-DP, one ε" and m["plan_method"] == "DP-FedAvg"
    assert m["epsilon_spent"] == privacy_ledger(load_plan(plan_file), _spec(plan_file), ROUNDS)
    assert m["epsilon_spent_max"] == pytest.approx(1.0, rel=1e-3)
    assert m["engine"] == "vectorized" and "engine_note" not in m and m["rho"] == 0.1 and m["head_steps"] == 5
    assert 0 <= m["final_accuracy"] <= 100 and m["client_accuracy"]["max"] >= m["final_accuracy"]
    # same seed: same result
    again = run(_cfg(tmp_path / "b", method="dp2-fedsam"), plan_file)
    assert again["history"] == m["history"]
    assert torch.equal(_ckpt(tmp_path / "b")["heads"], state["heads"])


def _spec(plan_file):
    return method_spec(load_plan(plan_file), "dp2-fedsam")


def test_dp2_fedsam_engines_agree(plan_file, tmp_path):
    vec = run(_cfg(tmp_path / "v", method="dp2-fedsam", head_steps=2, rounds=2), plan_file)
    loop = run(_cfg(tmp_path / "l", method="dp2-fedsam", head_steps=2, rounds=2, engine="loop"), plan_file)
    assert loop["engine"] == "loop" and vec["engine"] == "vectorized"
    torch.testing.assert_close(_ckpt(tmp_path / "v")["theta"], _ckpt(tmp_path / "l")["theta"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(_ckpt(tmp_path / "v")["heads"], _ckpt(tmp_path / "l")["heads"], rtol=1e-4, atol=1e-5)
    assert vec["final_accuracy"] == pytest.approx(loop["final_accuracy"], abs=0.5)


def test_centaur_is_dp2_fedsam_with_rho_zero(plan_file, tmp_path):
    cen = run(_cfg(tmp_path / "c", method="centaur", head_steps=2), plan_file)
    dp2 = run(_cfg(tmp_path / "d", method="dp2-fedsam", head_steps=2, rho=0.0), plan_file)
    assert cen["history"] == dp2["history"]
    assert torch.equal(_ckpt(tmp_path / "c")["theta"], _ckpt(tmp_path / "d")["theta"])
    sam = run(_cfg(tmp_path / "e", method="dp2-fedsam", head_steps=2, rounds=2), plan_file)
    assert not torch.equal(_ckpt(tmp_path / "e")["theta"], _ckpt(tmp_path / "d")["theta"])
    assert sam["rho"] == 0.1 and cen["rho"] is None


def test_dp_fedsam_with_rho_zero_is_dp_fedavg(plan_file, tmp_path):
    """SAM is the only difference: at ρ = 0 the loop engine's DP-FedAvg, same sampling, clipping and noise."""
    sam0 = run(_cfg(tmp_path / "s", method="dp-fedsam", rho=0.0), plan_file)
    avg = run(_cfg(tmp_path / "f", method="dp-fedavg", engine="loop"), plan_file)
    assert torch.allclose(_ckpt(tmp_path / "s")["theta"], _ckpt(tmp_path / "f")["theta"], atol=1e-6)
    assert [h["accuracy"] for h in sam0["history"]] == pytest.approx([h["accuracy"] for h in avg["history"]])
    assert "global" in sam0["evaluation"] and sam0["client_accuracy"] is None


def test_dp_fedavg_ft_trains_dp_fedavg_then_fine_tunes_locally(plan_file, tmp_path):
    ft = run(_cfg(tmp_path / "ft", method="dp-fedavg-ft", head_steps=3), plan_file)
    avg = run(_cfg(tmp_path / "avg", method="dp-fedavg"), plan_file)
    assert torch.equal(_ckpt(tmp_path / "ft")["theta"], _ckpt(tmp_path / "avg")["theta"])
    assert [h["global_accuracy"] for h in ft["history"]] == [h["accuracy"] for h in avg["history"]]
    assert ft["final_accuracy"] > ft["history"][-1]["global_accuracy"]  # 2 classes per client: fine-tuning helps
    assert ft["engine"] == "vectorized" and "fine-tuned 3 SGD steps" in ft["evaluation"]


def test_resume_equals_uninterrupted_dp2_fedsam(plan_file, tmp_path):
    full = run(_cfg(tmp_path / "full", method="dp2-fedsam", head_steps=1, eval_every=1), plan_file)
    run(_cfg(tmp_path / "part", method="dp2-fedsam", head_steps=1, eval_every=1, rounds=2), plan_file)
    resumed = run(_cfg(tmp_path / "part", method="dp2-fedsam", head_steps=1, eval_every=1, resume=True), plan_file)
    assert resumed["history"] == full["history"]
    with pytest.raises(TrainError, match="different rho"):
        run(_cfg(tmp_path / "part", method="dp2-fedsam", head_steps=1, rho=0.5, resume=True), plan_file)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"method": "gdpfed", "rho": 0.1}, "--rho"),
        ({"method": "centaur", "rho": 0.1}, "--rho"),
        ({"method": "dp-fedsam", "head_steps": 2}, "--head-steps"),
        ({"method": "dp2-fedsam", "head_steps": -1}, "--head-steps must be"),
        ({"method": "dp2-fedsam", "rho": -0.1}, "--rho must be"),
    ],
)
def test_bad_options_are_refused(plan_file, tmp_path, kw, message):
    with pytest.raises(TrainError, match=message):
        run(_cfg(tmp_path / "x", **kw), plan_file)
    assert not (tmp_path / "x").exists()


def test_cli_trains_dp2_fedsam_and_refuses_bad_input(plan_file, tmp_path):
    runner = CliRunner()
    args = ["train", str(plan_file), "--dataset", "digits", "--shards", "2", "--rounds", "2"]
    result = runner.invoke(app, [*args, "--method", "dp2-fedsam", "--rho", "0.05", "--head-steps", "1"])
    assert result.exit_code == 0, result.output
    assert "dp2-fedsam on digits" in result.output and "ε spent" in result.output
    result = runner.invoke(app, [*args, "--method", "dp2-fedsam", "--dirichlet", "0.5"])
    assert result.exit_code == 2 and "--shards and --dirichlet" in result.output
    doc = json.loads(plan_file.read_text())
    doc["config"]["rounds"] = 40  # same σ for 10× the rounds: ε overspent, verify rejects the plan
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    result = runner.invoke(app, ["train", str(bad), "--dataset", "digits", "--shards", "2", "--method", "centaur"])
    assert result.exit_code == 2 and "verification" in result.output


def test_a_secure_personal_run_writes_no_heads_and_no_per_client_statistics(plan_file, tmp_path):
    """Personal heads carry no noise: a secure run keeps them in memory only (no checkpoint), releases no per-client
    statistics, and cannot be resumed."""
    out = tmp_path / "secure"
    metrics = run(_cfg(out, method="dp2-fedsam", rounds=2, noise="secure"), plan_file)
    assert not (out / CHECKPOINT).exists() and metrics["client_accuracy"] is None
    assert json.loads((out / "metrics.json").read_text())["client_accuracy"] is None
    with pytest.raises(TrainError, match="cannot be resumed"):
        run(_cfg(out, method="dp2-fedsam", rounds=3, noise="secure", resume=True), plan_file)
    seeded = run(_cfg(tmp_path / "seeded", method="dp2-fedsam", rounds=2), plan_file)
    assert seeded["client_accuracy"] is not None and (tmp_path / "seeded" / CHECKPOINT).exists()


def test_a_secure_personal_run_charges_the_ledger(plan_file, tmp_path):
    """The DP²-FedSAM family charges the privacy ledger like every client-level run (it once skipped it)."""
    from hdp_planner.ledger.store import Ledger

    ledger = tmp_path / "ledger.sqlite"
    run(configure(TrainConfig, method="dp2-fedsam", dataset="digits", out=str(tmp_path / "r"),
                    progress=False, ledger=str(ledger), rounds=2), str(plan_file))  # fmt: skip
    spent = Ledger(str(ledger)).spending("simulation")
    assert spent and {s.released_rounds for s in spent} == {2}
