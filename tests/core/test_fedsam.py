"""DP²-FedSAM (the DP²-FedSAM paper): client-level σ by the exact accountant against Theorem 2's closed form."""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from hdp_planner.accounting.calibration import GaussianRounds, epsilon_spent
from hdp_planner.methods.fedsam import ORDER_CONDITION, PAPER_RATE, PAPER_ROUNDS, PAPER_SETTINGS, fedsam_noise
from hdp_planner_cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("setting", PAPER_SETTINGS, ids=lambda s: f"N={s.clients},eps={s.epsilon:g}")
def test_exact_sigma_meets_epsilon_and_the_closed_form_is_several_times_looser(setting):
    r = fedsam_noise(setting.epsilon, delta=setting.delta)
    assert (r.sample_rate, r.rounds, r.delta) == (0.05, 200, 1 / setting.clients)
    spent = epsilon_spent(
        GaussianRounds(noise_multiplier=r.exact_sigma, q=PAPER_RATE, rounds=PAPER_ROUNDS), delta=setting.delta
    )
    assert 0.999 * setting.epsilon <= spent <= setting.epsilon  # exact: meets ε, and barely
    # Theorem 2 (eq. 26): σ² = 7r²T(ε + 2 log(1/δ))/ε²
    closed2 = 7 * 0.05**2 * 200 * (setting.epsilon + 2 * math.log(setting.clients)) / setting.epsilon**2
    assert r.closed_form_sigma == pytest.approx(math.sqrt(closed2), rel=1e-12)
    assert 2.6 < r.ratio < 3.3 and r.ratio**2 > 6.9  # measured: σ 2.64x-3.24x, σ² 7.0x-10.5x
    assert r.closed_form_epsilon < 0.27 * setting.epsilon  # the closed form spends a quarter of ε
    # Lemma 4's order condition fails at the paper's settings: Theorem 2 is not proved there
    assert r.unmet_conditions == (ORDER_CONDITION,)


def test_theorem2_conditions_can_hold_and_fail():
    assert fedsam_noise(10.0, delta=1e-5, sample_rate=0.01, rounds=100_000).unmet_conditions == ()
    assert "ε < 2 log(1/δ)" in fedsam_noise(30.0, delta=1e-5, sample_rate=0.01, rounds=100).unmet_conditions


def test_fedsam_noise_command():
    result = runner.invoke(app, ["fedsam-noise"])
    assert result.exit_code == 0, result.output
    for text in ("FEMNIST", "CIFAR-10 (1000,2)", "3.24x", "client-level"):
        assert text in result.output
    result = runner.invoke(app, ["fedsam-noise", "--eps", "1,4", "--clients", "1000", "--rounds", "100"])
    assert result.exit_code == 0 and "T=100" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--clients", "10"], "go with --eps"),
        (["--eps", "1"], "exactly one of"),
        (["--eps", "1", "--clients", "10", "--delta", "0.1"], "exactly one of"),
        (["--eps", "0", "--clients", "10"], "epsilon"),
        (["--eps", "x", "--clients", "10"], "not a number"),
        (["--eps", "1", "--clients", "0"], "--clients"),
        (["--eps", "1", "--delta", "2"], "delta"),
        (["--sample-rate", "0"], "q must"),
    ],
)
def test_bad_fedsam_noise_input_is_one_line(args, message):
    result = runner.invoke(app, ["fedsam-noise", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.stderr
