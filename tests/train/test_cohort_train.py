"""The simulator on a plan solved with ``--hide-sample``: public cohorts, private coins, the membership cap each
client enforces, dropouts, and the ledger charging the plan's ε against the server."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from hdp_planner.distributed.coins import admits, choose_cohort, flip  # noqa: E402
from hdp_planner.distributed.encoding import integer_message  # noqa: E402
from hdp_planner.distributed.randomness import SeededBits  # noqa: E402
from hdp_planner_cli.app import app  # noqa: E402
from hdp_planner_train.rules import cohort as cohort_rules  # noqa: E402
from hdp_planner_train.rules.secagg import group_sum, round_plan  # noqa: E402
from hdp_planner_train.run.options import configure  # noqa: E402
from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, run, validate_config  # noqa: E402

runner = CliRunner()
BUDGETS = (1.0, 2.0, 4.0)


def test_a_coin_is_heads_with_its_probability_and_never_above_it():
    bits = SeededBits(0)
    heads = sum(flip(0.3, bits) for _ in range(20000))
    assert abs(heads / 20000 - 0.3) < 5 * (0.3 * 0.7 / 20000) ** 0.5
    assert not any(flip(0.0, bits) for _ in range(100)) and all(flip(1.0, bits) for _ in range(100))
    with pytest.raises(ValueError):
        flip(1.5, bits)


def test_the_rotation_never_exceeds_the_cap_and_the_client_refuses_past_it():
    rng = np.random.default_rng(0)
    used = np.zeros(50, np.int64)
    for _ in range(7):  # T = 7 rounds of m = 15 from 50: K = ⌈7·15/50⌉ = 3
        used[choose_cohort(used, 15, rng)] += 1
    assert used.max() - used.min() <= 1 and used.max() <= 3 and used.sum() == 105
    assert admits(used=2, memberships=3, announced=15, cohort=15)
    assert not admits(used=3, memberships=3, announced=15, cohort=15)
    assert not admits(used=0, memberships=3, announced=14, cohort=15)  # a smaller cohort holds fewer honest shares


def test_tails_runs_the_same_steps_as_heads_and_contributes_zero(cohort_plan):
    """Same bits consumed, same size: the messages differ by exactly the rounded update, and the streams end equal."""
    secagg = validate_config(_cfg(None, noise="seeded"), cohort_plan).spec.secagg
    plan = round_plan(secagg, rnd=0, group=0)
    law = plan.law
    update = np.random.default_rng(1).normal(size=law.encoding.dim) * 0.1
    kw = dict(encoding=law.encoding, signs=plan.signs, share_sigma2=law.share_sigma2)
    heads_bits, tails_bits = SeededBits(7), SeededBits(7)
    heads = integer_message(update, bits=heads_bits, coin=1, **kw)
    tails = integer_message(update, bits=tails_bits, coin=0, **kw)
    assert heads.shape == tails.shape and heads.dtype == tails.dtype
    assert heads_bits.bytes(64) == tails_bits.bytes(64)  # tails drew every random number heads drew
    assert np.count_nonzero(heads - tails) > 0
    noise_only = integer_message(np.zeros_like(update), bits=SeededBits(7), coin=1, **kw)
    assert np.array_equal(tails, noise_only)  # tails is the noise share alone

    rows = torch.randn(law.threshold + 2, law.encoding.dim, dtype=torch.float64)
    rows = rows / rows.norm(dim=1, keepdim=True)
    coins = np.array([1, 0] * (rows.shape[0] // 2) + [1] * (rows.shape[0] % 2))
    y, error = group_sum(rows, spec=secagg, rnd=0, group=0, bits=SeededBits(3), dropouts=np.random.default_rng(0),
                         coins=coins)  # fmt: skip
    assert torch.allclose(y - error, (rows * torch.as_tensor(coins, dtype=rows.dtype)[:, None]).sum(0))


@pytest.fixture(scope="module")
def cohort_plan(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cohort-plan")
    path = folder / "plan.json"
    result = runner.invoke(
        app,
        [
            "solve",
            "--eps",
            "1,2,4",
            "--n",
            "120",
            "--rounds",
            "4",
            "--q",
            "0.3",
            "--clip",
            "1",
            "--trust",
            "secagg",
            "--model-dim",
            "2410",
            "--hide-sample",
            "-o",
            str(path),
        ],
    )
    assert result.exit_code == 0, result.output
    return path


def _cfg(out, **kw):
    return configure(
        TrainConfig,
        **{
            "method": "gdpfed+",
            "dataset": "digits",
            "out": None if out is None else str(out),
            "progress": False,
            "trust": "secagg",
            "ledger": "none",
            **kw,
        },
    )


def test_a_cohort_run_aggregates_the_named_cohorts_and_charges_the_planned_epsilon(cohort_plan, tmp_path):
    doc = json.loads(cohort_plan.read_text())
    row = doc["hidden_participation"]["rows"]["GDPFed+"]
    ledger = tmp_path / "ledger.db"
    metrics = run(_cfg(None, noise="seeded", ledger=str(ledger)), cohort_plan)
    trust = metrics["trust"]
    assert trust["hidden_participation"] and trust["cohort"] == row["cohort"] and trust["coin"] == row["coin"]
    assert trust["coins"].startswith("seeded")  # a simulation's coins, regenerated from the seed, and said so
    assert metrics["joined_per_round_mean"] == [float(m) for m in row["cohort"]]  # members, never the heads
    assert trust["epsilon_server"] == pytest.approx(row["epsilon_server"], rel=1e-9)
    assert all(e <= b * (1 + 1e-9) for e, b in zip(trust["epsilon_server"], BUDGETS))
    assert metrics["noise_lambda_planned"] == pytest.approx(row["lambda_cohort"])
    assert 0.5 < metrics["noise_lambda_measured"] / row["lambda_cohort"] < 1.5
    shown = runner.invoke(app, ["ledger", "show", str(cohort_plan), "--ledger", str(ledger), "--json"])
    assert shown.exit_code == 0, shown.output
    by_budget: dict[float, float] = {}
    for c in json.loads(shown.output):
        by_budget[c["epsilon_budget"]] = max(by_budget.get(c["epsilon_budget"], 0.0), c["epsilon_spent"])
    assert [by_budget[b] for b in BUDGETS] == pytest.approx(row["epsilon_server"], rel=1e-6)
    again = runner.invoke(app, ["train", str(cohort_plan), "--dataset", "digits", "--trust", "secagg", "--rounds",
                                "1", "--seeded-noise", "--ledger", str(ledger)])  # fmt: skip
    assert again.exit_code != 0 and "refused before round 1" in again.output


def test_dropouts_release_only_with_the_threshold(cohort_plan):
    metrics = run(_cfg(None, noise="seeded", dropout=0.3, rounds=2), cohort_plan)
    assert metrics["trust"]["group_rounds_withheld"] > 0  # 30% dropouts leave some cohorts below t = ⌈0.9·m⌉


def test_the_rules_cohorts_give_each_client_at_most_k_and_a_repeated_cohort_is_refused(cohort_plan):
    """An honest server names the rule's cohorts (here each the whole group of 40, K = 4): every cohort joins whole
    until its members' K, nobody after. A server that names its own choice every round (the same first m clients, of
    cohorts of 10 here) gets nobody, unless the rule drew it."""
    spec = validate_config(_cfg(None, noise="seeded"), cohort_plan).spec
    rule = cohort_rules.simulated_rule(spec.secagg, spec.sizes, "seeded", seed=0)
    used = [np.zeros(s, np.int64) for s in spec.sizes]
    joined = [cohort_rules.cohort_round(spec.secagg, spec.offsets, used, rule, r) for r in range(6)]
    for m, g in enumerate(spec.secagg.cohorts):
        assert g.cohort == spec.sizes[m] and used[m].max() == g.memberships == 4
        assert [len(r[m]) for r in joined] == [g.cohort] * 4 + [0, 0]
    spec = smaller_cohorts(spec, 10)
    rule = cohort_rules.simulated_rule(spec.secagg, spec.sizes, "seeded", seed=0)
    used = [np.zeros(s, np.int64) for s in spec.sizes]
    chosen = [np.arange(g.cohort) for g in spec.secagg.cohorts]
    for r in range(6):
        got = cohort_rules.cohort_round(spec.secagg, spec.offsets, used, rule, r, named=chosen)
        drawn = cohort_rules.named_cohorts(rule, r)
        assert [len(j) for j in got] == [g.cohort if np.array_equal(c, d) else 0
                                         for g, c, d in zip(spec.secagg.cohorts, chosen, drawn)]  # fmt: skip


def test_a_stacked_cohort_is_refused_by_its_members_and_releases_nothing(cohort_plan):
    """The server keeps a target in its cohort and fills the rest with clients of its choosing (its Sybils): the
    target and every other member see a run that is not the rule's cohort and refuse; the other groups go ahead
    (cohorts of 10 of each group's 40)."""
    spec = smaller_cohorts(validate_config(_cfg(None, noise="seeded"), cohort_plan).spec, 10)
    rule = cohort_rules.simulated_rule(spec.secagg, spec.sizes, "seeded", seed=1)
    honest = cohort_rules.named_cohorts(rule, 0)
    target, m = int(honest[0][0]), spec.secagg.cohorts[0].cohort
    sybils = [i for i in range(spec.sizes[0]) if i not in honest[0]][: m - 1]
    used = [np.zeros(s, np.int64) for s in spec.sizes]
    got = cohort_rules.cohort_round(spec.secagg, spec.offsets, used, rule, 0,
                                    named=[np.array([target, *sybils]), *honest[1:]])  # fmt: skip
    assert got[0].size == 0 and used[0].sum() == 0
    assert [len(j) for j in got[1:]] == [g.cohort for g in spec.secagg.cohorts[1:]]
    named = cohort_rules.client_ids(0, [target, *sybils])
    assert "whom the rule did not draw" in rule.refusal(client=named[0], group=0, rnd=1, members=named)


def smaller_cohorts(spec, cohort: int):
    """``spec`` with every group's cohort ``cohort`` (the members' checks only: not a plan's noise law)."""
    groups = tuple(dataclasses.replace(g, cohort=cohort) for g in spec.secagg.cohorts)
    return dataclasses.replace(spec, secagg=dataclasses.replace(spec.secagg, cohorts=groups))


def test_a_run_that_mixes_in_another_groups_clients_is_refused(cohort_plan):
    """A run of group 3's cohort with one member swapped for a client of group 1: the members refuse it."""
    spec = validate_config(_cfg(None, noise="seeded"), cohort_plan).spec
    rule = cohort_rules.simulated_rule(spec.secagg, spec.sizes, "seeded", seed=2)
    cohort = rule.cohort(group=2, rnd=1)
    mixed = [*cohort[1:], "0/0"]
    assert rule.run_refusal(group=2, rnd=1, members=cohort) is None
    assert rule.refusal(client=cohort[1], group=2, rnd=1, members=mixed) == (
        f"the run of group 3 in round 1 holds {len(cohort)} clients with client 0/0, whom the rule did not draw (the "
        f"cohort rule's has {len(cohort)})"
    )
    assert "not registered in group 3" in rule.refusal(client="0/0", group=2, rnd=1, members=mixed)


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"trust": "server"}, "--override-trust"),
        ({"method": "idp-fedavg-sample"}, "no"),
    ],
)
def test_bad_input_is_one_line(cohort_plan, kw, message):
    with pytest.raises(TrainError, match=message) as exc:
        validate_config(_cfg(None, noise="seeded", **kw), cohort_plan)
    assert "\n" not in str(exc.value)


@pytest.mark.slow
def test_compare_trains_the_grid_with_cohorts(tmp_path):
    out = tmp_path / "grid"
    result = runner.invoke(app, ["compare", "--dataset", "digits", "--methods", "gdpfed+", "--seeds", "1", "--rounds",
                                 "2", "--trust", "secagg", "--hide-sample", "--out", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    row = json.loads((out / "gdpfed+" / "seed0" / "run.json").read_text())
    hidden = json.loads((out / "plan.json").read_text())["hidden_participation"]["rows"]["GDPFed+"]
    assert row["hidden_participation"] and row["noise_lambda_planned"] == pytest.approx(hidden["lambda_cohort"])
    refused = runner.invoke(app, ["compare", "--dataset", "digits", "--hide-sample", "--out", str(tmp_path / "x")])
    assert refused.exit_code == 2 and "needs --trust secagg" in refused.output


@pytest.mark.slow
def test_a_resumed_run_keeps_every_clients_memberships(cohort_plan, tmp_path):
    """The checkpoint holds the clients' membership counts: one round then a resumed second equals two rounds."""
    whole = run(_cfg(tmp_path / "whole", noise="seeded", rounds=2), cohort_plan)
    run(_cfg(tmp_path / "split", noise="seeded", rounds=1), cohort_plan)
    resumed = run(_cfg(tmp_path / "split", noise="seeded", rounds=2, resume=True), cohort_plan)
    assert resumed["final_accuracy"] == whole["final_accuracy"]
    assert resumed["noise_lambda_measured"] == whole["noise_lambda_measured"]
