"""The planning options of ``solve``, ``sweep`` and ``compare``, declared once as the block :data:`PLAN`, and the
planning request they build (:class:`PlanRequest`) with its parser into the API's groups and configuration.

Imports nothing of the trainer: ``solve`` and ``sweep`` load neither torch nor flwr.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from hdp_planner.io.inputs import parse_floats, parse_ints
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import PlanConfig
from hdp_planner_cli.option_blocks import REQUIRED, Opt, OptionBlock
from hdp_planner_cli.options import (
    AccountantOpt,
    CliError,
    Clip,
    Delta,
    Eps,
    FixedQ,
    LambdaOpt,
    LocalSteps,
    Lr,
    N,
    Q,
    Rounds,
    SigmaModelOpt,
    Sizes,
    Sparsity,
)

_CONFIG = {f.name: f.default for f in fields(PlanConfig)}
"""The API's defaults, which the command line's are."""


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """A plan as the command line asks for it: the options of ``solve`` before they are parsed.

    ``eps``, ``sparsity`` and ``fixed_q`` are comma-separated lists, ``sizes`` one of whole numbers; the rest as
    :class:`~hdp_planner.planning.plan.PlanConfig` takes them, with its defaults.
    """

    eps: str | None = None
    n: int | None = None
    sizes: str | None = None
    rounds: int = _CONFIG["rounds"]
    q: float = _CONFIG["q"]
    delta: float | None = _CONFIG["delta"]
    clip: float = _CONFIG["clip"]
    lr: float = _CONFIG["lr"]
    local_steps: int = _CONFIG["local_steps"]
    sparsity: str | None = None
    fixed_q: str | None = None
    accountant: str = _CONFIG["accountant"]
    sigma_model: str = _CONFIG["sigma_model"]
    lambda_convention: str = _CONFIG["lambda_convention"]
    min_share: float = _CONFIG["min_share"]
    large_delta: bool = _CONFIG["large_delta"]

    def config(self, n: int) -> PlanConfig:
        """The API's configuration for ``n`` clients (``eps`` and ``sizes`` aside).

        Args:
            n: The number of clients (the request's own, or those of a budgets file).

        Returns:
            The validated configuration.
        """
        return PlanConfig(
            n=n,
            rounds=self.rounds,
            q=self.q,
            delta=self.delta,
            clip=self.clip,
            lr=self.lr,
            local_steps=self.local_steps,
            accountant=self.accountant,  # type: ignore[arg-type]
            sigma_model=self.sigma_model,  # type: ignore[arg-type]
            lambda_convention=self.lambda_convention,  # type: ignore[arg-type]
            sparsity=parse_floats(self.sparsity, "--sparsity"),
            fixed_q=parse_floats(self.fixed_q, "--fixed-q"),
            min_share=self.min_share,
            large_delta=self.large_delta,
        )

    def build(self) -> tuple[Groups, PlanConfig]:
        """The groups and the configuration of the request.

        Returns:
            The groups of ``eps`` and ``sizes`` (an even split of ``n`` without sizes) and the configuration.

        Raises:
            CliError: the budgets are not in increasing order, or a per-group option has a value too many or few.
        """
        if self.eps is None or self.n is None:
            raise CliError("give --eps and --n")
        groups = Groups.from_budgets(parse_floats(self.eps, "--eps") or (), self.n, parse_ints(self.sizes, "--sizes"))
        if not groups.canonical:
            raise CliError(f"--eps must be listed in increasing order (group 1 the strictest), got {self.eps}")
        config = self.config(self.n)
        check_group_count(config, groups.count)
        return groups, config

    def filled(self, defaults: dict[str, object]) -> PlanRequest:
        """The request with each option of ``defaults`` that was not given (``None``) set to its default there."""
        return replace(self, **{name: value for name, value in defaults.items() if getattr(self, name) is None})


def check_group_count(config: PlanConfig, count: int) -> None:
    """Per-group options must give one value per group."""
    for name, values in (("--sparsity", config.sparsity), ("--fixed-q", config.fixed_q)):
        if values is not None and len(values) != count:
            raise CliError(f"{name} has {len(values)} values for {count} groups")


_DEFAULTS = {f.name: f.default for f in fields(PlanRequest)}
PLAN = OptionBlock(group=PlanRequest, options={"eps": Opt(Eps, REQUIRED), "n": Opt(N, REQUIRED)} | {
    name: Opt(declared, _DEFAULTS[name]) for name, declared in {
        "sizes": Sizes, "rounds": Rounds, "q": Q, "delta": Delta, "clip": Clip, "lr": Lr, "local_steps": LocalSteps,
        "sparsity": Sparsity, "fixed_q": FixedQ, "accountant": AccountantOpt, "sigma_model": SigmaModelOpt,
        "lambda_convention": LambdaOpt,
    }.items()
})  # fmt: skip
"""The planning options (:class:`PlanRequest`), as ``sweep`` takes them: ``solve`` makes ``--eps`` and ``--n``
optional (``--budgets`` replaces them), ``compare`` defaults to the paper's settings for the dataset."""
