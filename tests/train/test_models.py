"""Models and engines: --model (the paper-scale CNN, d from the chosen model), the CNN's and the LSTM's
client-batched engines against the per-client loop, worker threads, and mixed precision."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.methods.baselines import BaselineOptions, add_baselines  # noqa: E402
from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.learning.engines import (  # noqa: E402
    LocalTraining,
    client_grads,
    default_chunk,
    loop_deltas,
    vectorized_deltas,
    vectorized_train,
)
from hdp_planner_train.learning.models import (  # noqa: E402
    CNN2,
    DEFAULT_MODEL,
    MODELS,
    CharLSTM,
    CNN2Paper,
    DigitsMLP,
    make_model,
    model_dim,
    model_name,
)
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, pfa_dim_mismatch  # noqa: E402

runner = CliRunner()


def _flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


# ------------------------------------------------------------------ --model


def test_paper_cnn_is_mcmahan_2017_and_the_default_stays():
    """McMahan et al. 2017's CNN: 5×5 convs (32, 64) each with 2×2 max-pooling, fc 512, fc 10."""
    model = make_model("fmnist", model="cnn2-paper")
    expected = (25 * 32 + 32) + (25 * 32 * 64 + 64) + (7 * 7 * 64 * 512 + 512) + (512 * 10 + 10)
    assert model_dim("fmnist", model="cnn2-paper") == expected == 1_663_370
    assert model(torch.randn(3, 1, 28, 28)).shape == (3, 10)
    assert [m.kernel_size for m in (model.conv1, model.conv2)] == [(5, 5), (5, 5)]
    assert model_dim("fmnist") == 26_010 and model_name("fmnist") == "cnn"  # today's CNN stays the default
    for dataset, name in DEFAULT_MODEL.items():
        assert dataset in MODELS[name][1]


def test_model_name_refuses_unknown_and_misfit_models():
    with pytest.raises(ValueError, match="--model must be one of"):
        model_name("fmnist", "vgg")
    with pytest.raises(ValueError, match="for digits choose mlp"):
        model_name("digits", "cnn2-paper")


def test_paper_cnn_vectorized_equals_loop():
    torch.manual_seed(0)
    model = make_model("fmnist", model="cnn2-paper")
    theta = _flat(model)
    xs, ys = torch.randn(2, 2, 2, 1, 28, 28), torch.randint(0, 10, (2, 2, 2))
    a = loop_deltas(model, theta, xs, ys, lr=0.1, momentum=0.0)
    b = vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=0.0)
    assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())


def test_pfa_mismatch_names_the_model_flag():
    cfg = configure(TrainConfig, dataset="fmnist")
    msg = pfa_dim_mismatch(cfg, 1_663_370, 26_010, 10)
    assert "--model cnn2-paper" in msg and "d = 26010" in msg
    assert "--model-dim 26010" in pfa_dim_mismatch(cfg, 999, 26_010, 10)


def _write_fmnist(folder, n_train=40, n_test=10, seed=0):
    """Four tiny IDX files in Fashion-MNIST's format (gzip), random pixels and labels."""
    rng = np.random.default_rng(seed)
    folder.mkdir()
    for stem, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n, dtype=np.uint8)
        head = bytes([0, 0, 8, 3]) + np.array([n, 28, 28], ">u4").tobytes()
        (folder / f"{stem}-images-idx3-ubyte.gz").write_bytes(gzip.compress(head + images.tobytes()))
        head = bytes([0, 0, 8, 1]) + np.array([n], ">u4").tobytes()
        (folder / f"{stem}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(head + labels.tobytes()))


def test_cli_train_with_the_paper_cnn_records_model_and_d(tmp_path):
    data = tmp_path / "fmnist"
    _write_fmnist(data)
    base = plan([0.5, 1.5, 3.0], n=6, rounds=2, q=0.5, clip=1.5, local_steps=1)
    pfa = add_baselines(base, ["PFA"], BaselineOptions(model_dim=1_663_370, pfa_dim=1, pfa_window=2))
    path = tmp_path / "plan.json"
    save_plan(pfa, path)
    common = ["train", str(path), "--dataset", "fmnist", "--data-dir", str(data), "--clients", "6", "--rounds", "1"]
    refused = runner.invoke(app, [*common, "--method", "pfa", "--out", str(tmp_path / "r")])
    assert refused.exit_code == 2 and "--model cnn2-paper" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "r" / "metrics.json").exists()
    bad = runner.invoke(app, [*common, "--model", "lstm", "--out", str(tmp_path / "b")])
    assert bad.exit_code == 2 and "for fmnist choose" in bad.output
    out = tmp_path / "o"
    done = runner.invoke(app, [*common, "--method", "dp-fedavg", "--model", "cnn2-paper", "--out", str(out)])
    assert done.exit_code == 0, done.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["model"] == "cnn2-paper" and metrics["d"] == 1_663_370


def test_cli_compare_refuses_a_model_of_another_dataset(tmp_path):
    out = tmp_path / "grid"
    result = runner.invoke(app, ["compare", "--dataset", "digits", "--model", "cnn", "--out", str(out)])
    assert result.exit_code == 2 and "for digits choose mlp" in result.output
    assert not (out / "plan.json").exists()


# ------------------------------------------------------------------ the LSTM's batched engine


def test_lstm_forward_batched_equals_forward_per_client():
    torch.manual_seed(1)
    model = CharLSTM(vocab=12, embed=3, hidden=5).double()
    clients = [CharLSTM(vocab=12, embed=3, hidden=5).double() for _ in range(3)]
    params = {n: torch.stack([dict(c.named_parameters())[n] for c in clients]) for n, _ in model.named_parameters()}
    x = torch.randint(0, 12, (3, 4, 7))
    out = model.forward_batched(params, x)
    for k, c in enumerate(clients):
        torch.testing.assert_close(out[k], c(x[k]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("momentum, chunk", [(0.9, 2), (0.0, None)])
def test_lstm_vectorized_engine_equals_the_loop(momentum, chunk):
    """Shakespeare's setting in miniature (momentum 0.9, several steps, clients in chunks), in float64."""
    torch.manual_seed(2)
    model = CharLSTM(vocab=16, embed=4, hidden=6).double()
    theta = _flat(model)
    xs, ys = torch.randint(0, 16, (5, 3, 4, 9)), torch.randint(0, 16, (5, 3, 4))
    a = loop_deltas(model, theta, xs, ys, lr=0.5, momentum=momentum)
    b = vectorized_deltas(model, theta, xs, ys, lr=0.5, momentum=momentum, chunk=chunk)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert float(a.abs().min(dim=1).values.max()) > 0  # the clients really moved


def test_lstm_batched_gradients_equal_vmap():
    torch.manual_seed(3)
    model = CharLSTM(vocab=10, embed=3, hidden=4).double()
    params = {n: p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in model.named_parameters()}
    params = {n: p + 0.01 * torch.randn_like(p) for n, p in params.items()}  # two different clients
    x, y = torch.randint(0, 10, (2, 3, 5)), torch.randint(0, 10, (2, 3))
    batched = client_grads(model)(params, x, y)

    class Plain(CharLSTM):  # the same model without forward_batched: torch.func's vmap(grad(·))
        forward_batched = None

    ref = _vmap_grads(Plain(vocab=10, embed=3, hidden=4).double(), params, x, y)
    for n in params:
        torch.testing.assert_close(batched[n], ref[n], rtol=1e-10, atol=1e-12)


def _vmap_grads(model, params, x, y):
    from torch.func import functional_call, grad, vmap
    from torch.nn import functional as F

    def loss_fn(p, xb, yb):
        return F.cross_entropy(functional_call(model, p, (xb,)), yb)

    return vmap(grad(loss_fn))(params, x, y)


def test_cnn_forward_batched_equals_forward_and_vmap():
    """The small CNN's client-batched forward (grouped convolutions, channels-last) against each client's own
    forward, and its gradients against torch.func's vmap, in float64."""
    torch.manual_seed(4)
    model = CNN2().double()
    clients = [CNN2().double() for _ in range(3)]
    params = {n: torch.stack([dict(c.named_parameters())[n] for c in clients]) for n, _ in model.named_parameters()}
    x, y = torch.randn(3, 4, 1, 28, 28, dtype=torch.float64), torch.randint(0, 10, (3, 4))
    out = model.forward_batched(params, x)
    for k, c in enumerate(clients):
        torch.testing.assert_close(out[k], c(x[k]), rtol=1e-12, atol=1e-12)

    class Plain(CNN2):
        forward_batched = None

    batched = client_grads(model)(params, x, y)
    ref = _vmap_grads(Plain().double(), {n: p.detach() for n, p in params.items()}, x, y)
    for n in params:
        torch.testing.assert_close(batched[n], ref[n], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("momentum, chunk", [(0.9, 2), (0.0, None)])
def test_cnn_vectorized_engine_equals_the_loop(momentum, chunk):
    torch.manual_seed(5)
    model = CNN2().double()
    theta = _flat(model)
    xs, ys = torch.randn(5, 3, 4, 1, 28, 28, dtype=torch.float64), torch.randint(0, 10, (5, 3, 4))
    a = loop_deltas(model, theta, xs, ys, lr=0.5, momentum=momentum)
    b = vectorized_deltas(model, theta, xs, ys, lr=0.5, momentum=momentum, chunk=chunk)
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert float(a.abs().max()) > 0


@pytest.mark.parametrize("model_cls", [CNN2, CharLSTM, DigitsMLP, CNN2Paper])
def test_worker_threads_give_the_same_updates(model_cls):
    """On CPU every model trains pieces of the clients in worker threads (one intra-op thread each; a model without
    its own batched forward, whose gradients go through functional_call, one copy of it per thread); the result is
    the sequential one's and the process's thread count comes back."""
    torch.manual_seed(8)
    ys = torch.randint(0, 10, (7, 2, 3))
    if model_cls is CharLSTM:
        model, xs = CharLSTM(16, 4, 6).double(), torch.randint(0, 16, (7, 2, 3, 5))
    else:
        side = 8 if model_cls is DigitsMLP else 28
        model, xs = model_cls().double(), torch.randn(7, 2, 3, 1, side, side, dtype=torch.float64)
    starts = _flat(model).unsqueeze(0).repeat(7, 1) + 0.01 * torch.randn(7, _flat(model).numel(), dtype=torch.float64)
    threads = torch.get_num_threads()
    training = LocalTraining(steps=2, batch=3, lr=0.3, momentum=0.9, rho=0.05)
    one = vectorized_train(model, starts, xs, ys, training, workers=1)
    three = vectorized_train(model, starts, xs, ys, training, workers=3)
    torch.testing.assert_close(three, one, rtol=1e-12, atol=1e-13)
    assert torch.get_num_threads() == threads


def test_lstm_chunks_stay_cache_sized_on_cpu():
    lstm, cnn = make_model("shakespeare", 96), make_model("fmnist")
    assert default_chunk(lstm, model_dim("shakespeare", 96), torch.device("cpu")) == 4
    assert default_chunk(cnn, 26_010, torch.device("cpu")) >= 120  # a whole FMNIST round at once


# ------------------------------------------------------------------ mixed precision


@pytest.mark.parametrize("dataset, engine", [("digits", "vectorized"), ("fmnist", "vectorized"), ("fmnist", "loop")])
def test_bf16_keeps_the_update_float32_and_close_to_fp32(dataset, engine):
    """bf16 autocasts the local forward only: Δ is float32, near fp32's Δ, and not equal to it (bf16 really ran)."""
    torch.manual_seed(6)
    model = make_model(dataset)
    theta = _flat(model)
    shape = (1, 8, 8) if dataset == "digits" else (1, 28, 28)
    xs, ys = torch.randn(3, 2, 5, *shape), torch.randint(0, 10, (3, 2, 5))
    fn = vectorized_deltas if engine == "vectorized" else loop_deltas
    fp32 = fn(model, theta, xs, ys, lr=0.1, momentum=0.9)
    bf16 = fn(model, theta, xs, ys, lr=0.1, momentum=0.9, precision="bf16")
    assert bf16.dtype == fp32.dtype == torch.float32
    rel = float((bf16 - fp32).norm() / fp32.norm())
    assert 0 < rel < 0.1
    other_engine = loop_deltas if engine == "vectorized" else vectorized_deltas
    other = other_engine(model, theta, xs, ys, lr=0.1, momentum=0.9, precision="bf16")
    assert float((other - bf16).norm() / fp32.norm()) < 0.02  # the two engines agree in bf16 too


def test_lstm_bf16_update_is_float32():
    torch.manual_seed(7)
    model = CharLSTM(vocab=16, embed=4, hidden=6)
    theta = _flat(model)
    xs, ys = torch.randint(0, 16, (2, 2, 3, 9)), torch.randint(0, 16, (2, 2, 3))
    out = vectorized_deltas(model, theta, xs, ys, lr=0.5, momentum=0.9, precision="bf16")
    assert out.dtype == torch.float32 and float(out.abs().max()) > 0
    with pytest.raises(ValueError, match="precision must be one of fp32, bf16"):
        vectorized_deltas(model, theta, xs, ys, lr=0.5, momentum=0.9, precision="fp16")


def test_train_bf16_records_precision_and_aggregates_float32(tmp_path, monkeypatch):
    """A bf16 run: clipping, noise and aggregation see float32 updates; metrics.json says bf16; the accuracy is
    fp32's within a few points; a bad --precision is one line on stderr, exit 2, nothing written."""
    import hdp_planner_train.simulator.trainer as trainer_mod

    base = plan([0.5, 1.5, 3.0], n=120, rounds=3, q=0.1, clip=1.5)
    path = tmp_path / "plan.json"
    save_plan(base, path)
    seen = []
    real = trainer_mod.GroupAggregator.round

    def spy(self, deltas, *args, **kwargs):
        seen.append(deltas.dtype)
        return real(self, deltas, *args, **kwargs)

    monkeypatch.setattr(trainer_mod.GroupAggregator, "round", spy)
    common = dict(dataset="digits", eval_every=3, progress=False, noise="seeded")
    runs = {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / precision
        runs[precision] = trainer_mod.run(configure(TrainConfig, **common, out=str(out), precision=precision), path)
        assert json.loads((out / "metrics.json").read_text())["precision"] == precision
    assert seen and set(seen) == {torch.float32}
    assert abs(runs["bf16"]["final_accuracy"] - runs["fp32"]["final_accuracy"]) < 5.0
    bad = runner.invoke(app, ["train", str(path), "--dataset", "digits", "--precision", "fp8", "--out",
                              str(tmp_path / "bad")])  # fmt: skip
    assert bad.exit_code == 2 and "--precision must be one of fp32, bf16" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "bad").exists()
