"""The privacy audit: canaries through the real aggregation code find planted noise bugs."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdp_planner import audit, audit_one_run
from hdp_planner.accounting.rdp import rdp_epsilon

torch = pytest.importorskip("torch")

from hdp_planner.distributed.law import grid_law  # noqa: E402
from hdp_planner_train.audit.canaries import CanaryAuditor  # noqa: E402
from hdp_planner_train.rules import aggregate as agg  # noqa: E402
from hdp_planner_train.rules import noise_sources, release, sampling  # noqa: E402
from hdp_planner_train.rules.noise_sources import SecureNoise, SeededNoise  # noqa: E402
from hdp_planner_train.rules.sampling import sample_round  # noqa: E402
from hdp_planner_train.rules.secagg import SecaggSpec  # noqa: E402
from hdp_planner_train.rules.specs import GroupSpec  # noqa: E402

ROUNDS, DELTA = 50, 6000**-1.1
FMNIST = GroupSpec(
    method="gdpfed+", sizes=(200, 200, 200), q=(0.0069, 0.0189, 0.0342), noise_multiplier=(1.19, 0.934, 0.838),
    k_ratio=(0.7, 0.8, 0.9), weight=(0.3, 0.3, 0.3), clip=1.5,
)  # fmt: skip
"""GDPFed's FMNIST plan (Table 1 q_m, Table 5 σ_m² = 1.42, 0.87, 0.70; T = 50, δ = n^-1.1), fewer real clients:
with 1,500 canaries "in" per group, 500-2,600 insertions put μ̂ within 1.7-5% (one standard error)."""
SMALL = GroupSpec(
    method="gdpfed+", sizes=(100, 100), q=(0.1, 0.05), noise_multiplier=(2.0, 1.5), k_ratio=(0.7, 0.9),
    weight=(0.5, 0.5), clip=1.0,
)  # fmt: skip
"""Two groups, 10 rounds, 1,000 canaries each: enough to flag the planted bugs."""


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: threads only contend (the machine is shared); restored after the module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def simulate(
    spec: GroupSpec, seed: int, rounds: int = ROUNDS, canaries: int = 3000, secure: bool = False,
    survivors: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """``rounds`` rounds of synthetic client updates (norm ≈ 3, so clipped) plus canaries through ``aggregate``,
    with the seeded noise stream or the OS's secure one; the auditor is told who survived to each secure sum unless
    ``survivors`` is False."""
    d = canaries * len(spec.sizes)
    auditor = CanaryAuditor(spec, d, seed, per_group=canaries)
    data = np.random.default_rng(seed + 1000)
    for r in range(rounds):
        sampled = auditor.take(sample_round(spec, seed=seed, rnd=r, extra=auditor.extra), spec.offsets, spec.sizes)
        group_of_row = np.concatenate([np.full(len(s), m) for m, s in enumerate(sampled)]).astype(np.int64)
        deltas = torch.as_tensor(data.normal(0, 3 / math.sqrt(d), (len(group_of_row), d)), dtype=torch.float32)
        deltas, group_of_row = auditor.insert(deltas, group_of_row, r)
        source = SecureNoise() if secure else SeededNoise(seed, r)
        watch = agg.Observers(observe=auditor.observe, survivors=auditor.survivors if survivors else None)
        agg.aggregate(deltas, group_of_row, spec, source, rnd=r, observers=watch)
    planned = [
        rdp_epsilon(noise_multiplier=s, q=q, rounds=rounds, delta=DELTA) for s, q in zip(spec.noise_multiplier, spec.q)
    ]
    return auditor.report(planned, DELTA)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correct_noise_is_consistent(seed):
    report = simulate(FMNIST, seed)
    for g, sigma in zip(report["groups"], FMNIST.noise_multiplier):
        assert g["verdict"] == "consistent", g
        assert g["epsilon_empirical_upper"] <= g["epsilon_planned"]
        assert abs(g["noise_multiplier_empirical"] / sigma - 1) < 0.15
        assert abs(g["sampling_rate_observed"] / g["sampling_rate_planned"] - 1) < 0.25
        assert abs(g["lag1_correlation"]) < 4 * g["lag1_correlation_se"]
        assert g["epsilon_lower_bound"] <= g["epsilon_planned"]
    json.dumps(report, allow_nan=False)  # metrics.json-ready


def _flagged(report) -> list[bool]:
    return [g["verdict"].startswith("UNDER-NOISED") for g in report["groups"]]


def test_noise_share_std_over_3_is_flagged(monkeypatch):
    monkeypatch.setattr(
        noise_sources,
        "noise_share_std",
        lambda c, *, noise_multiplier, joined: c * noise_multiplier / math.sqrt(max(joined, 1)) / 3,
    )
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    assert all(_flagged(report))
    for g in report["groups"]:
        assert g["epsilon_empirical_interval"][0] > g["epsilon_planned"]
        assert abs(g["noise_multiplier_empirical"] * 3 / g["noise_multiplier_planned"] - 1) < 0.15


def test_noise_divided_by_c_is_flagged(monkeypatch):
    monkeypatch.setattr(
        noise_sources, "noise_share_std", lambda c, *, noise_multiplier, joined: c * noise_multiplier / max(joined, 1)
    )
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    assert all(_flagged(report))
    first, second = report["groups"]
    assert first["epsilon_lower_bound"] > first["epsilon_planned"]  # a proof that group 1's plan is violated
    assert second["epsilon_lower_bound"] > 0.5  # loose, but a proof of leakage


def test_reused_noise_stream_is_flagged_in_that_group_only(monkeypatch):
    real = agg.group_noise
    calls = {"n": 0}

    def reuse_first_group(d, *, joined, clip, noise_multiplier, source, device, dtype):
        group = calls["n"] % len(SMALL.sizes)
        calls["n"] += 1
        if group == 0:  # the bug: group 1's noise comes from a stream seeded the same way every round
            source = SeededNoise(1234, 0)
        return real(d, joined=joined, clip=clip, noise_multiplier=noise_multiplier, source=source, device=device,
                    dtype=dtype)  # fmt: skip

    monkeypatch.setattr(agg, "group_noise", reuse_first_group)
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    assert _flagged(report) == [True, False]
    assert "correlated" in report["groups"][0]["verdict"]
    assert report["groups"][0]["lag1_correlation"] > 0.5


def test_secure_noise_is_consistent():
    # Secure noise cannot be replayed, so the band is set by the run's own standard error. The canaries' mean shift
    # μ̂ = 1/σ̂ (noise units) is a mean over the insertions, close to normal, with relative standard error
    # σ_m/√insertions (≈ 3% here: 100 rounds, ≈ 2,500-5,000 insertions per group); σ̂ itself is skewed. A band of
    # 5 standard errors on μ̂ fails a correct run with probability ≈ 1e-6 and still refuses noise 15% off.
    # (A fixed 15% band on σ̂ after 40 rounds failed once in CI: μ̂ 3.6 standard errors low.)
    report = simulate(SMALL, 1, rounds=100, canaries=1000, secure=True)
    for g, sigma in zip(report["groups"], SMALL.noise_multiplier):
        assert g["verdict"] == "consistent"
        se = sigma / math.sqrt(g["insertions"])
        assert se < 0.035
        assert abs(sigma / g["noise_multiplier_empirical"] - 1) < 5 * se


# The four bugs of an under-noising run that the audit once called consistent, planted where a real one would be.


def test_every_group_sampled_at_one_rate_is_flagged(monkeypatch):
    """The sampler ignores q_m and draws every group at q_1: group 2 joins twice as often as planned (ε above its
    budget with the right σ); canaries are drawn by the same sampler, and both join rates are tested."""
    real = sampling.poisson_sample
    monkeypatch.setattr(sampling, "poisson_sample", lambda rng, *, size, q: real(rng, size=size, q=SMALL.q[0]))
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    first, second = report["groups"]
    assert first["verdict"] == "consistent", first
    assert second["verdict"].startswith("UNDER-NOISED") and "clients join at" in second["verdict"], second
    assert second["sampling_p_value_clients"] < audit.SAMPLING_ALPHA


def test_rates_in_reverse_group_order_are_flagged(monkeypatch):
    real = sampling.poisson_sample
    swapped = dict(zip(SMALL.q, reversed(SMALL.q)))
    monkeypatch.setattr(sampling, "poisson_sample", lambda rng, *, size, q: real(rng, size=size, q=swapped[q]))
    first, second = simulate(SMALL, 0, rounds=10, canaries=1000)["groups"]
    assert first["verdict"].startswith("NOT AS PLANNED"), first  # sampled less often than planned
    assert second["verdict"].startswith("UNDER-NOISED"), second


def test_top_k_chosen_on_the_clean_sum_is_flagged(monkeypatch):
    """The mask of Top-k is chosen on the noiseless sum (it leaks the data): the release is not a function of the
    noisy sum the auditor observes, in every round."""
    real_update, real_mask = agg.noisy_update, release.top_k_mask

    def leaky_update(ys, *, noises, spec, source, public_history=None, observe=None):
        clean = iter([y - n for y, n in zip(ys, noises)])
        monkeypatch.setattr(release, "top_k_mask", lambda y, k: real_mask(next(clean), k))
        try:
            return real_update(ys, noises=noises, spec=spec, source=source, public_history=public_history,
                               observe=observe)  # fmt: skip
        finally:
            monkeypatch.setattr(release, "top_k_mask", real_mask)

    monkeypatch.setattr(agg, "noisy_update", leaky_update)
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    for g in report["groups"]:
        assert g["verdict"].startswith("UNDER-NOISED") and g["releases_not_post_processing"] == 10, g


def test_first_row_of_each_group_left_unclipped_is_flagged(monkeypatch):
    """Canaries sit at random rows, so the unclipped first row is often one of theirs (2·C_m·u_j unclipped)."""
    real = agg.clip_rows

    def skip_first(rows, clip):
        clipped, count = real(rows[1:], clip)
        return torch.cat([rows[:1], clipped]), count

    monkeypatch.setattr(agg, "clip_rows", skip_first)
    report = simulate(SMALL, 0, rounds=10, canaries=1000)
    assert all(_flagged(report)), [g["verdict"] for g in report["groups"]]


LAWS = tuple(grid_law(noise_multiplier=z, threshold=2, shares=12, colluders=0, dim=2000, clip=1.0, bits=20)
             for z in SMALL.noise_multiplier)  # fmt: skip
SECAGG = dataclasses.replace(SMALL, secagg=SecaggSpec(bits=20, survivors=0.9, colluders=0, model_dim=2000, laws=LAWS))


def test_secure_aggregation_is_audited_on_the_decoded_sums():
    """Under secagg the canaries go through the integer pipeline (encode, shares, modular sum, decode) and the
    auditor sees only each group's decoded sum: consistent, and σ̂ at least z_m (at least the law's N shares)."""
    report = simulate(SECAGG, 0, rounds=10, canaries=1000)
    for g, z in zip(report["groups"], SECAGG.noise_multiplier):
        assert g["verdict"] == "consistent", g
        assert g["noise_multiplier_empirical"] > 0.9 * z


def test_secure_aggregation_with_dropouts_counts_a_dropped_canary_as_sampled_but_not_inserted():
    """30% of the sampled rows drop out: the sampler's draws are tested against q_m, the survivors are the
    insertions. An auditor not told who survived (the same run, the same noise) counts the dropped canaries as
    inserted: it dilutes the shift by about 30% and reports σ̂ about 1/0.7 too large, hiding missing noise."""
    spec = dataclasses.replace(SECAGG, secagg=dataclasses.replace(SECAGG.secagg, dropout=0.3))
    told = simulate(spec, 0, rounds=10, canaries=1000)["groups"]
    blind = simulate(spec, 0, rounds=10, canaries=1000, survivors=False)["groups"]
    for a, b in zip(told, blind):
        assert a["verdict"] == "consistent", a
        assert a["sampling_rate_observed"] == b["sampling_rate_observed"]  # the sampler's draws, dropouts included
        assert 0.6 < a["insertions"] / b["insertions"] < 0.8
        assert 0.6 < a["noise_multiplier_empirical"] / b["noise_multiplier_empirical"] < 0.8


def test_secure_aggregation_with_shares_a_third_too_small_is_flagged(monkeypatch):
    from hdp_planner_train.rules import secagg

    real = secagg.round_plan

    def thin(spec, **kw):
        plan = real(spec, **kw)
        return dataclasses.replace(plan, law=dataclasses.replace(plan.law, share_sigma2=plan.law.share_sigma2 // 9))

    monkeypatch.setattr(secagg, "round_plan", thin)
    assert all(_flagged(simulate(SECAGG, 0, rounds=10, canaries=1000)))


def test_pooled_noise_projects_every_group_on_the_pool():
    spec = GroupSpec(
        method="idp-fedavg-sample", sizes=(100, 100), q=(0.1, 0.05), noise_multiplier=(1.0, 1.0),
        k_ratio=(1.0, 1.0), weight=(0.01, 0.01), clip=1.0, pooled=True,
    )  # fmt: skip
    report = simulate(spec, 0, rounds=10, canaries=1000)
    for g in report["groups"]:
        assert g["verdict"] == "consistent"
        assert abs(g["noise_multiplier_empirical"] - 1.0) < 0.15


def test_directions_are_orthonormal_and_projections_match():
    layout = audit.canary_layout(512, groups=2, per_group=100, seed=3)
    assert len(np.unique(layout.slots)) == 200  # disjoint slots
    u = audit.canary_directions(layout, 1, np.arange(100))
    np.testing.assert_allclose(u @ u.T, np.eye(100), atol=1e-12)
    y = np.random.default_rng(0).normal(size=512)
    np.testing.assert_allclose(audit.project(layout, 1, y), u @ y, atol=1e-12)
    other = audit.canary_directions(layout, 0, np.arange(100))
    np.testing.assert_allclose(other @ u.T, 0, atol=1e-12)  # groups do not see each other's canaries


def test_layout_rejects_too_many_canaries():
    with pytest.raises(ValueError, match="between 2 and"):
        audit.canary_layout(100, groups=3, per_group=40, seed=0)


def test_no_insertion_is_not_identifiable():
    z = np.random.default_rng(0).normal(size=(5, 40))
    inserted = np.arange(40) < 20
    entry = audit.audit_group(
        z, np.zeros((5, 40), bool), inserted, q=0.01, delta=1e-5, epsilon_planned=1.0, sigma_planned=1.0, seed=0
    )
    assert entry["epsilon_empirical"] is None and entry["verdict"].startswith("not identifiable")
    assert entry["sampling_rate_observed"] == 0.0


def test_a_group_that_released_nothing_is_not_identifiable():
    """Secure aggregation with too few survivors in every round: no projection, no composition, no error."""
    inserted = np.arange(40) < 20
    none = np.zeros((0, 40), bool)
    entry = audit.audit_group(np.zeros((0, 40)), none, inserted, q=0.2, delta=1e-5, epsilon_planned=1.0,
                              sigma_planned=1.0, seed=0, offered=0, compositions=0, silent=none)  # fmt: skip
    assert entry["verdict"].startswith("not identifiable") and entry["epsilon_pld_of_planned_sigma"] == 0.0
    assert entry["silent_memberships"] == 0 and entry["silent_p_value"] == 1.0


def test_silent_memberships_that_shift_the_sum_are_flagged():
    """Tails memberships (``silent``) must leave the canary's projection null: a shift of one noise unit over 200
    of them is flagged, none is not."""
    rng = np.random.default_rng(2)
    z = rng.normal(size=(10, 400))
    inserted = np.arange(400) % 2 == 0
    member = (rng.random((10, 400)) < 0.2) & inserted
    heads = member & (rng.random((10, 400)) < 0.5)
    tails = member & ~heads
    z += heads
    kw = dict(offered=int(member.sum()), silent=tails, rate="coin p_m")
    honest = audit.audit_group(
        z, heads, inserted, q=0.5, delta=1e-5, epsilon_planned=100.0, sigma_planned=1.0, seed=0, **kw
    )
    assert honest["verdict"] == "consistent" and honest["silent_p_value"] > 1e-3, honest
    leaking = audit.audit_group(
        z + tails, heads, inserted, q=0.5, delta=1e-5, epsilon_planned=100.0, sigma_planned=1.0, seed=0, **kw
    )
    assert leaking["verdict"].startswith("UNDER-NOISED") and "tails memberships shift" in leaking["verdict"]
    assert abs(leaking["silent_shift_noise_units"] - 1) < 0.2


def test_no_shift_gives_zero_epsilon():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(10, 400))
    joined = rng.random((10, 400)) < 0.3
    inserted = np.arange(400) % 2 == 0
    z[:, inserted] -= 0.5 * joined[:, inserted]  # canaries pull the sum the wrong way: μ̂ < 0
    entry = audit.audit_group(
        z, joined & inserted, inserted, q=0.3, delta=1e-5, epsilon_planned=1.0, sigma_planned=1.0, seed=0
    )
    assert entry["epsilon_empirical"] == 0.0 and entry["noise_multiplier_empirical"] is None


@settings(max_examples=30, deadline=None)
@given(m=st.integers(20, 400), frac=st.floats(0.05, 1.0), acc=st.floats(0.0, 1.0), delta=st.sampled_from([0.0, 1e-5]))
def test_steinke_epsilon_is_the_edge_of_rejection(m, frac, acc, delta):
    r = max(1, int(frac * m))
    v = round(acc * r)
    eps = audit_one_run.steinke_epsilon(m, r=r, v=v, delta=delta, p_value=0.05)
    assert eps >= 0
    if eps > 0:  # ε just below the bound is rejected, just above it is not
        assert audit_one_run.steinke_p_value(m, r=r, v=v, eps=eps, delta=delta) < 0.05
        assert (
            audit_one_run.steinke_p_value(m, r=r, v=v, eps=eps + 1e-6 + 1e-6 * eps, delta=delta) >= 0.05 - 1e-9
            or eps >= 99
        )


def test_steinke_bound_is_zero_on_random_guesses_and_large_on_perfect_ones():
    rng = np.random.default_rng(0)
    inserted = rng.random(2000) < 0.5
    assert audit_one_run.steinke_lower_bound(rng.normal(size=2000), inserted, delta=1e-5) < 0.5
    perfect = audit_one_run.steinke_lower_bound(inserted.astype(float), inserted, delta=1e-5)
    assert perfect > 3


# ------------------------------------------------------------------ end to end: train --audit, compare --audit


@pytest.fixture(scope="module")
def digits_plan_file(tmp_path_factory):
    from hdp_planner import plan, save_plan

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan([0.5, 1.5, 3.0], n=120, rounds=10, q=0.1, clip=1.5, sparsity=(0.7, 0.8, 0.9)), path)
    return path


REQUIRED = (
    "epsilon_planned", "epsilon_empirical", "epsilon_empirical_upper", "noise_multiplier_planned",
    "noise_multiplier_empirical", "sampling_rate_planned", "sampling_rate_observed", "epsilon_lower_bound", "verdict",
)  # fmt: skip


def test_cli_train_audit_writes_the_audit_section(digits_plan_file, tmp_path):
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    out = tmp_path / "run"
    args = ["train", str(digits_plan_file), "--dataset", "digits", "--rounds", "4", "--audit", "--plot"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--device", "cpu", "--seeded-noise"])
    assert result.exit_code == 0, result.output
    assert "privacy audit" in result.output and result.output.count(" | ") >= 3 * 7
    metrics = json.loads((out / "metrics.json").read_text())
    section = metrics["audit"]
    assert section["canaries_per_group"] == 2410 // 3  # d = 2,410 for the digits model, M = 3
    assert [g["group"] for g in section["groups"]] == [1, 2, 3]
    for g, e in zip(section["groups"], metrics["epsilon_spent"]):
        assert all(k in g for k in REQUIRED)
        assert g["epsilon_planned"] == e["epsilon_spent"] and g["rounds"] == 4
        assert not g["verdict"].startswith("UNDER")
    # canaries are not counted as real clients in the (seeded run's) log; the figure has the audit panel
    assert all(j < 0.1 * 40 * 3 for j in metrics["joined_per_round_mean"])
    assert (out / "convergence.png").stat().st_size > 1000


def test_cli_train_audit_refuses_a_method_without_noise(digits_plan_file, tmp_path):
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    out = tmp_path / "run"
    args = ["train", str(digits_plan_file), "--dataset", "digits", "--method", "p-fedavg", "--audit"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 2 and result.output.startswith("error:") and "nothing to audit" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()
    too_many = CliRunner().invoke(app, [*args[:-3], "--audit", "--audit-canaries", "5000", "--out", str(out)])
    assert too_many.exit_code == 2 and "⌊d/M⌋ = 803" in too_many.output and not out.exists()


def test_cli_compare_audit_prints_empirical_epsilon_beside_each_method(tmp_path):
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    out = tmp_path / "grid"
    args = ["compare", "--dataset", "digits", "--methods", "p-fedavg,dp-fedavg", "--seeds", "1", "--rounds", "3"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--audit", "--device", "cpu"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "ε̂ audited" in result.output
    summary = {s["method"]: s for s in json.loads((out / "results.json").read_text())["summary"]}
    assert "epsilon_empirical" not in summary["p-fedavg"]  # no noise: nothing to audit
    assert len(summary["dp-fedavg"]["epsilon_empirical"]) == 1 and summary["dp-fedavg"]["audit_flags"] == []


def test_cli_train_audit_in_a_secure_run(digits_plan_file, tmp_path):
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    out = tmp_path / "secure"
    args = ["train", str(digits_plan_file), "--dataset", "digits", "--rounds", "3", "--audit", "--secure-noise"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert "joined_per_round_mean" not in metrics and len(metrics["audit"]["groups"]) == 3


def test_resumed_audited_run_reproduces_the_audit(digits_plan_file, tmp_path):
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, run

    def train(out, rounds, resume=False):
        cfg = configure(
            TrainConfig,
            method="gdpfed+",
            dataset="digits",
            rounds=rounds,
            out=str(out),
            device="cpu",
            progress=False,
            audit=True,
            audit_canaries=200,
            resume=resume,
            noise="seeded",
        )
        return run(cfg, digits_plan_file)["audit"]["groups"]

    whole = train(tmp_path / "whole", 3)
    train(tmp_path / "part", 2)
    resumed = train(tmp_path / "part", 3, resume=True)
    for a, b in zip(whole, resumed):
        assert a["insertions"] == b["insertions"] and a["epsilon_empirical"] == pytest.approx(b["epsilon_empirical"])


def _mismatched_run(factor: float, rounds: int = 10) -> dict[str, Any]:
    """Finding 10: the sampler's output is what the audit is told, but the rows aggregated are another draw of the
    real clients, at ``factor`` times q_m (the canaries still join as drawn)."""
    spec, seed, canaries = SMALL, 0, 1000
    d = canaries * len(spec.sizes)
    auditor = CanaryAuditor(spec, d, seed, per_group=canaries)
    data = np.random.default_rng(7)
    for r in range(rounds):
        auditor.take(sample_round(spec, seed=seed, rnd=r, extra=auditor.extra), spec.offsets, spec.sizes)
        other = [np.flatnonzero(data.random(size) < factor * q) for size, q in zip(spec.sizes, spec.q)]
        group_of_row = np.concatenate([np.full(len(s), m) for m, s in enumerate(other)]).astype(np.int64)
        deltas = torch.as_tensor(data.normal(0, 3 / math.sqrt(d), (len(group_of_row), d)), dtype=torch.float32)
        deltas, group_of_row = auditor.insert(deltas, group_of_row, r)
        agg.aggregate(deltas, group_of_row, spec, SeededNoise(seed, r), rnd=r,
                      observers=agg.Observers(observe=auditor.observe))  # fmt: skip
    planned = [rdp_epsilon(noise_multiplier=s, q=q, rounds=rounds, delta=DELTA)
               for s, q in zip(spec.noise_multiplier, spec.q)]  # fmt: skip
    return auditor.report(planned, DELTA)


def test_aggregating_clients_the_sampler_did_not_draw_is_flagged():
    """The audit counts the clients actually aggregated against the sampler's output it accounted for: a round that
    aggregates more of them is UNDER-NOISED, fewer NOT AS PLANNED, and the join rate is that of the aggregated set."""
    more = _mismatched_run(4.0)
    for g in more["groups"]:
        assert g["verdict"].startswith("UNDER-NOISED") and "the sampler did not draw" in g["verdict"], g["verdict"]
        assert g["sampling_rate_clients"] > 2 * g["sampling_rate_planned"]
    fewer = _mismatched_run(0.25)
    for g in fewer["groups"]:
        assert g["rounds_aggregating_fewer_than_sampled"] > 0
        assert "fewer clients than sampled" in g["verdict"] and not g["verdict"].startswith("consistent")


def test_a_faithful_run_aggregates_exactly_the_sampled_clients():
    report = simulate(SMALL, 0, rounds=5, canaries=1000)
    for g in report["groups"]:
        assert g["rounds_aggregating_more_than_sampled"] == g["rounds_aggregating_fewer_than_sampled"] == 0
