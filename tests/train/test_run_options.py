"""The option groups shared by train, compare and flower: flat keywords gathered into their groups, whole groups
merged with flat ones, and the command line's blocks built into the same groups."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hdp_planner_train.run.options import (
    AuditOptions,
    DataOptions,
    LedgerOptions,
    NoiseOptions,
    OutputOptions,
    TrustOptions,
    configure,
    gather_options,
)
from hdp_planner_train.simulator.options import PersonalOptions


def test_flat_keywords_go_into_their_groups():
    from hdp_planner_train.simulator.scaffold import TrainConfig

    cfg = configure(TrainConfig, dataset="digits", model="mlp", noise="seeded", audit=True,
                    audit_canaries=50, ledger="none", trust="secagg", override_trust=True, out="run", rho=0.05,
                    seed=3)  # fmt: skip
    assert cfg.data == DataOptions(dataset="digits") and cfg.model.name == "mlp" and cfg.seed == 3
    assert cfg.noise == NoiseOptions(kind="seeded") and cfg.audit == AuditOptions(enabled=True, canaries=50)
    assert cfg.trust == TrustOptions(kind="secagg", override=True) and cfg.ledger.url == "none"
    assert cfg.output == OutputOptions(out="run") and cfg.personal == PersonalOptions(rho=0.05)


def test_a_whole_group_is_merged_with_its_flat_keywords_and_a_flat_value_is_not_taken_for_a_group():
    from hdp_planner_train.simulator.scaffold import TrainConfig

    merged = gather_options(TrainConfig, {"audit": AuditOptions(canaries=9), "audit_canaries": 7, "clients": 60})
    assert merged == {"audit": AuditOptions(canaries=7), "data": DataOptions(clients=60)}
    assert gather_options(TrainConfig, {"audit": False, "method": "pfa"}) == {
        "audit": AuditOptions(enabled=False),
        "method": "pfa",
    }


def test_flat_keywords_start_from_the_configurations_own_defaults():
    """Flower's ledger records the federation ``flower`` unless told otherwise; compare's grid has no ledger."""
    from hdp_planner_flower.preparation import FlowerConfig
    from hdp_planner_train.simulator.compare import CompareConfig

    flower = configure(FlowerConfig, plan="p.json", ledger="none")
    assert flower.ledger == LedgerOptions(url="none", federation="flower")
    assert configure(FlowerConfig, plan="p.json").data.dataset == "digits"
    grid = configure(CompareConfig, methods=("gdpfed+",), seeds=1, resume=True)
    assert grid.ledger.url is None and grid.output == OutputOptions(out="runs/compare", eval_every=5, resume=True)


def test_configurations_take_keywords_only_and_are_frozen():
    from hdp_planner_train.simulator.scaffold import TrainConfig

    with pytest.raises(TypeError):
        TrainConfig("gdpfed+")  # type: ignore[misc]
    with pytest.raises(TypeError):
        DataOptions("digits")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig(method="gdpfed+").seed = 1  # type: ignore[misc]


def test_the_trust_kind_of_a_grid_is_its_plans():
    from hdp_planner.planning.trust import TrustedServer
    from hdp_planner_train.simulator.compare import CompareConfig

    with pytest.raises(ValueError, match="trust secagg but the plan's trust model is server"):
        CompareConfig(methods=("gdpfed+",), seeds=1, trust=TrustOptions(kind="secagg"), plan_trust=TrustedServer())


def test_a_command_receives_the_groups_built_from_its_option_blocks():
    from hdp_planner_cli.option_blocks import with_groups
    from hdp_planner_cli.run_options import AUDIT, DATA, NOISE, OUTPUT

    seen = {}
    app = typer.Typer()

    @app.command()
    @with_groups(data=DATA.pick("dataset", "clients", dataset="digits"), noise=NOISE, audit=AUDIT,
                 output=OUTPUT.pick("out"))  # fmt: skip
    def command(seed: int = 0, *, groups: dict[str, Any]):
        seen.update(seed=seed, **groups)

    done = CliRunner().invoke(app, ["--clients", "60", "--seeded-noise", "--audit", "--seed", "2"])
    assert done.exit_code == 0, done.output
    assert seen == {"seed": 2, "data": DataOptions(dataset="digits", clients=60), "noise": NoiseOptions(kind="seeded"),
                    "audit": AuditOptions(enabled=True), "output": OutputOptions()}  # fmt: skip
    assert CliRunner().invoke(app, ["--plot"]).exit_code == 2  # an option the block did not pick
