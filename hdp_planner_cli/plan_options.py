"""The planning options of ``solve``, ``sweep`` and ``compare``, declared once as the block :data:`PLAN`, and the
planning request they build (:class:`PlanRequest`) with its parser into the API's groups and configuration; the
baselines' options (:data:`BASELINES`, :class:`BaselineRequest`) and the trust model's (:data:`TRUST`,
:class:`TrustRequest`).

Imports nothing of the trainer: ``solve`` and ``sweep`` load neither torch nor flwr.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from hdp_planner.io.inputs import parse_floats, parse_ints
from hdp_planner.methods.baselines import needing_model_dim
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.grouping import Groups
from hdp_planner.planning.plan import Trust
from hdp_planner.planning.trust import CohortCaps, SecaggParameters
from hdp_planner.trust.registry import DEFAULT_TRUST, requested_trust
from hdp_planner_cli.option_blocks import REQUIRED, Opt, OptionBlock, option
from hdp_planner_cli.options import (
    AccountantOpt,
    Bits,
    CliError,
    Clip,
    CohortMultiple,
    Colluders,
    Delta,
    Eps,
    FixedQ,
    HideSample,
    LambdaOpt,
    LocalSteps,
    Lr,
    MaxCohort,
    MinShare,
    ModelDim,
    N,
    Participations,
    PfaDim,
    PfaSubspace,
    PfaWindow,
    Q,
    Rounds,
    SavingNoise,
    SavingRounds,
    SigmaModelOpt,
    Sizes,
    Sparsity,
    Survivors,
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
        "lambda_convention": LambdaOpt, "min_share": MinShare,
    }.items()
})  # fmt: skip
"""The planning options (:class:`PlanRequest`), as ``sweep`` takes them: ``solve`` makes ``--eps`` and ``--n``
optional (``--budgets`` replaces them), ``compare`` defaults to the paper's settings for the dataset."""


@dataclass(frozen=True, kw_only=True)
class BaselineRequest:
    """The baselines ``solve`` adds, as the command line asks for them: ``methods`` (comma-separated command-line
    names, or ``all``) and their options."""

    methods: str | None = None
    model_dim: int | None = None
    pfa_dim: int = 1
    pfa_window: int = 10
    pfa_subspace: str = "lanczos"
    saving_rounds: int | None = None
    saving_noise: float = 2.0

    @property
    def every(self) -> bool:
        """Whether ``--methods all`` asks for every client-level row."""
        return "all" in {x.strip().lower() for x in (self.methods or "").split(",")}

    def build(self) -> tuple[tuple[str, ...], BaselineOptions]:
        """The plan names of the baselines and their options, validated before anything is solved."""
        from hdp_planner.methods.baselines import baseline_names

        names = baseline_names(self.methods.split(","), self.model_dim) if self.methods else ()
        needing = needing_model_dim(names)
        if needing and self.model_dim is None:
            raise CliError(f"{needing[0]} needs --model-dim: the model's parameter count d (fmnist's CNN: 26010)")
        options = BaselineOptions(pfa_dim=self.pfa_dim, pfa_window=self.pfa_window, pfa_subspace=self.pfa_subspace,
                                  model_dim=self.model_dim, saving_rounds=self.saving_rounds,
                                  saving_noise=self.saving_noise)  # fmt: skip
        return names, options


BASELINES = OptionBlock(group=BaselineRequest, options={
    "methods": Opt(option(
        "--methods", str | None,
        "Also plan baselines: pfa,idp-fedavg-sample,idp-fedavg-scale,time-adaptive,hdp-pooled, or all (every "
        "client-level row; PFA when --model-dim is given).",
    )),
    "model_dim": Opt(ModelDim), "pfa_dim": Opt(PfaDim, 1), "pfa_window": Opt(PfaWindow, 10),
    "pfa_subspace": Opt(PfaSubspace, "lanczos"), "saving_rounds": Opt(SavingRounds),
    "saving_noise": Opt(SavingNoise, 2.0),
})  # fmt: skip
"""The baselines and their options (:class:`BaselineRequest`)."""


@dataclass(frozen=True, kw_only=True)
class TrustRequest:
    """The trust model a plan is solved for, as the command line asks for it: its name (``--trust``), secure
    aggregation's parameters and the cohorts' caps with ``--hide-sample``."""

    trust: str = DEFAULT_TRUST
    bits: int = 20
    survivors: float = 0.9
    colluders: int = 0
    participations: int | None = None
    hide_sample: bool = False
    max_cohort: int | None = None
    cohort_multiple: float | None = None

    def requested(self, model_dim: int | None) -> Trust:
        """The trust model for a model of ``model_dim`` parameters (ValueError or CliError, one line)."""
        if (self.max_cohort is not None or self.cohort_multiple is not None) and not self.hide_sample:
            raise CliError("--max-cohort and --cohort-multiple need --hide-sample")
        parameters = SecaggParameters(bits=self.bits, survivors=self.survivors, colluders=self.colluders,
                                      participations=self.participations, model_dim=model_dim)  # fmt: skip
        caps = CohortCaps(max_cohort=self.max_cohort, max_multiple=self.cohort_multiple) if self.hide_sample else None
        return requested_trust(self.trust, parameters, caps)


TRUST = OptionBlock(group=TrustRequest, options={
    "trust": Opt(option(
        "--trust", str,
        "Who sees individual updates: server (trusted with them) or secagg (secure aggregation with distributed "
        "discrete Gaussian noise; needs --model-dim).",
    ), DEFAULT_TRUST),
    "bits": Opt(Bits, 20), "survivors": Opt(Survivors, 0.9), "colluders": Opt(Colluders, 0),
    "participations": Opt(Participations), "hide_sample": Opt(HideSample, False), "max_cohort": Opt(MaxCohort),
    "cohort_multiple": Opt(CohortMultiple),
})  # fmt: skip
"""The trust model ``solve`` plans for (:class:`TrustRequest`)."""
