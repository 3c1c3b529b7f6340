"""Option blocks: declared once, placed where the command declares ``groups``, built by keyword; the planning
request of ``solve``, ``sweep`` and ``compare``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import typer
from typer.testing import CliRunner

from hdp_planner_cli.option_blocks import REQUIRED, Opt, OptionBlock, option, with_groups
from hdp_planner_cli.options import CliError
from hdp_planner_cli.plan_options import PLAN, PlanRequest


@dataclass(frozen=True, kw_only=True)
class Pair:
    FLAT: ClassVar[dict[str, str]] = {"width": "w"}
    w: int = 1
    name: str = "x"


PAIR = OptionBlock(group=Pair, options={
    "width": Opt(option("--width", int, "Width."), REQUIRED),
    "name": Opt(option("--name", str, "Name."), "x"),
})  # fmt: skip


def command_app(block: OptionBlock, seen: dict[str, Any]) -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @with_groups(pair=block)
    def command(first: int = 0, *, groups: dict[str, Any], last: int = 0) -> None:
        seen.update(first=first, last=last, **groups)

    return app


def test_a_block_takes_the_place_of_groups_and_builds_its_group_by_field():
    seen: dict[str, Any] = {}
    app = command_app(PAIR, seen)
    done = CliRunner().invoke(app, ["--width", "3", "--last", "2"])
    assert done.exit_code == 0, done.output
    assert seen == {"first": 0, "last": 2, "pair": Pair(w=3)}
    help_text = CliRunner().invoke(app, ["--help"], terminal_width=200).output
    flags = [flag for flag in ("--first", "--width", "--name", "--last") if flag in help_text]
    assert sorted(flags, key=help_text.index) == ["--first", "--width", "--name", "--last"]
    assert CliRunner().invoke(app, []).exit_code == 2  # --width is required


def test_a_picked_block_changes_only_what_it_names():
    seen: dict[str, Any] = {}
    app = command_app(PAIR.pick("width", width=5), seen)
    assert CliRunner().invoke(app, []).exit_code == 0
    assert seen["pair"] == Pair(w=5)  # --name not taken: the group's default
    assert CliRunner().invoke(app, ["--name", "y"]).exit_code == 2


def test_the_planning_block_defaults_are_the_requests():
    request = PlanRequest()
    for name, opt in PLAN.options.items():
        assert opt.default == (REQUIRED if name in ("eps", "n") else getattr(request, name)), name


def test_a_plan_request_builds_its_groups_and_configuration():
    groups, config = PlanRequest(eps="1,2", n=100, rounds=7, sparsity="0.5,0.6", large_delta=True).build()
    assert (groups.epsilons, groups.sizes) == ((1.0, 2.0), (50, 50))
    assert (config.n, config.rounds, config.sparsity, config.large_delta) == (100, 7, (0.5, 0.6), True)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (PlanRequest(eps="2,1", n=100), "increasing order"),
        (PlanRequest(eps="1,2", n=100, fixed_q="0.1"), "--fixed-q has 1 values for 2 groups"),
        (PlanRequest(n=100), "give --eps and --n"),
    ],
)
def test_a_bad_plan_request_is_a_cli_error(request_, message):
    with pytest.raises(CliError, match=message):
        request_.build()
