"""The baselines as planned: each method's defining property, its accounting, and its plan file entry."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner import PlanFileError, load_plan, plan, plan_problems, save_plan
from hdp_planner.accounting.calibration import GaussianRounds, epsilon_spent, reference_epsilon
from hdp_planner.accounting.pld import never_sampled_bound
from hdp_planner.accounting.rdp import rdp_epsilon
from hdp_planner.accounting.schedule import calibrate_schedule, schedule_epsilon, truncate
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines, baseline_names
from hdp_planner.methods.idp_fedavg import idp_fedavg_sample
from hdp_planner.rules.noise import lambda_exact

D = 10_000  # a model dimension for PFA's Λ (the planner never builds the model)


@pytest.fixture(scope="module")
def small():
    """Three groups, n = 120, T = 10 (the trainer tests' setting) with every baseline."""
    base = plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1, clip=1.5, sparsity=(0.7, 0.8, 0.9))
    return add_baselines(base, tuple(BASELINES.values()), BaselineOptions(model_dim=D, pfa_dim=2, pfa_window=4))


def test_every_baseline_meets_every_budget(small):
    assert [m.name for m in small.methods][4:] == list(BASELINES.values())
    assert plan_problems(small) == []
    for m in small.methods[4:]:
        assert all(s <= e * (1 + 1e-9) for s, e in zip(m.epsilon_spent, m.epsilon))
        assert m.epsilon_spent == pytest.approx(m.epsilon, rel=1e-5)  # every budget is spent, none wasted


# ------------------------------------------------------------------ IDP-FedAvg (Boenisch et al.)


def _idp_sgd_sample_rates(eps, ratios, q0, rounds, delta, precision=1e-3):
    """IDP-SGD's ``get_sample_rates`` (nested bisections over σ, then q per group), on our RDP accountant, with
    q searched up to 1 instead of its MAX_Q = 0.1 (this setting's q is 0.1)."""

    def rate(e, sigma):
        lo, hi = 1e-9, 1.0
        if rdp_epsilon(noise_multiplier=sigma, q=hi, rounds=rounds, delta=delta) < e:
            return hi
        while lo / hi < 1 - precision:
            mid = (lo + hi) / 2
            lo, hi = (
                (mid, hi) if rdp_epsilon(noise_multiplier=sigma, q=mid, rounds=rounds, delta=delta) < e else (lo, mid)
            )
        return lo

    s_lo, s_hi = 1e-3, 10.0
    while s_lo / s_hi < 1 - precision:
        sigma = (s_lo + s_hi) / 2
        mean = sum(r * rate(e, sigma) for e, r in zip(eps, ratios))
        s_lo, s_hi = (s_lo, sigma) if mean > q0 else (sigma, s_hi)
    return s_hi, [rate(e, s_hi) for e in eps]


def test_idp_sample_is_idp_sgds_rule_solved_exactly(small):
    m, c = small.method("IDP-FedAvg-Sample"), small.config
    sigma, q = _idp_sgd_sample_rates(m.epsilon, [1 / 3] * 3, c.q, c.rounds, c.delta)
    assert m.noise_multiplier[0] == pytest.approx(sigma, rel=2e-3)
    assert m.q == pytest.approx(q, rel=5e-3)


@settings(max_examples=5, deadline=None)
@given(
    eps=st.lists(st.floats(0.3, 8.0), min_size=2, max_size=3, unique=True).map(sorted),
    sizes=st.lists(st.integers(20, 400), min_size=3, max_size=3),
)
def test_idp_sample_meets_every_budget_at_one_sigma(eps, sizes):
    """IDP's sampling: one σ, each group at the largest q_m meeting ε_m there, Σ q_m|G_m| = qn."""
    sizes = sizes[: len(eps)]
    p = plan(eps, n=sum(sizes), sizes=sizes, rounds=10, q=0.05)
    m = idp_fedavg_sample(p, BaselineOptions())
    assert len(set(m.noise_multiplier)) == 1 and m.pooled
    sigma, c = m.noise_multiplier[0], p.config
    assert sum(qm * s for qm, s in zip(m.q, sizes)) == pytest.approx(c.q * sum(sizes), rel=1e-7)
    for e, qm in zip(m.epsilon, m.q):
        # by RDP, or (0, δ)-DP whatever σ where 1 − (1 − q_m)^T ≤ δ (δ = 1/n^1.1 is large for these small n)
        assert (
            rdp_epsilon(noise_multiplier=sigma, q=qm, rounds=c.rounds, delta=c.delta) <= e
            or never_sampled_bound(qm, rounds=c.rounds) <= c.delta
        )
        if qm < 1:  # the largest such q: a little more sampling overspends
            assert rdp_epsilon(noise_multiplier=sigma, q=qm * (1 + 1e-5), rounds=c.rounds, delta=c.delta) > e
    assert list(m.q) == sorted(m.q, key=lambda x: x) or list(m.epsilon) != sorted(m.epsilon)
    assert m.weight == pytest.approx([1 / (c.q * sum(sizes))] * len(eps))  # one pool, averaged as DP-FedAvg


def test_idp_scale_clips_follow_idp_sgd_and_keep_one_noise(small):
    m, gdp = small.method("IDP-FedAvg-Scale"), small.method("GDPFed")
    assert m.noise_multiplier == gdp.noise_multiplier and m.epsilon_spent == gdp.epsilon_spent
    mean_sigma = np.mean(gdp.noise_multiplier)  # equal groups: ratios 1/3
    assert m.clip == pytest.approx([1.5 * mean_sigma / s for s in gdp.noise_multiplier])
    std = [c * s for c, s in zip(m.clip, m.noise_multiplier)]
    assert std == pytest.approx([std[0]] * 3)  # one pooled draw serves every group's σ_m
    assert 3 / sum(1 / c for c in m.clip) == pytest.approx(1.5)  # harmonic mean = C
    assert m.lam == pytest.approx(m.weight[0] ** 2 * std[0] ** 2)


# ------------------------------------------------------------------ PFA (Liu et al.)


def test_pfa_projects_the_strictest_group_onto_the_loosest(small):
    m, gdp = small.method("PFA"), small.method("GDPFed")
    pr = m.projection
    assert (pr.public, pr.projected, pr.dim, pr.window, pr.subspace, pr.model_dim) == (2, 0, 2, 4, "lanczos", D)
    assert m.k_ratio == (2 / D, 1.0, 1.0)
    assert (m.q, m.noise_multiplier, m.weight) == (gdp.q, gdp.noise_multiplier, gdp.weight)  # GDPFed's noise
    removed = gdp.weight[0] ** 2 * 1.5**2 * gdp.sigma2[0] * (1 - 2 / D)
    assert m.lambda_exact == pytest.approx(gdp.lambda_exact - removed)


def test_pfa_needs_two_budgets_and_the_model_dimension():
    one = plan([1.0, 1.0], n=100)
    with pytest.raises(ValueError, match="different ε"):
        add_baselines(one, ["PFA"], BaselineOptions(model_dim=D))
    with pytest.raises(ValueError, match="model-dim"):
        add_baselines(plan([0.5, 2.0], n=100), ["PFA"])
    with pytest.raises(ValueError, match="window"):
        BaselineOptions(pfa_dim=3, pfa_window=2)
    with pytest.raises(ValueError, match="subspace"):
        BaselineOptions(pfa_subspace="qr")


# ------------------------------------------------------------------ time-adaptive (Kiani et al.)


def test_time_adaptive_schedule_spends_exactly_the_budget(small):
    m, c = small.method("Time-adaptive"), small.config
    save, spend = m.schedule
    assert (save.rounds, spend.rounds) == (5, 5) and spend.noise_multiplier == m.noise_multiplier
    assert save.noise_multiplier == pytest.approx([2 * s for s in m.noise_multiplier])
    import dp_accounting as dpa

    for g, e in enumerate(m.epsilon):
        phases = [(ph.rounds, ph.noise_multiplier[g]) for ph in m.schedule]
        ours = schedule_epsilon(phases, q=c.q, delta=c.delta)
        event = dpa.ComposedDpEvent(
            [GaussianRounds(noise_multiplier=sigma, q=c.q, rounds=rounds).dp_event() for rounds, sigma in phases]
        )
        reference = dpa.rdp.RdpAccountant().compose(event).get_epsilon(c.delta)
        assert ours == pytest.approx(reference, rel=1e-9)  # dp-accounting's RDP composition
        assert e * (1 - 1e-5) <= ours <= e  # the schedule sums to the budget
        assert spend.noise_multiplier[g] < small.method("GDPFed").noise_multiplier[g]  # saving buys less noise later
    assert m.lambda_exact > small.method("GDPFed").lambda_exact  # on average over rounds, it is noisier


@settings(max_examples=3, deadline=None)
@given(saving=st.integers(0, 7), ratio=st.floats(1.0, 3.0), eps=st.floats(0.5, 4.0))
def test_any_schedule_meets_its_budget(saving, ratio, eps):
    delta, q, rounds = 1e-4, 0.1, 8
    save, spend = calibrate_schedule(
        epsilon=eps, delta=delta, q=q, rounds=rounds, saving_rounds=saving, saving_noise=ratio
    )
    assert save == pytest.approx(ratio * spend)
    phases = [(saving, save), (rounds - saving, spend)]
    assert eps * (1 - 1e-5) <= schedule_epsilon(phases, q=q, delta=delta) <= eps
    # part-way through, less is spent; a constant schedule is the one-phase accountant
    assert schedule_epsilon(truncate(phases, rounds // 2), q=q, delta=delta) < eps
    assert schedule_epsilon([(rounds, spend)], q=q, delta=delta) == pytest.approx(
        rdp_epsilon(noise_multiplier=spend, q=q, rounds=rounds, delta=delta)
    )


def test_schedule_of_one_phase_is_dp_accountings_self_composition():
    rounds = GaussianRounds(noise_multiplier=1.1, q=0.05, rounds=20)
    assert schedule_epsilon([(20, 1.1)], q=0.05, delta=1e-5) == pytest.approx(
        reference_epsilon(rounds, delta=1e-5), rel=1e-9
    )
    assert schedule_epsilon([(20, 1.1)], q=0.05, delta=1e-5) == pytest.approx(
        epsilon_spent(rounds, delta=1e-5, accountant="rdp"), rel=1e-12
    )


# ------------------------------------------------------------------ names, plan files, verify


def test_method_names():
    assert baseline_names(["gdpfed", "PFA", "idp-fedavg-sample", "p-fedavg", "pfa"]) == ("PFA", "IDP-FedAvg-Sample")
    with pytest.raises(ValueError, match="unknown method 'fedprox'"):
        baseline_names(["fedprox"])


@pytest.fixture
def small_path(tmp_path, small):
    path = tmp_path / "plan.json"
    save_plan(small, path)
    return path


def _tamper(path, edit):
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return path


def test_plan_file_round_trip_with_baselines(small_path, small):
    doc = json.loads(small_path.read_text())
    assert doc["noise"]["PFA"]["projection"]["model_dim"] == D
    assert doc["noise"]["IDP-FedAvg-Sample"]["pooled"] is True and "clip" in doc["noise"]["IDP-FedAvg-Scale"]
    assert [ph["rounds"] for ph in doc["noise"]["Time-adaptive"]["schedule"]] == [5, 5]
    assert load_plan(small_path) == small


def test_verify_rechecks_the_schedule(small_path):
    def lower(doc):  # saving phase of group 2 under-noised, the file kept consistent (Λ recomputed)
        entry = doc["noise"]["Time-adaptive"]
        entry["schedule"][0]["noise_multiplier"][1] *= 0.8
        rms = [
            math.sqrt(sum(ph["rounds"] * ph["noise_multiplier"][g] ** 2 for ph in entry["schedule"]) / 10)
            for g in range(3)
        ]
        entry["lambda"] = entry["lambda_exact"] = lambda_exact(entry["weight"], rms, entry["k_ratio"], 1.5)

    problems = plan_problems(load_plan(_tamper(small_path, lower)))
    assert len(problems) == 1 and "Time-adaptive, group 2 (ε=1.5)" in problems[0] and "schedule" in problems[0]


def _scale_sigma(doc, name, factor):
    entry = doc["noise"][name]
    entry["noise_multiplier"] = [s * factor for s in entry["noise_multiplier"]]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["noise"]["Time-adaptive"]["schedule"][0].update(rounds=4), "add up"),
        (lambda d: d["noise"]["Time-adaptive"]["schedule"][1]["noise_multiplier"].__setitem__(0, 9.0), "last"),
        (lambda d: d["noise"]["IDP-FedAvg-Scale"]["clip"].__setitem__(0, 9.0), "C_m·σ_m"),
        (lambda d: d["noise"]["PFA"]["projection"].update(model_dim=5 * D), "dim/model_dim"),
        (lambda d: d["noise"]["PFA"]["projection"].update(projected=2), "two of"),
        (lambda d: d["noise"]["PFA"]["projection"].update(subspace="qr"), "subspace"),
        (lambda d: d["noise"]["GDPFed"].update(pooled=True), "unexpected 'pooled'"),
        (lambda d: d["noise"]["IDP-FedAvg-Scale"].pop("clip"), "missing 'clip'"),
        (lambda d: d["noise"].update(FedProx=d["noise"]["GDPFed"]), "unknown method 'FedProx'"),
        (lambda d: d["noise"]["IDP-FedAvg-Sample"]["weight"].__setitem__(0, 1.0), "weight"),
    ],
)
def test_inconsistent_baselines_are_rejected(small_path, edit, message):
    with pytest.raises(PlanFileError, match=message):
        load_plan(_tamper(small_path, edit))


def test_lambda_in_paper_convention_is_exact_for_baselines(small):
    base = plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1, clip=1.5, lambda_convention="paper")
    paper = add_baselines(base, ["IDP-FedAvg-Scale"])
    m = paper.method("IDP-FedAvg-Scale")
    assert m.lam == m.lambda_exact == small.method("IDP-FedAvg-Scale").lambda_exact
    assert dataclasses.replace(m, lam=0.0).lam == 0.0 and math.isfinite(m.lam)
