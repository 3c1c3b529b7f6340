"""Privacy-aware client selection in the trainer (hdp_planner_train.simulator.private_selection) and the
non-IID mix partition: selection probabilities, sampling with replacement, record-level DP-SGD, metrics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
pytest.importorskip("cvxpy")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.methods.registry import REGISTRY  # noqa: E402
from hdp_planner.methods.selection import record_noise_multiplier, solve_selection  # noqa: E402
from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.api import train_config  # noqa: E402
from hdp_planner_train.learning.datasets import DataError  # noqa: E402
from hdp_planner_train.learning.dp_sgd import (  # noqa: E402
    ClientSGD,
    clip_per_example,
    dp_sgd_client,
    noisy_mean_gradient,
    per_example_grads,
)
from hdp_planner_train.learning.federated import load_federated  # noqa: E402
from hdp_planner_train.learning.models import make_model  # noqa: E402
from hdp_planner_train.learning.partitions import mixed_partition, mixed_split  # noqa: E402
from hdp_planner_train.rules.noise_sources import SeededNoise  # noqa: E402
from hdp_planner_train.simulator.private_selection import client_losses, power_of_choice  # noqa: E402
from hdp_planner_train.simulator.selection_setup import (  # noqa: E402
    calibrate_clients,
    candidate_sets,
    check_budgets,
    client_groups,
    preselect,
    selection_probabilities,
    selection_problem,
)
from hdp_planner_train.simulator.trainer import TrainError, run  # noqa: E402

N = 20  # digits clients: about 72 examples each
ROUNDS = 3


@pytest.fixture(scope="module")
def small_plan():
    return plan([0.5, 1.5, 3.0], n=N, rounds=6, q=0.25, clip=1.5)


@pytest.fixture(scope="module")
def plan_path(small_plan, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan003") / "plan.json"
    save_plan(small_plan, path)
    return path


@pytest.fixture(scope="module")
def digits():
    return load_federated("digits", clients=N, seed=0)


def _cfg(method, **kw):
    base = dict(dataset="digits", clients=N, rounds=ROUNDS, batch_size=16, progress=False, per_round=4)
    return train_config(method=method, **{**base, **kw})


@pytest.fixture(scope="module")
def aware_run(plan_path):
    return run(_cfg("privacy-aware"), plan_path)


# ------------------------------------------------------------------ selection probabilities and sampling


def test_privacy_aware_p_is_problem_1s_optimum_and_positive(small_plan, digits):
    problem = selection_problem(small_plan, digits.clients, rounds=ROUNDS, per_round=4, batch=16, eta=1e5)
    p, sol = selection_probabilities(problem, REGISTRY["privacy-aware"].selection)
    assert np.all(p > 0) and p.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(p, solve_selection(problem).p, rtol=1e-9, atol=1e-12)
    assert sol.objective <= problem.objective(problem.unbiased) + 1e-9
    _, eps = client_groups(small_plan, N)  # clients take their plan group's ε, in group order
    assert problem.epsilon == tuple(eps) and eps[0] == 0.5 and eps[-1] == 3.0
    assert problem.num_samples == tuple(len(c) for c in digits.clients)
    np.testing.assert_allclose(selection_probabilities(problem, REGISTRY["unbiased"].selection)[0], problem.unbiased)
    # the strict group is selected less than unbiased, the loose one more
    g, _ = client_groups(small_plan, N)
    assert p[g == 0].sum() < problem.unbiased[g == 0].sum() and p[g == 2].sum() > problem.unbiased[g == 2].sum()


def test_trainer_uses_that_p(aware_run, small_plan, digits):
    problem = selection_problem(small_plan, digits.clients, rounds=ROUNDS, per_round=4, batch=16, eta=1e5)
    recorded = [c["p"] for c in aware_run["client_privacy"]]
    np.testing.assert_allclose(recorded, solve_selection(problem).p, rtol=1e-9, atol=1e-12)


def test_preselection_is_with_replacement_and_follows_p():
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    chosen = preselect(p, rounds=4000, per_round=5, seed=3)
    assert chosen.shape == (4000, 5)
    assert any(len(set(row)) < len(row) for row in chosen)  # the same client twice in a round
    freq = np.bincount(chosen.ravel(), minlength=5) / chosen.size
    se = np.sqrt(p * (1 - p) / chosen.size)
    assert np.all(np.abs(freq - p) < 4 * se)  # 4 standard errors
    np.testing.assert_array_equal(chosen, preselect(p, rounds=4000, per_round=5, seed=3))
    cand = candidate_sets(p, rounds=50, candidates=3, seed=0)  # power-of-choice candidates: distinct within a round
    assert all(len(set(row)) == 3 for row in cand)


def test_power_of_choice_picks_the_highest_loss_candidates(digits):
    cand = np.array([7, 3, 11, 0, 5])
    losses = np.array([0.2, 1.5, 0.9, 3.0, 0.1])
    np.testing.assert_array_equal(power_of_choice(losses, cand, per_round=2), [0, 3])
    np.testing.assert_array_equal(power_of_choice(losses, cand, per_round=3), [0, 3, 11])
    model = make_model("digits")
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    x, y = torch.as_tensor(digits.x_train), torch.as_tensor(digits.y_train)
    loss = client_losses(model, theta, x=x, y=y, clients=digits.clients, ids=[2, 4])
    own = torch.as_tensor(digits.clients[4])
    with torch.no_grad():
        ref = float(torch.nn.functional.cross_entropy(model(x[own]), y[own]))
    assert loss[1] == pytest.approx(ref, rel=1e-6)


# ------------------------------------------------------------------ record-level DP-SGD


def test_per_example_gradients_match_autograd_and_clipping_bounds_every_norm():
    torch.manual_seed(0)
    model = make_model("digits")
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    x, y = torch.randn(5, 1, 8, 8), torch.tensor([0, 3, 3, 9, 1])
    g = per_example_grads(model)(theta, x, y)
    for i in range(5):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]).backward()
        ref = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        torch.testing.assert_close(g[i], ref, rtol=1e-5, atol=1e-6)
    rows = torch.randn(50, 300) * torch.logspace(-2, 2, 50)[:, None]
    clipped = clip_per_example(rows, 1.5)
    norms = torch.linalg.vector_norm(clipped, dim=1)
    assert torch.all(norms <= 1.5 * (1 + 1e-6))
    small = torch.linalg.vector_norm(rows, dim=1) <= 1.5
    torch.testing.assert_close(clipped[small], rows[small])  # already within C: unchanged
    torch.testing.assert_close(norms[~small], torch.full_like(norms[~small], 1.5))


def test_noise_std_is_z_c_over_expected_batch_and_doubles_with_c():
    d, z, batch = 200_000, 1.3, 8.0
    stds = []
    for clip in (0.5, 1.0):
        gen = SeededNoise(1, 0)
        mean, noise = noisy_mean_gradient(
            torch.zeros(3, d, dtype=torch.float64), clip=clip, multiplier=z, expected_batch=batch, source=gen
        )
        torch.testing.assert_close(mean, noise)  # zero gradients: only the noise
        stds.append(float(noise.std()))
        assert stds[-1] == pytest.approx(z * clip / batch, rel=0.01)
    assert stds[1] / stds[0] == pytest.approx(2.0, rel=0.01)
    # through the client's DP-SGD: one step, empty Poisson batch, lr 1 → Δ is minus the noise, std zC/(r|M|)
    model = make_model("digits")
    theta = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    measured = []
    for clip in (0.5, 1.0):
        gen = SeededNoise(2, 0)
        deltas = [
            dp_sgd_client(per_example_grads(model), theta, None, None, [np.zeros(0, int)], source=gen,
                          sgd=ClientSGD(clip=clip, multiplier=z, expected_batch=batch, lr=1.0, momentum=0.0))[0]
            for _ in range(40)
        ]  # fmt: skip
        measured.append(float(torch.cat(deltas).std()))
        assert measured[-1] == pytest.approx(z * clip / batch, rel=0.03)
    assert measured[1] / measured[0] == pytest.approx(2.0, rel=0.03)


def test_calibration_follows_the_realized_counts_and_budgets_are_checked(small_plan, digits):
    problem = selection_problem(small_plan, digits.clients, rounds=ROUNDS, per_round=4, batch=16, eta=1e5)
    group, _ = client_groups(small_plan, N)
    counts = np.zeros(N, dtype=int)
    counts[[0, 1, 19]] = [1, 3, 2]
    priv = calibrate_clients(problem, counts, "exact", group)
    r0 = float(problem.rates[0])
    assert priv.multiplier_exact[0] == pytest.approx(
        record_noise_multiplier(0.5, delta=problem.delta, rate=r0, steps=5, rule="exact")
    )
    assert priv.multiplier_paper[1] == pytest.approx(
        record_noise_multiplier(0.5, delta=problem.delta, rate=r0, steps=15, rule="paper")
    )
    assert priv.multiplier_exact[1] > priv.multiplier_exact[0] and priv.multiplier_exact[2] == 0  # never selected
    spent = check_budgets(priv, counts * 5, delta=problem.delta, rule="exact")
    assert np.all(spent <= priv.epsilon + 1e-9) and spent[0] == pytest.approx(0.5, rel=1e-3) and spent[2] == 0
    weak = dataclasses.replace(priv, counts=counts, multiplier_paper=priv.multiplier_exact / 2, rule="paper")
    with pytest.raises(TrainError, match="spends ε"):
        check_budgets(weak, counts * 5, delta=problem.delta, rule="paper")


# ------------------------------------------------------------------ the mixed partition


def test_mixed_partition_has_the_iid_share_and_uses_every_example_once(digits):
    labels = digits.y_train
    n = len(labels)
    rng = np.random.default_rng(0)
    parts = mixed_split(labels, 10, 0.3, rng)
    iid_sizes = np.array([len(a) for a, _ in parts])
    assert iid_sizes.sum() == round(0.3 * n) and np.ptp(iid_sizes) <= 1
    everything = np.concatenate([np.concatenate(p) for p in parts])
    np.testing.assert_array_equal(np.sort(everything), np.arange(n))
    for a, b in parts:
        assert len(a) / (len(a) + len(b)) == pytest.approx(0.3, abs=0.02)
        assert len(np.unique(labels[b])) <= 4  # two label-sorted shards, each spanning at most two classes
    full = mixed_partition(labels, 10, 0.3, np.random.default_rng(0))
    np.testing.assert_array_equal(np.sort(np.concatenate(full)), np.arange(n))
    assert all(len(np.unique(labels[c])) == 10 for c in mixed_partition(labels, 10, 1.0, rng))  # s = 100%: IID
    assert max(len(np.unique(labels[c])) for c in mixed_partition(labels, 10, 0.0, rng)) <= 4
    with pytest.raises(DataError, match="iid-share"):
        mixed_split(labels, 10, 30, rng)
    with pytest.raises(DataError, match="without --dirichlet"):
        load_federated("digits", clients=10, dirichlet=0.5, iid_share=0.3)
    assert load_federated("digits", clients=10, iid_share=0.3).n_clients == 10


# ------------------------------------------------------------------ end to end


def test_metrics_record_the_privacy_model_and_epsilon_within_budget(aware_run):
    m = aware_run
    assert "record-level" in m["privacy_model"] and m["noise_rule"] == "paper"
    assert 0 <= m["final_accuracy"] <= 100 and len(m["round_seconds"]) == ROUNDS
    clients = m["client_privacy"]
    assert sum(c["selections"] for c in clients) == ROUNDS * 4  # with replacement: K draws per round
    for c in clients:
        assert c["epsilon_spent"] <= c["epsilon_budget"] * (1 + 1e-9)
        assert (c["epsilon_spent"] > 0) == (c["selections"] > 0)
        assert c["noise_multiplier_paper"] >= c["noise_multiplier_exact"]  # the paper's rule is looser
    for g in m["epsilon_spent"]:
        assert g["epsilon_spent_max"] <= g["epsilon_budget"] * (1 + 1e-9)
    assert m["noise_lambda_measured"] == pytest.approx(m["noise_lambda_planned"], rel=0.2)


def test_same_seed_same_result_and_baselines_run(plan_path, aware_run):
    again = run(_cfg("privacy-aware"), plan_path)
    assert again["history"] == aware_run["history"] and again["selected"] == aware_run["selected"]
    poc = run(_cfg("power-of-choice", candidates=8, noise_rule="paper", rounds=2), plan_path)
    assert all(len(set(ids)) == 4 for ids in poc["selected"])  # distinct clients among the d candidates
    assert poc["noise_rule"] == "paper" and "not privatized" in poc["privacy"]
    for c in poc["client_privacy"]:
        assert c["selections"] <= c["calibrated_selections"]
        assert c["epsilon_spent"] <= c["epsilon_budget"] * (1 + 1e-9)
    assert poc == run(_cfg("power-of-choice", candidates=8, noise_rule="paper", rounds=2), plan_path) | {
        "round_seconds": poc["round_seconds"],
        "round_seconds_median": poc["round_seconds_median"],
    }


def test_cli_runs_unbiased_and_refuses_bad_options(plan_path, tmp_path):
    runner = CliRunner()
    base = ["train", str(plan_path), "--dataset", "digits", "--clients", str(N), "--rounds", "2", "--batch-size", "16"]
    res = runner.invoke(app, [*base, "--method", "unbiased", "--out", str(tmp_path / "u"), "--iid-share", "0.5"])
    assert res.exit_code == 0, res.output
    assert "z paper" in res.output and (tmp_path / "u" / "metrics.json").is_file()
    for extra, message in (
        (["--method", "privacy-aware", "--candidates", "5"], "applies to power-of-choice"),
        (["--method", "gdpfed+", "--noise-rule", "paper"], "applies to"),
        (["--method", "unbiased", "--noise-rule", "loose"], "--noise-rule must be"),
        (["--method", "unbiased", "--iid-share", "0.5", "--dirichlet", "0.3"], "--iid-share"),
        (["--method", "power-of-choice", "--candidates", "2", "--clients-per-round", "4"], "--candidates d"),
    ):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 2 and message in res.output, (extra, res.output)


def test_an_explicit_ledger_is_refused_for_example_level_dp(plan_path, tmp_path):
    """The selection methods protect examples, not clients: charging the client-level ledger would mix units."""
    with pytest.raises(TrainError, match="example-level DP"):
        cfg = _cfg("privacy-aware")
        run(dataclasses.replace(cfg, ledger=dataclasses.replace(cfg.ledger, url=str(tmp_path / "l.sqlite"))), plan_path)
    assert not (tmp_path / "l.sqlite").exists()
