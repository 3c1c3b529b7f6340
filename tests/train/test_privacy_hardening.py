"""Privacy that holds outside the simulator (noise source, executed mechanism, diagnostics)."""

from __future__ import annotations

import copy
import functools
import json

import dp_accounting
import numpy as np
import pytest
from conftest import UNSEEDED_ALPHA
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from scipy import stats

from hdp_planner import PlanFileError, load_plan, plan, plan_problems, plan_to_dict
from hdp_planner.accounting.calibration import quiet_dp_accounting
from hdp_planner.methods.baselines import BASELINES, BaselineOptions, add_baselines
from hdp_planner.methods.registry import row_paper_weights
from hdp_planner.rules.noise import (
    aggregation_weights,
    lambda_exact,
    lambda_for,
    pooled_weights,
    secure_normal,
    secure_uniform,
)

torch = pytest.importorskip("torch")

from hdp_planner_train.rules.aggregate import aggregate  # noqa: E402
from hdp_planner_train.rules.noise_sources import SecureNoise, SeededNoise, noise_source  # noqa: E402
from hdp_planner_train.rules.sampling import round_seed  # noqa: E402
from hdp_planner_train.rules.specs import METHOD_NAMES, GroupSpec, method_spec  # noqa: E402

# ------------------------------------------------------------------ noise sources


def test_secure_normal_is_standard_normal():
    x = secure_normal(200_001)  # odd: Box-Muller pairs, one half dropped
    assert x.shape == (200_001,) and x.dtype == np.float64
    assert abs(x.mean()) < 5 / np.sqrt(x.size)
    assert x.var() == pytest.approx(1.0, abs=5 * np.sqrt(2 / x.size))
    assert stats.kstest(x, "norm").pvalue > UNSEEDED_ALPHA
    assert stats.kurtosis(x) == pytest.approx(0.0, abs=0.1)
    assert secure_normal(0).shape == (0,)


def test_secure_draws_never_repeat_and_uniforms_lie_in_unit_interval():
    u = secure_uniform(100_000)
    assert 0 <= u.min() and u.max() < 1.0 and stats.kstest(u, "uniform").pvalue > UNSEEDED_ALPHA
    assert not np.array_equal(secure_normal(8), secure_normal(8))


def test_seeded_noise_is_the_round_seeded_torch_stream():
    """SeededNoise(seed, rnd) draws exactly torch's generator seeded with round_seed(seed, rnd, 2) (resume and
    engine equivalence rely on it)."""
    gen = torch.Generator().manual_seed(round_seed(7, rnd=3, stream=2))
    expected = torch.cat([torch.randn(5, generator=gen) * 2.0, torch.randn(4, generator=gen)])
    src = SeededNoise(7, 3)
    got = torch.cat([src.normal(5, 2.0, "cpu", torch.float32), src.normal(4, 1.0, "cpu", torch.float32)])
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    torch.testing.assert_close(
        SeededNoise(7, 3).normal(9, 1.0, "cpu", torch.float64),
        SeededNoise(7, 3).normal(9, 1.0, "cpu", torch.float64),
        rtol=0,
        atol=0,
    )


def test_secure_noise_in_aggregate_has_the_group_variance_and_is_not_reproducible():
    spec = GroupSpec(method="gdpfed", sizes=(10, 10), q=(0.5, 0.5), noise_multiplier=(1.0, 2.0), k_ratio=(1.0, 1.0),
                     weight=(1.0, 1.0), clip=0.5)  # fmt: skip
    d = 200_000
    deltas = torch.zeros((3, d), dtype=torch.float64)
    a, _ = aggregate(deltas, [0, 0, 1], spec, SecureNoise())
    b, _ = aggregate(deltas, [0, 0, 1], spec, noise_source("secure", seed=0, rnd=0))
    assert float(a.var()) == pytest.approx(0.25 * (1.0 + 4.0), rel=0.03)
    assert not torch.equal(a, b)
    from hdp_planner_train.rules.noise_sources import group_noise

    for joined in (0, 1, 7):  # secure: the group's noise sum in one draw of its own law N(0, C²σ²)
        noise = group_noise(d, joined=joined, clip=1.5, noise_multiplier=0.8, source=SecureNoise(), device="cpu",
                            dtype=torch.float64)  # fmt: skip
        assert float(noise.var()) == pytest.approx(1.5**2 * 0.8**2, rel=0.03)
    x = SecureNoise().normal((3, 4), 2.0, "cpu", torch.float32)
    assert x.shape == (3, 4) and x.dtype == torch.float32
    with pytest.raises(ValueError):
        noise_source("urandom", seed=0, rnd=0)


# ------------------------------------------------------------------ clipping never exceeds the accounted C


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    d=st.integers(1, 3000),
    scale=st.floats(1e-3, 1e4),
    clip=st.floats(1e-3, 1e3),
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**31),
)
def test_clipped_rows_never_exceed_c(rows, d, scale, clip, dtype, seed):
    from hdp_planner_train.learning.dp_sgd import clip_per_example
    from hdp_planner_train.rules.clipping import clip_rows

    dt = getattr(torch, dtype)
    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
    x[0] *= clip / torch.linalg.vector_norm(x[0]) * (1 + 1e-7)  # a row right at the edge
    x = x.to(dt)
    out, count = clip_rows(x, clip)
    norms = torch.linalg.vector_norm(out.double(), dim=1)
    assert bool((norms <= clip).all()), float((norms / clip).max() - 1)
    before = torch.linalg.vector_norm(x.double(), dim=1)
    small = before <= clip
    torch.testing.assert_close(out[small], x[small], rtol=0, atol=0)  # within C: untouched
    assert bool((norms[~small] >= clip * (1 - 1e-5)).all()) and count == int((~small).sum())
    assert bool((torch.linalg.vector_norm(clip_per_example(x, clip).double(), dim=1) <= clip).all())


def test_float32_rows_clipped_naively_exceed_c_and_ours_do_not():
    """The review's finding: float64 norms, float32 scaling can leave ‖Δ‖ > C; clip_rows never does."""
    from hdp_planner.rules.noise import clip_factor
    from hdp_planner_train.rules.clipping import clip_rows

    x = torch.randn(2000, 5000, generator=torch.Generator().manual_seed(0)) * 3
    naive = (
        x
        * torch.as_tensor(clip_factor(torch.linalg.vector_norm(x.double(), dim=1).numpy(), 1.0), dtype=torch.float32)[
            :, None
        ]
    )
    assert float(torch.linalg.vector_norm(naive.double(), dim=1).max()) > 1.0
    assert float(torch.linalg.vector_norm(clip_rows(x, 1.0)[0].double(), dim=1).max()) <= 1.0


# ------------------------------------------------------------------ tampered plans never under-noise a client
#
# For random valid plans and random mutations of any numeric or list field of plan.json (optionally with every
# derived field repaired, so only the semantic checks can object), either the plan is rejected, or every
# client's ε, recomputed with dp-accounting's RdpAccountant (not our rdp.py) from the mechanism the trainer
# executes (method_spec, i.e. GroupSpec, read as aggregate() applies it), is within the client's budget.


N = 120  # the digits partition's client count, so train's own check accepts the plans
SETTINGS = {
    "three": dict(epsilons=[0.5, 1.5, 3.0], rounds=6, q=0.1),
    "two": dict(epsilons=[1.0, 4.0], rounds=4, q=0.2, sizes=[40, 80]),
}


@functools.cache
def base_document(name: str) -> str:
    """A solved plan with every baseline (RDP accountant, small T), as JSON text: solved once per session."""
    s = dict(SETTINGS[name])
    p = plan(s.pop("epsilons"), N, sizes=s.pop("sizes", None), clip=1.5, sparsity=None, **s)
    p = add_baselines(p, tuple(BASELINES.values()), BaselineOptions(model_dim=1000, pfa_dim=1, pfa_window=2))
    return json.dumps(plan_to_dict(p))


def client_budgets(doc: dict) -> np.ndarray:
    return np.repeat([g["epsilon"] for g in doc["groups"]], [g["size"] for g in doc["groups"]])


def _leaves(obj, path=()):
    """Paths of every number and every list in the document (the fields a mutation may change)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(obj, list):
        yield path
        for i, v in enumerate(obj):
            yield from _leaves(v, (*path, i))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path, value):
    _get(doc, path[:-1])[path[-1]] = value


PRIVACY_FIELDS = {"noise_multiplier", "q", "size", "schedule", "rounds", "clip", "delta", "epsilon", "n", "fixed_q"}
EXECUTED_FIELDS = {"noise_multiplier", "q", "schedule", "clip", "size"}
FACTORS = [0.0, -1.0, 0.3, 0.5, 0.9, 0.99, 0.999999, 1.01, 1.1, 2.0, 10.0]


@st.composite
def mutations(draw, doc: dict, focus: str | None = None):
    """One random change of a number, a list, or a whole method row (mostly of row ``focus`` when given)."""
    doc = copy.deepcopy(doc)
    kind = draw(st.sampled_from(["number", "number", "list", "row", "executed", "executed", "executed"]))
    if kind == "executed":  # one executed number of one row moved the dangerous way: σ_m or a phase's σ_m down,
        # q_m up, C_m down
        name = focus if focus is not None and draw(st.booleans()) else draw(st.sampled_from(sorted(doc["noise"])))
        entry = doc["noise"][name]
        fields = [k for k in ("noise_multiplier", "q", "clip") if k in entry]
        targets = [entry[k] for k in fields] + [ph["noise_multiplier"] for ph in entry.get("schedule", [])]
        values = draw(st.sampled_from(targets))
        i = draw(st.integers(0, len(values) - 1))
        if values is entry["q"]:
            values[i] = min(1.0, values[i] * draw(st.sampled_from([1.01, 1.1, 2.0, 10.0])))
        else:
            values[i] *= draw(st.sampled_from([0.3, 0.5, 0.9, 0.99]))
        return doc
    if kind == "row":
        names = sorted(doc["noise"])
        a, b = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if draw(st.booleans()):
            doc["noise"][a] = copy.deepcopy(doc["noise"][b])  # e.g. DP-FedAvg given GDPFed's three groups
        else:
            del doc["noise"][a]
        return doc
    paths = [p for p in _leaves(doc) if p and p[0] not in ("versions", "notes")]
    if draw(st.integers(0, 3)):  # mostly the fields privacy depends on; sometimes anything
        paths = [p for p in paths if set(p) & PRIVACY_FIELDS]
        if focus is not None and draw(st.integers(0, 3)):  # what the trainer executes of that row
            paths = [p for p in paths if p[:2] == ("noise", focus) and set(p) & EXECUTED_FIELDS] or paths
    if kind == "number":
        paths = [p for p in paths if not isinstance(_get(doc, p), list)]
        path = draw(st.sampled_from(paths))
        value = _get(doc, path)
        new = value * draw(st.sampled_from(FACTORS)) if draw(st.integers(0, 3)) else value + draw(st.integers(-2, 2))
        _set(doc, path, int(new) if isinstance(value, int) and float(new).is_integer() else new)
        return doc
    path = draw(st.sampled_from([p for p in paths if isinstance(_get(doc, p), list) and _get(doc, p)]))
    values = _get(doc, path)
    op = draw(st.sampled_from(["drop", "duplicate", "reverse", "swap-row"]))
    if op == "drop":
        values.pop(draw(st.integers(0, len(values) - 1)))
    elif op == "duplicate":
        values.append(copy.deepcopy(values[draw(st.integers(0, len(values) - 1))]))
    elif op == "reverse":
        values.reverse()
    elif path[0] == "noise" and len(path) == 3:  # the same field taken from another method's row
        other = draw(st.sampled_from(sorted(doc["noise"])))
        if path[2] in doc["noise"][other]:
            _set(doc, path, copy.deepcopy(doc["noise"][other][path[2]]))
    return doc


def repair(doc: dict) -> None:
    """Recompute every derived field (r, σ², ω, Λ, the groups table) so that only the semantic checks object."""
    try:
        clip = doc["config"]["clip"]
        for entry in doc["noise"].values():
            r = [q * s for q, s in zip(entry["q"], entry["size"])]
            entry["expected_clients"] = r
            entry["sigma2"] = [s * s for s in entry["noise_multiplier"]]
            entry["weight"] = list(pooled_weights(r) if entry.get("pooled") else aggregation_weights(r))
            clips = entry.get("clip", clip)
            rms = entry["noise_multiplier"]
            if "schedule" in entry:
                t = sum(ph["rounds"] for ph in entry["schedule"])
                rms = [
                    float(np.sqrt(sum(ph["rounds"] * ph["noise_multiplier"][g] ** 2 for ph in entry["schedule"]) / t))
                    for g in range(len(entry["size"]))
                ]
            pooled = bool(entry.get("pooled"))
            entry["lambda_exact"] = lambda_exact(entry["weight"], rms, entry["k_ratio"], clips, pooled)
            entry["lambda"] = entry["lambda_exact"]
        plus = doc["noise"]["GDPFed+"]
        plus["lambda"] = lambda_for(
            doc["config"]["lambda_convention"],
            row_paper_weights("GDPFed+"),
            expected_clients=plus["expected_clients"],
            weight=plus["weight"],
            noise_multiplier=plus["noise_multiplier"],
            k_ratio=plus["k_ratio"],
            clip=clip,
        )
        for name in ("DP-FedAvg", "GDPFed", "GDPFed-op"):
            e = doc["noise"][name]
            e["lambda"] = lambda_for(
                doc["config"]["lambda_convention"],
                row_paper_weights(name),
                expected_clients=e["expected_clients"],
                weight=e["weight"],
                noise_multiplier=e["noise_multiplier"],
                k_ratio=e["k_ratio"],
                clip=clip,
            )
        doc["groups"] = [
            {
                key: plus[key][i]
                for key in (
                    "epsilon",
                    "size",
                    "q",
                    "expected_clients",
                    "noise_multiplier",
                    "sigma2",
                    "k_ratio",
                    "weight",
                    "epsilon_spent",
                )
            }
            for i in range(len(plus["size"]))
        ]
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
        pass  # a mutation the repair cannot follow: the file stays as mutated


@functools.cache
def independent_epsilon(q: float, phases: tuple[tuple[int, float], ...], delta: float) -> float:
    """ε of Poisson(q)-sampled Gaussian rounds, phase by phase, by dp-accounting's RdpAccountant itself
    (memoized: most examples leave most rows unchanged)."""
    acc = dp_accounting.rdp.RdpAccountant()
    for rounds, sigma in phases:
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds)
    with quiet_dp_accounting():
        return acc.get_epsilon(delta)


def executed_phases(spec, group: int, rounds: int) -> list[tuple[int, float]]:
    """Group ``group``'s effective σ per round as aggregate() applies the spec: noise std (per group C_mσ_m, or
    the pool's one C_1σ_1) over the group's clip C_m, run-length encoded."""
    phases: list[tuple[int, float]] = []
    for r in range(rounds):
        sigma = spec.noise_at(r)
        std = spec.clips[0] * sigma[0] if spec.pooled else spec.clips[group] * sigma[group]
        eff = std / spec.clips[group]
        if phases and phases[-1][1] == eff:
            phases[-1] = (phases[-1][0] + 1, eff)
        else:
            phases.append((1, eff))
    return phases


def assert_within_budgets(spec, budgets: np.ndarray, rounds: int, delta: float) -> None:
    assert spec.n == len(budgets), "the trainer would run other clients than the plan's"
    for g, (offset, size, q) in enumerate(zip(spec.offsets, spec.sizes, spec.q)):
        eps = independent_epsilon(float(q), tuple(executed_phases(spec, g, rounds)), float(delta))
        budget = float(budgets[offset : offset + size].min())
        assert eps <= budget * (1 + 1e-6), f"{spec.method} group {g + 1}: ε = {eps:.6g} > budget {budget:g}"


def _write(tmp_path_factory, doc) -> str:
    path = tmp_path_factory.mktemp("tampered") / "plan.json"
    path.write_text(json.dumps(doc))
    return str(path)


PRIVATE_METHODS = [m for m in METHOD_NAMES if m != "p-fedavg"]
ONE_PER_ROW = list({METHOD_NAMES[m]: m for m in reversed(PRIVATE_METHODS)}.values())
"""One trainer method per plan row (the DP²-FedSAM family runs DP-FedAvg's row as dp-fedavg does)."""
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPOTHESIS
@given(data=st.data(), name=st.sampled_from(sorted(SETTINGS)), fix=st.integers(0, 3))
def test_a_tampered_plan_is_rejected_or_executes_within_every_budget(tmp_path_factory, data, name, fix):
    original = json.loads(base_document(name))
    doc = data.draw(mutations(original))
    if fix:
        repair(doc)
    try:
        p = load_plan(_write(tmp_path_factory, doc))
    except PlanFileError as exc:
        event(f"rejected by load_plan: {str(exc).split(':')[0]}")
        return
    if plan_problems(p):
        event("rejected by verify")
        return
    event("accepted")
    budgets, delta = client_budgets(original), original["config"]["delta"]
    for method in ONE_PER_ROW:
        if METHOD_NAMES[method] in {m.name for m in p.methods}:
            assert_within_budgets(method_spec(p, method), budgets, p.config.rounds, delta)


@HYPOTHESIS
@given(
    data=st.data(),
    name=st.sampled_from(sorted(SETTINGS)),
    fix=st.integers(0, 3),
    method=st.sampled_from(PRIVATE_METHODS),
)
def test_train_refuses_a_tampered_plan_or_executes_within_every_budget(tmp_path_factory, data, name, fix, method):
    """The trainer's own check before round 1 (no training): refuse, or the spec it returns is within budget."""
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, validate_config

    original = json.loads(base_document(name))
    doc = data.draw(mutations(original, METHOD_NAMES[method]))
    if fix:
        repair(doc)
    cfg = configure(TrainConfig, method=method, dataset="digits", progress=False)
    try:
        bound = validate_config(cfg, _write(tmp_path_factory, doc))
    except (TrainError, PlanFileError):
        return
    assert_within_budgets(bound.spec, client_budgets(original), bound.plan.config.rounds, original["config"]["delta"])


def test_the_independent_check_catches_finding_1():
    """The review's attack: DP-FedAvg given GDPFed's groups, group 1 at q = 1. ``verify`` flags the row; executed
    as written (the old trainer's spec) it would overspend, so the independent check above is not vacuous."""
    import dataclasses

    from hdp_planner.planfile.document import plan_from_dict

    p = plan_from_dict(json.loads(base_document("three")))
    q = p.config.q
    row = dataclasses.replace(p.method("GDPFed"), name="DP-FedAvg", q=(1.0, q, q))
    tampered = dataclasses.replace(p, methods=(row, *p.methods[1:]))
    assert any("DP-FedAvg: must be one group" in x for x in plan_problems(tampered))
    old_spec = GroupSpec(method="dp-fedavg", sizes=row.size, q=row.q, noise_multiplier=row.noise_multiplier,
                         k_ratio=row.k_ratio, weight=row.weight, clip=p.config.clip)  # fmt: skip
    with pytest.raises(AssertionError, match="group 1"):
        assert_within_budgets(
            old_spec, client_budgets(json.loads(base_document("three"))), p.config.rounds, p.config.delta
        )


# ------------------------------------------------------------------ secure vs seeded runs, diagnostics


@pytest.fixture(scope="module")
def digits_plan_file(tmp_path_factory):
    from hdp_planner import save_plan

    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan([0.5, 1.5, 3.0], n=N, rounds=4, q=0.2, clip=1.5), path)
    return path


DIAGNOSTICS = (
    "noise_lambda_measured",
    "noise_lambda_applied",
    "joined_per_round_mean",
    "round_seconds",
    "round_seconds_median",
)


def _train(plan_file, out, **kw):
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, run

    base = dict(dataset="digits", rounds=2, out=None if out is None else str(out), progress=False)
    return run(configure(TrainConfig, **{**base, **kw}), plan_file)


def test_secure_run_writes_no_membership_diagnostics_and_resumes(digits_plan_file, tmp_path):
    out = tmp_path / "secure"
    first = _train(digits_plan_file, out, rounds=1)  # --out: secure by default
    assert first["noise_source"] == "secure"
    resumed = _train(digits_plan_file, out, rounds=2, resume=True)
    doc = json.loads((out / "metrics.json").read_text())
    from hdp_planner_train.simulator.checkpoint import load as load_checkpoint

    state = load_checkpoint(out)
    assert doc["noise_source"] == "secure" and resumed["epsilon_spent"][0]["rounds"] == 2
    assert not set(DIAGNOSTICS) & set(doc) and "simulation_diagnostics" not in doc
    assert state["next_round"] == 2 and state["identity"]["noise_source"] == "secure"
    assert all(state[k] == [] for k in ("lambda_measured", "lambda_applied", "round_seconds", "joined"))
    with pytest.raises(ValueError, match="noise_source"):  # a secure checkpoint never continues seeded
        _train(digits_plan_file, out, rounds=2, resume=True, noise="seeded")
    again = _train(digits_plan_file, tmp_path / "again", rounds=1)
    assert again["history"] != first["history"]  # same seed, fresh noise and sampling


def test_seeded_run_is_labelled_a_simulation_and_keeps_its_diagnostics(digits_plan_file, tmp_path):
    a = _train(digits_plan_file, None)  # nothing leaves the process: seeded by default
    b = _train(digits_plan_file, tmp_path / "b", noise="seeded")
    assert a["noise_source"] == b["noise_source"] == "seeded" and "never release" in a["noise_note"]
    assert set(DIAGNOSTICS) <= set(b) and a["history"] == b["history"]


def test_cli_flags_and_the_seeded_warning(digits_plan_file, tmp_path):
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    args = ["train", str(digits_plan_file), "--dataset", "digits", "--rounds", "1"]
    seeded = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "s"), "--seeded-noise"])
    assert seeded.exit_code == 0, seeded.output
    assert "never release" in seeded.output and "Λ measured" in seeded.output
    secure = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "c")])
    assert secure.exit_code == 0 and "never release" not in secure.output and "Λ measured" not in secure.output
    assert json.loads((tmp_path / "c" / "metrics.json").read_text())["noise_source"] == "secure"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["noise"]["DP-FedAvg"]["q"].__setitem__(0, 0.3), "DP-FedAvg: q"),
        (lambda d: d["noise"]["DP-FedAvg"]["epsilon"].__setitem__(0, 1.5), "strictest"),
        (lambda d: d["noise"]["GDPFed"]["q"].__setitem__(1, 0.05), "GDPFed: every group"),
        (lambda d: d["noise"]["Time-adaptive"]["q"].__setitem__(0, 0.05), "Time-adaptive: every group"),
        (lambda d: d["noise"]["GDPFed+"]["noise_multiplier"].__setitem__(2, 9.0), "GDPFed-op's"),
        (lambda d: d["noise"]["IDP-FedAvg-Sample"]["noise_multiplier"].__setitem__(0, 9.0), "C_m·σ_m"),
    ],
)
def test_rows_must_match_their_method_definition(tmp_path, edit, message):
    """Consistent files (derived fields repaired) whose rows depart from their method are refused by the loader."""
    doc = json.loads(base_document("three"))
    edit(doc)
    repair(doc)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError, match=message):
        load_plan(path)
