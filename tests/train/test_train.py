"""The optional PyTorch trainer (hdp_planner_train): DP aggregation rules, engines, CLI, metrics, resume."""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.accounting.schedule import schedule_epsilon  # noqa: E402
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines  # noqa: E402
from hdp_planner.planning.method_noise import Projection  # noqa: E402
from hdp_planner.planning.trust import TrustedServer  # noqa: E402
from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.learning.engines import loop_deltas, vectorized_deltas  # noqa: E402
from hdp_planner_train.learning.federated import load_federated  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.learning.partitions import dirichlet_partition  # noqa: E402
from hdp_planner_train.rules.aggregate import aggregate  # noqa: E402
from hdp_planner_train.rules.clipping import clip_rows  # noqa: E402
from hdp_planner_train.rules.noise_sources import SeededNoise, group_noise  # noqa: E402
from hdp_planner_train.rules.release import principal_subspace, top_k_mask  # noqa: E402
from hdp_planner_train.rules.sampling import sample_round  # noqa: E402
from hdp_planner_train.rules.specs import METHOD_NAMES, GroupSpec, method_spec, paper_weighted  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator.checkpoint import load as load_checkpoint  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, run  # noqa: E402

N_DIGITS = 120  # the digits partition's default client count


@pytest.fixture(scope="module")
def digits_plan():
    """The planner's four methods and every baseline (PFA at the digits model's d, k = 2 of 3 public sums)."""
    base = plan([0.5, 1.5, 3.0], n=N_DIGITS, rounds=10, q=0.1, clip=1.5, sparsity=(0.7, 0.8, 0.9))
    d = sum(p.numel() for p in make_model("digits").parameters())
    options = BaselineOptions(model_dim=d, pfa_dim=2, pfa_window=3)
    return add_baselines(base, tuple(BASELINES.values()), options)


@pytest.fixture(scope="module")
def plan_file(digits_plan, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(digits_plan, path)
    return path


def _flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


# ------------------------------------------------------------------ aggregation rules


@pytest.mark.parametrize("joined", [0, 1, 5])
def test_group_noise_has_variance_c2_sigma2_whatever_joined(joined):
    clip, sigma, d = 1.5, 0.8, 400_000
    noise = group_noise(d, joined=joined, clip=clip, noise_multiplier=sigma, source=SeededNoise(joined, 0),
                        device="cpu", dtype=torch.float64)  # fmt: skip
    assert float(noise.var()) == pytest.approx(clip**2 * sigma**2, rel=0.02)
    assert abs(float(noise.mean())) < 0.01


def test_aggregate_zero_updates_carries_exactly_the_group_noise():
    spec = GroupSpec(method="gdpfed", sizes=(10, 10), q=(0.5, 0.5), noise_multiplier=(1.0, 2.0), k_ratio=(1.0, 1.0),
                     weight=(1.0, 1.0), clip=0.5)  # fmt: skip
    d = 200_000
    for rows in ([], [0], [0, 0, 0, 1]):  # nobody / one client of group 0 / three of group 0 and one of group 1
        deltas = torch.zeros((len(rows), d), dtype=torch.float64)
        update, stats = aggregate(deltas, rows, spec, SeededNoise(1, 0))
        assert float(update.var()) == pytest.approx(0.25 * (1.0 + 4.0), rel=0.03)
        assert stats.joined == [rows.count(0), rows.count(1)]


def test_clipping_scales_only_long_updates():
    rows = torch.tensor([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    clipped, count = clip_rows(rows, 1.0)
    norms = torch.linalg.vector_norm(clipped, dim=1)
    assert torch.allclose(norms, torch.tensor([1.0, 0.5, 0.0]))
    assert torch.allclose(clipped[0], torch.tensor([0.6, 0.8]))
    assert count == 1


def test_top_k_keeps_the_k_largest_magnitudes():
    y = torch.tensor([0.1, -5.0, 2.0, -0.2, 3.0, 0.0, -1.0, 0.5, 4.0, -0.3])
    mask = top_k_mask(y, 0.3)
    assert mask.sum() == 3
    assert set(torch.nonzero(mask).flatten().tolist()) == {1, 4, 8}
    assert top_k_mask(y, 1.0) is None


def test_p_fedavg_is_unclipped_unnoised_average(digits_plan):
    spec = method_spec(digits_plan, "p-fedavg")
    assert not spec.private and spec.weight == digits_plan.method("DP-FedAvg").weight
    deltas = torch.randn(4, 50) * 10
    update, stats = aggregate(deltas, [0, 0, 0, 0], spec, None)
    assert torch.allclose(update, spec.weight[0] * deltas.sum(0))
    assert stats.lambda_measured == 0.0


@pytest.mark.parametrize("method", [m for m in METHOD_NAMES if m != "p-fedavg"])
def test_measured_lambda_matches_plan(digits_plan, method):
    """Λ measured on the aggregation (big d, Poisson sampling, real client updates) vs the plan's lambda_exact,
    over the plan's T rounds (a time-adaptive schedule's Λ is the mean over its rounds)."""
    spec = method_spec(digits_plan, method)
    if spec.projection is not None:  # PFA's k/d is planned for the model's d; measure at d = 50,000 instead
        spec = dataclasses.replace(spec, projection=dataclasses.replace(spec.projection, model_dim=50_000))
        spec = dataclasses.replace(spec, k_ratio=(2 / 50_000, 1.0, 1.0))
    d, rounds = 50_000, digits_plan.config.rounds
    measured, applied, history = [], [], []
    for r in range(rounds):
        sampled = sample_round(spec, seed=3, rnd=r)
        groups = np.concatenate([np.full(len(s), m) for m, s in enumerate(sampled)]).astype(int)
        deltas = torch.randn(len(groups), d, generator=torch.Generator().manual_seed(r)) * 0.01
        _, stats = aggregate(deltas, groups, spec, SeededNoise(100 + r, 0), rnd=r, public_history=history)
        measured.append(stats.lambda_measured)
        applied.append(stats.lambda_applied)
    m = digits_plan.method(METHOD_NAMES[method])
    planned = m.lambda_exact
    if spec.projection is not None:
        w, s = m.weight, m.sigma2
        planned -= w[0] ** 2 * 1.5**2 * s[0] * (m.k_ratio[0] - 2 / 50_000)
    assert np.mean(measured) == pytest.approx(planned, rel=0.03)
    if method == "gdpfed+":  # Top-k on the noisy sum keeps the larger noise coordinates: biased up
        assert np.mean(applied) > 1.1 * np.mean(measured)
    else:  # PFA's subspace is independent of the projected noise: it keeps k/d of it, as planned
        assert np.mean(applied) == pytest.approx(planned, rel=0.05)


def test_paper_weights_take_gdpfeds_smaller_step_and_keep_the_noise_draws(digits_plan):
    """--weights paper (GDPFed B.2's ω_m = (1/qn)·r_m²/Σr²): for GDPFed's equal groups the update is the plan's
    scaled by 1/M (the same sampling, clipping and noise draws); for one group (DP-FedAvg) it is the plan's."""
    spec = method_spec(digits_plan, "gdpfed")
    paper = paper_weighted(spec, q=digits_plan.config.q, n=digits_plan.config.n)
    assert sum(w * q * s for w, q, s in zip(paper.weight, paper.q, paper.sizes)) == pytest.approx(1 / 3)
    deltas, groups = torch.randn(9, 40) * 0.01, [0, 0, 0, 1, 1, 1, 2, 2, 2]
    ours, _ = aggregate(deltas, groups, spec, SeededNoise(1, 0))
    theirs, _ = aggregate(deltas, groups, paper, SeededNoise(1, 0))
    torch.testing.assert_close(theirs, ours / 3)
    one = method_spec(digits_plan, "dp-fedavg")
    assert paper_weighted(one, q=digits_plan.config.q, n=digits_plan.config.n).weight == pytest.approx(one.weight)
    with pytest.raises(ValueError, match="one noise to the pool"):
        paper_weighted(method_spec(digits_plan, "idp-fedavg-sample"), q=0.1, n=N_DIGITS)


def test_cli_trains_with_paper_weights_and_refuses_them_where_they_do_not_apply(plan_file, digits_plan, tmp_path):
    out = tmp_path / "paper"
    args = ["train", str(plan_file), "--dataset", "digits", "--rounds", "2", "--seeded-noise"]
    done = runner.invoke(app, [*args, "--method", "gdpfed", "--weights", "paper", "--out", str(out)])
    assert done.exit_code == 0, done.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["weights"] == "paper" and metrics["noise_lambda_planned"] == pytest.approx(
        digits_plan.method("GDPFed").lambda_exact / 9
    )
    for method, weights, says in (("hdp-pooled", "paper", "pool"), ("gdpfed", "uniform", "plan or paper"),
                                  ("dp-fedsam", "paper", "plan-noised")):  # fmt: skip
        bad = tmp_path / f"{method}-{weights}"
        _refused(runner.invoke(app, [*args, "--method", method, "--weights", weights, "--out", str(bad)]), bad, says)


def test_pooled_aggregation_draws_one_noise_and_clips_per_group(digits_plan):
    """IDP-FedAvg: every group's clipped updates in one sum with one draw of std C_mσ_m, averaged over Σr."""
    spec = method_spec(digits_plan, "idp-fedavg-scale")
    assert spec.pooled and len(set(spec.clips)) == 3
    std = spec.clips[0] * spec.noise_multiplier[0]
    d = 200_000
    for rows in ([], [0], [0, 1, 1, 2, 2]):
        update, stats = aggregate(torch.zeros((len(rows), d)), rows, spec, SeededNoise(2, 0))
        assert float(update.var()) == pytest.approx(spec.weight[0] ** 2 * std**2, rel=0.03)
        assert stats.lambda_measured == pytest.approx(spec.weight[0] ** 2 * std**2, rel=0.03)
    tiny = dataclasses.replace(spec, noise_multiplier=(1e-9,) * 3)  # look at the clipped sum itself
    big = torch.zeros((3, 4))
    big[:, 0] = 10.0
    update, stats = aggregate(big, [0, 1, 2], tiny, SeededNoise(3, 0))
    assert float(update[0]) == pytest.approx(spec.weight[0] * sum(spec.clips), rel=1e-6) and stats.clipped == 3


def test_pfa_projection_lies_in_the_public_span(digits_plan):
    """PFA: what the projected group adds lies in the top-k subspace of the public group's latest noisy sums."""
    spec = method_spec(digits_plan, "pfa")
    pr = spec.projection
    two = GroupSpec(
        method="pfa", sizes=(40, 40), q=(0.5, 0.5), noise_multiplier=(1e-9, 2.0), k_ratio=(1.0, 0.5),
        weight=(0.1, 0.3), clip=1.0,
        projection=Projection(public=0, projected=1, dim=2, window=3, subspace=pr.subspace, model_dim=1000),
    )  # fmt: skip
    d, history, gen = 1000, [], torch.Generator().manual_seed(0)
    for r in range(5):
        deltas = torch.randn(6, d, generator=gen, dtype=torch.float64) * 0.1
        update, _ = aggregate(deltas, [0, 0, 0, 1, 1, 1], two, SeededNoise(r, 0), rnd=r, public_history=history)
        assert len(history) == min(r + 1, 3)
        rest = update - 0.1 * history[-1]  # the projected group's part: ω_1·V Vᵀ y_1
        u, _, _ = torch.linalg.svd(torch.stack(history, dim=1), full_matrices=False)
        top = u[:, : min(2, len(history))]
        assert torch.linalg.vector_norm(rest - top @ (top.T @ rest)) < 1e-8 * torch.linalg.vector_norm(rest)
        assert torch.linalg.vector_norm(rest) > 0


@pytest.mark.parametrize("method", ["lanczos", "randomized"])
def test_principal_subspace_methods_find_the_top_singular_subspace(method):
    gen = torch.Generator().manual_seed(1)
    low = torch.randn(3000, 2, generator=gen, dtype=torch.float64) @ torch.tensor(
        [[30.0, 0, 0, 0, 0, 0], [0, 20.0, 0, 0, 0, 0]], dtype=torch.float64
    )
    matrix = low + torch.randn(3000, 6, generator=gen, dtype=torch.float64)
    basis = principal_subspace(matrix, 2, method, SeededNoise(2, 0))
    exact = torch.linalg.svd(matrix, full_matrices=False)[0][:, :2]
    assert basis.shape == (3000, 2)
    assert torch.allclose(basis @ basis.T, exact @ exact.T, atol=1e-8)  # the same projection


def test_time_adaptive_uses_each_phase_and_its_ledger_composes_them(digits_plan, plan_file, tmp_path):
    spec = method_spec(digits_plan, "time-adaptive")
    save, spend = spec.schedule
    assert spec.noise_at(0) == spec.noise_at(save.rounds - 1) == save.noise_multiplier
    assert spec.noise_at(save.rounds) == spec.noise_at(9) == spend.noise_multiplier
    m = run(_cfg(tmp_path / "ta", method="time-adaptive", rounds=7, eval_every=7), plan_file)
    c = digits_plan.config
    for g, entry in enumerate(m["epsilon_spent"]):  # 5 saving rounds, then 2 spending rounds
        phases = [(5, save.noise_multiplier[g]), (2, spend.noise_multiplier[g])]
        assert entry["epsilon_spent"] == pytest.approx(schedule_epsilon(phases, q=c.q, delta=c.delta), rel=1e-9)
        assert entry["epsilon_spent"] < entry["epsilon_budget"]


def test_sampling_is_poisson_per_group_and_seeded(digits_plan):
    spec = method_spec(digits_plan, "gdpfed+")
    a, b = sample_round(spec, seed=0, rnd=5), sample_round(spec, seed=0, rnd=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    for m, ids in enumerate(a):  # clients join groups in order of the group sizes
        assert np.all((ids >= spec.offsets[m]) & (ids < spec.offsets[m] + spec.sizes[m]))
    counts = np.array([[len(s) for s in sample_round(spec, seed=0, rnd=r)] for r in range(400)])
    expected = np.array(spec.q) * np.array(spec.sizes)
    assert np.allclose(counts.mean(0), expected, rtol=0.12, atol=0.2)


# ------------------------------------------------------------------ engines


@pytest.mark.parametrize("dataset,shape,momentum", [("digits", (1, 8, 8), 0.9), ("fmnist", (1, 28, 28), 0.0)])
def test_engines_agree_on_client_updates(dataset, shape, momentum):
    torch.manual_seed(0)
    model = make_model(dataset)
    theta = _flat(model)
    xs, ys = torch.randn(4, 3, 5, *shape), torch.randint(0, 10, (4, 3, 5))
    a = loop_deltas(model, theta, xs, ys, lr=0.1, momentum=momentum)
    b = vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=momentum, chunk=3)
    assert torch.allclose(a, b, atol=1e-5)
    assert torch.equal(theta, _flat(model))  # the global model is untouched
    assert float(a.abs().max()) > 0


def _cfg(out, **kw):
    base = dict(
        dataset="digits", rounds=3, eval_every=1, out=str(out), progress=False, noise="seeded"
    )  # simulations: reproducible noise and the per-round diagnostics
    base.update(kw)
    return configure(TrainConfig, **base)


def test_loop_and_vectorized_training_agree(plan_file, tmp_path):
    vec = run(_cfg(tmp_path / "vec", engine="vectorized"), plan_file)
    loop = run(_cfg(tmp_path / "loop", engine="loop"), plan_file)
    assert vec["joined_per_round_mean"] == loop["joined_per_round_mean"]
    assert vec["noise_lambda_measured"] == pytest.approx(loop["noise_lambda_measured"], rel=1e-6)
    for hv, hl in zip(vec["history"], loop["history"]):
        assert hv["loss"] == pytest.approx(hl["loss"], rel=1e-3)
        assert hv["accuracy"] == pytest.approx(hl["accuracy"], abs=1.0)


# ------------------------------------------------------------------ trainer outputs and resume


def test_metrics_files_and_privacy(plan_file, digits_plan, tmp_path):
    out = tmp_path / "run"
    m = run(_cfg(out, rounds=4, eval_every=2, plot=True), plan_file)
    doc = json.loads((out / "metrics.json").read_text())
    for key in ("method", "dataset", "final_accuracy", "history", "epsilon_spent", "noise_lambda_measured"):
        assert key in doc
    assert [h["round"] for h in doc["history"]] == [2, 4]
    assert (out / "metrics.csv").read_text().splitlines()[0] == "round,accuracy,loss"
    assert (out / "convergence.png").stat().st_size > 1000
    assert len(doc["round_seconds"]) == 4
    budgets = digits_plan.method("GDPFed+").epsilon
    spent = [e["epsilon_spent"] for e in m["epsilon_spent"]]
    assert all(0 < s < b for s, b in zip(spent, budgets))  # 4 of T = 10 rounds: part of each budget
    assert doc["noise_lambda_planned"] == pytest.approx(digits_plan.method("GDPFed+").lambda_exact)


def test_p_fedavg_reports_no_privacy(plan_file, tmp_path):
    m = run(_cfg(tmp_path / "p", method="p-fedavg", rounds=2), plan_file)
    assert m["epsilon_spent"][0]["epsilon_spent"] is None and "no noise" in m["privacy"]
    assert m["noise_lambda_measured"] == 0.0


@pytest.fixture
def one_thread():
    """Torch on one intra-op thread, hence one worker (the clients' pieces summed in one order whatever the load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("method", ["gdpfed+", "pfa"])  # PFA: the public history is checkpointed
def test_resume_equals_uninterrupted_run(plan_file, tmp_path, method, one_thread):
    """A run stopped after round 2 and resumed ends bit for bit where the uninterrupted run ends."""
    full = run(_cfg(tmp_path / "full", rounds=4, method=method), plan_file)
    run(_cfg(tmp_path / "part", rounds=2, method=method), plan_file)
    resumed = run(_cfg(tmp_path / "part", rounds=4, resume=True, method=method), plan_file)
    assert resumed["history"] == full["history"]
    assert resumed["noise_lambda_measured"] == full["noise_lambda_measured"]
    assert resumed["epsilon_spent"] == full["epsilon_spent"]  # the ledger counts 4 rounds, not 2 + 4
    a = load_checkpoint(tmp_path / "full")["theta"]
    b = load_checkpoint(tmp_path / "part")["theta"]
    assert torch.equal(a, b)


# ------------------------------------------------------------------ CLI refusals

runner = CliRunner()


def _refused(result, tmp_out: Path, needle: str) -> None:
    text = result.output.strip()
    assert result.exit_code == 2, text
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1 and text.startswith("error:"), text
    assert needle in text, text
    assert not tmp_out.exists()


def test_cli_trains_digits(plan_file, tmp_path):
    out = tmp_path / "cli"
    result = runner.invoke(app, ["train", str(plan_file), "--dataset", "digits", "--rounds", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "accuracy" in result.output and (out / "metrics.json").is_file()
    bare = runner.invoke(app, ["train", str(plan_file), "--dataset", "digits", "--rounds", "1"], terminal_width=60)
    assert bare.exit_code == 0, bare.output
    summary = json.loads(bare.output.strip().splitlines()[-1])  # without --out: one parseable JSON line
    assert summary["epsilon_spent"][0]["rounds"] == 1 and 0 <= summary["final_accuracy"] <= 100


def test_cli_refuses_plan_failing_verify(plan_file, tmp_path):
    doc = json.loads(plan_file.read_text())
    doc["config"]["rounds"] = 40  # same σ for 4× the rounds: every group overspends
    doc["noise"].pop("Time-adaptive")  # (its schedule would not even add up to 40 rounds)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "o"
    _refused(runner.invoke(app, ["train", str(bad), "--dataset", "digits", "--out", str(out)]), out, "verification")


def test_cli_refuses_unreadable_plan(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    out = tmp_path / "o"
    _refused(runner.invoke(app, ["train", str(bad), "--dataset", "digits", "--out", str(out)]), out, "JSON")


def test_cli_refuses_a_method_the_plan_lacks(tmp_path):
    bare = tmp_path / "bare.json"
    save_plan(plan([0.5, 1.5, 3.0], n=N_DIGITS, rounds=10, q=0.1), bare)
    out = tmp_path / "o"
    result = runner.invoke(app, ["train", str(bare), "--dataset", "digits", "--method", "pfa", "--out", str(out)])
    _refused(result, out, "solve --methods pfa")


def test_cli_refuses_pfa_planned_for_another_model(tmp_path):
    other = tmp_path / "other.json"
    base = plan([0.5, 1.5, 3.0], n=N_DIGITS, rounds=10, q=0.1)
    save_plan(add_baselines(base, ["PFA"], BaselineOptions(model_dim=999)), other)
    out = tmp_path / "o"
    result = runner.invoke(app, ["train", str(other), "--dataset", "digits", "--method", "pfa", "--out", str(out)])
    _refused(result, out, "--model-dim")


def test_cli_compare_trains_a_grid_and_resumes(tmp_path):
    out = tmp_path / "grid"
    args = ["compare", "--dataset", "digits", "--methods", "dp-fedavg,pfa", "--seeds", "2", "--rounds", "2"]
    result = runner.invoke(app, [*args, "--out", str(out), "--eval-every", "1"])
    assert result.exit_code == 0, result.output
    assert "mean ± std" in result.output and "pfa" in result.output and "Λ measured" in result.output
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert [s["method"] for s in summary] == ["dp-fedavg", "pfa"] and all(s["seeds"] == 2 for s in summary)
    assert summary[1]["epsilon_spent"] == pytest.approx([0.5, 1.5, 3.0], rel=1e-5)
    assert (out / "comparison.png").stat().st_size > 1000 and (out / "results.csv").is_file()
    again = runner.invoke(app, [*args, "--out", str(out), "--eval-every", "1", "--resume"])
    assert again.exit_code == 0 and again.output.count("(reused)") == 4
    # the same plan on another partition retrains (nothing reused); the DP²-FedSAM paper's methods run in the grid too
    args[4] = "dp-fedavg,pfa,dp2-fedsam"
    shards = runner.invoke(app, [*args, "--shards", "2", "--out", str(out), "--eval-every", "1", "--resume"])
    assert shards.exit_code == 0, shards.output
    assert "(reused)" not in shards.output and "dp2-fedsam" in shards.output


def test_cli_compare_refuses_unknown_method(tmp_path):
    out = tmp_path / "grid"
    result = runner.invoke(app, ["compare", "--dataset", "digits", "--methods", "gdpfed,fedprox", "--out", str(out)])
    _refused(result, out, "fedprox")


def test_cli_refuses_n_mismatch(plan_file, tmp_path):
    out = tmp_path / "o"
    result = runner.invoke(app, ["train", str(plan_file), "--dataset", "digits", "--clients", "60", "--out", str(out)])
    _refused(result, out, "n = 60")


def test_cli_refuses_rounds_beyond_plan(plan_file, tmp_path):
    out = tmp_path / "o"
    result = runner.invoke(app, ["train", str(plan_file), "--dataset", "digits", "--rounds", "11", "--out", str(out)])
    _refused(result, out, "T = 10")


def test_cli_refuses_missing_data_dir(plan_file, tmp_path):
    out = tmp_path / "o"
    for ds in ("fmnist", "cifar10", "svhn", "shakespeare"):
        args = ["train", str(plan_file), "--dataset", ds, "--data-dir", str(tmp_path / "nowhere"), "--out", str(out)]
        _refused(runner.invoke(app, args), out, "nowhere")


def test_cli_without_torch_says_how_to_install(plan_file, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    result = runner.invoke(app, ["train", str(plan_file), "--dataset", "digits"])
    assert result.exit_code == 2
    assert "pip install torch==2.13.0" in result.output and "Traceback" not in result.output


def test_planner_cli_does_not_import_torch():
    import subprocess

    code = "import sys, hdp_planner_cli.app; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ------------------------------------------------------------------ data


def test_dirichlet_partition_covers_every_sample_once():
    labels = np.repeat(np.arange(10), 50)
    parts = dirichlet_partition(labels, 40, 0.1, np.random.default_rng(0))
    allidx = np.concatenate(parts)
    assert len(parts) == 40 and all(len(p) > 0 for p in parts)
    assert np.array_equal(np.sort(allidx), np.arange(500))


def test_cifar10_and_svhn_loaders_read_torchvision_format(tmp_path):
    rng = np.random.default_rng(0)
    cdir = tmp_path / "cifar" / "cifar-10-batches-py"
    cdir.mkdir(parents=True)
    for name, count in (("data_batch_1", 40), ("test_batch", 10)):
        batch = {
            b"data": rng.integers(0, 256, (count, 3072), dtype=np.uint8),
            b"labels": list(range(10)) * (count // 10),
        }
        (cdir / name).write_bytes(pickle.dumps(batch))
    c = load_federated("cifar10", str(tmp_path / "cifar"), clients=8)
    assert c.x_train.shape == (40, 3, 32, 32) and c.n_clients == 8 and c.x_test.shape[0] == 10
    patho = load_federated("cifar10", str(tmp_path / "cifar"), clients=8, shards=2)  # the DP²-FedSAM paper's partition
    assert patho.n_clients == 8 and all(len(np.unique(patho.y_train[ids])) <= 2 for ids in patho.clients)

    from scipy.io import savemat

    sdir = tmp_path / "svhn"
    sdir.mkdir()
    for name, count in (("train_32x32.mat", 30), ("test_32x32.mat", 10)):
        savemat(
            sdir / name, {"X": rng.integers(0, 256, (32, 32, 3, count), dtype=np.uint8), "y": np.arange(count) % 10 + 1}
        )
    s = load_federated("svhn", str(sdir), clients=6)
    assert s.x_train.shape == (30, 3, 32, 32) and set(s.y_train.tolist()) <= set(range(10))

    model = make_model("svhn")  # one vectorized local step of the 3-layer CNN on the generated data
    theta = _flat(model)
    xs = torch.as_tensor(s.x_train[:8]).reshape(2, 1, 4, 3, 32, 32)
    ys = torch.as_tensor(s.y_train[:8]).reshape(2, 1, 4)
    assert vectorized_deltas(model, theta, xs, ys, lr=0.1, momentum=0.0).shape == (2, theta.numel())


def test_resnet18_groupnorm_and_lstm_are_vmap_compatible():
    for dataset, x, y in (
        ("cifar10", torch.randn(2, 1, 2, 3, 8, 8), torch.randint(0, 10, (2, 1, 2))),
        ("shakespeare", torch.randint(0, 96, (2, 1, 2, 12)), torch.randint(0, 96, (2, 1, 2))),
    ):
        model = make_model(dataset, 96 if dataset == "shakespeare" else 10)
        theta = _flat(model)
        a = vectorized_deltas(model, theta, x, y, lr=0.1, momentum=0.5)
        b = loop_deltas(model, theta, x, y, lr=0.1, momentum=0.5)
        assert float((a - b).abs().max()) < 1e-3 * float(a.abs().max()), dataset


def test_a_diverged_run_is_still_recorded(tmp_path):
    """A loss that became NaN is written as null with "diverged": true (metrics.json refuses NaN itself)."""
    import json

    from hdp_planner_train.run.output import write_metrics

    metrics = {"final_loss": float("nan"), "history": [{"round": 1, "accuracy": 10.0, "loss": float("nan")}],
               "epsilon_spent": [{"epsilon_spent": 0.5}], "noise": [float("inf"), 1.0]}  # fmt: skip
    write_metrics(metrics, tmp_path, plot=False)
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert doc["diverged"] is True and doc["final_loss"] is None and doc["history"][0]["loss"] is None
    assert doc["noise"] == [None, 1.0] and doc["epsilon_spent"] == [{"epsilon_spent": 0.5}]
    assert (tmp_path / "metrics.csv").read_text().splitlines()[1] == "1,10.0000,nan"


# ------------------------------------------------------------------ the Python API


def test_train_from_python_returns_a_typed_result_equal_to_the_command_line(plan_file, tmp_path):
    from hdp_planner_train import TrainResult, train

    result = train(plan_file, method="gdpfed+", dataset="digits", rounds=2, noise="seeded", seed=3)
    assert isinstance(result, TrainResult) and result.method == "gdpfed+" and result.rounds == 2
    assert [h.round for h in result.history] == [1, 2] and result.final_accuracy == result.history[-1].accuracy
    assert [g.group for g in result.epsilon_spent] == [1, 2, 3]
    assert all(0 < g.epsilon_spent <= g.epsilon_budget for g in result.epsilon_spent)
    assert len(repr(result)) < 1200 and "metrics" not in repr(result)  # the full record stays out of the repr
    out = tmp_path / "cli"
    args = ["train", str(plan_file), "--method", "gdpfed+", "--dataset", "digits", "--rounds", "2", "--seeded-noise"]
    res = CliRunner().invoke(app, [*args, "--seed", "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "metrics.json").read_text())["final_accuracy"] == result.final_accuracy
    unnoised = train(plan_file, method="p-fedavg", dataset="digits", rounds=1, noise="seeded")
    assert all(g.epsilon_spent == float("inf") for g in unnoised.epsilon_spent)


def test_a_run_reads_its_plan_file_once(plan_file, tmp_path, monkeypatch):
    """The plan is read, verified and bound once (a RunPlan): the checkpoint's identity, the ledger's clients and the
    trust model come from that read, never from the file again."""
    from pathlib import Path

    from hdp_planner_train import train

    reads = []
    for name in ("read_bytes", "read_text"):
        real = getattr(Path, name)

        def counting(self, *args, real=real, name=name, **kwargs):
            if self.resolve() == Path(plan_file).resolve():
                reads.append(name)
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, name, counting)
    train(plan_file, method="gdpfed+", dataset="digits", rounds=1, noise="seeded", out=str(tmp_path / "run"),
          ledger=str(tmp_path / "l.sqlite"))  # fmt: skip
    assert reads == ["read_bytes"]


def test_train_takes_a_plan_object_or_a_bound_plan(digits_plan, plan_file):
    from hdp_planner_train import train
    from hdp_planner_train.run.plan import IN_MEMORY, RunPlan

    from_file = train(plan_file, method="gdpfed+", dataset="digits", rounds=1, noise="seeded", seed=3)
    from_plan = train(digits_plan, method="gdpfed+", dataset="digits", rounds=1, noise="seeded", seed=3)
    bound = RunPlan.read(plan_file)
    from_bound = train(bound, method="gdpfed+", dataset="digits", rounds=1, noise="seeded", seed=3)
    assert from_plan.history == from_file.history == from_bound.history
    assert from_plan.epsilon_spent == from_file.epsilon_spent
    assert RunPlan.of(digits_plan).source == IN_MEMORY and RunPlan.of(digits_plan).trust == TrustedServer()


def test_train_refuses_an_unknown_option(plan_file):
    from hdp_planner_train import train
    from hdp_planner_train.run.errors import TrainError

    with pytest.raises(TrainError, match=r"unknown training option.*roundz"):
        train(plan_file, method="gdpfed+", dataset="digits", roundz=2)


def test_a_family_option_goes_into_its_family_dataclass():
    """``rho=…`` by name and ``personal=PersonalOptions(…)`` whole give one config; the repr names what was set."""
    from hdp_planner_train.api import train_config
    from hdp_planner_train.simulator.options import PersonalOptions, SelectionOptions

    by_name = train_config(method="dp2-fedsam", dataset="digits", rho=0.05, rounds=2)
    whole = train_config(method="dp2-fedsam", dataset="digits", rounds=2,
                         personal=PersonalOptions(rho=0.05))  # fmt: skip
    assert by_name == whole and by_name.personal == PersonalOptions(rho=0.05, head_steps=None)
    assert by_name.selection == SelectionOptions()
    merged = train_config(method="dp2-fedsam", head_steps=3, personal=PersonalOptions(rho=0.05))
    assert merged.personal == PersonalOptions(rho=0.05, head_steps=3)
    assert repr(by_name) == (
        "TrainConfig(method='dp2-fedsam', rounds=2, data=DataOptions(dataset='digits'), "
        "personal=PersonalOptions(rho=0.05, head_steps=None))"
    )


def test_a_family_option_is_refused_for_another_family(plan_file):
    from hdp_planner_train import train
    from hdp_planner_train.run.errors import TrainError

    with pytest.raises(TrainError, match=r"--rho \(SAM radius\) applies to dp2-fedsam and dp-fedsam, not gdpfed\+"):
        train(plan_file, method="gdpfed+", dataset="digits", rho=0.1, rounds=1, noise="seeded")
    with pytest.raises(TrainError, match=r"--eta .* not gdpfed\+"):
        train(plan_file, method="gdpfed+", dataset="digits", eta=2.0, rounds=1, noise="seeded")
