"""The options shared by ``hdp-plan``'s commands (names are a contract) and their parsers into the API's inputs.

Imports nothing of the CLI: every command module imports its option types from here.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

import click
import typer

from hdp_planner.methods.baselines import BaselineOptions, baseline_names, needing_model_dim


class CliError(Exception):
    """An error the user can fix: printed as one line, exit status 2."""


class WholeNumber(click.ParamType):
    """An integer, also written in scientific notation (``--n 1e8``); ``1.5`` is refused as not whole."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if not number.is_finite() or number != number.to_integral_value():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        return int(number)


N_HELP = "Total number of clients n (1e6 reads as 1000000)."
# Options of `solve`, defined once and shared by every command that plans (names are a contract).
PlanFile = Annotated[str, typer.Argument(help="A plan.json written by `hdp-plan solve`.")]
Eps = Annotated[str, typer.Option("--eps", help="Privacy budget ε of each group, comma-separated: 0.5,1.5,3.0.")]
N = Annotated[int, typer.Option("--n", help=N_HELP, click_type=WholeNumber())]
Sizes = Annotated[str | None, typer.Option("--sizes", help="Clients per group, comma-separated [even split of n].")]
Rounds = Annotated[int, typer.Option("--rounds", "-T", help="Training rounds T.")]
Q = Annotated[float, typer.Option("--q", help="Global expected participation ratio q (Σ r_m = qn).")]
Delta = Annotated[float | None, typer.Option("--delta", help="δ of (ε, δ)-DP [1/n^1.1].", show_default=False)]
Clip = Annotated[float, typer.Option("--clip", "-C", help="Clipping threshold C of client updates.")]
Lr = Annotated[float, typer.Option("--lr", help="Local learning rate η (enters μ4, μ5 and k_m).")]
LocalSteps = Annotated[int, typer.Option("--local-steps", help="Local SGD steps τ per round.")]
Sparsity = Annotated[
    str | None, typer.Option("--sparsity", help="Fixed k_m/d per group, e.g. 0.7,0.8,0.9 [Remark 3's closed form].")
]
FixedQ = Annotated[
    str | None, typer.Option("--fixed-q", help="Evaluate these per-group q_m instead of solving Problem 1.")
]
AccountantOpt = Annotated[
    str, typer.Option("--accountant", help="Calibration of the final σ_m: rdp | pld | ddg | closed-form (Theorem 1).")
]
SigmaModelOpt = Annotated[
    str,
    typer.Option(
        "--sigma-model",
        help="σ_m(q_m) in Problem 1: bound (Theorem 1, as Table 1) | accountant (RDP σ, Algorithm 1's noise).",
    ),
]
LambdaOpt = Annotated[
    str,
    typer.Option(
        "--lambda-convention",
        help="Λ: exact (per-coordinate noise of the applied update) | paper (Table 5's convention).",
    ),
]
# Options of the trust model (hdp_planner.distributed.trust), shared by `solve` and `compare`.
Bits = Annotated[int, typer.Option("--bits", help="secagg: bits b of the modular sum.")]
Survivors = Annotated[
    float, typer.Option("--survivors", help="secagg: fraction F of a group's sampled clients that must reply.")
]
Colluders = Annotated[
    int, typer.Option("--colluders", help="secagg: clients k that may pool their noise with the server.")
]
Participations = Annotated[
    int | None, typer.Option("--participations", help="secagg: rounds K a client takes part in at most [T].")
]
HideSample = Annotated[
    bool,
    typer.Option(
        "--hide-sample",
        help="secagg: hide who contributes from the server (public cohorts, private coins), so that every group's "
        "ε against the server is its budget.",
        show_default=False,
    ),
]
MaxCohort = Annotated[
    int | None, typer.Option("--max-cohort", help="--hide-sample: clients in a group's cohort at most [the group].")
]
CohortMultiple = Annotated[
    float | None,
    typer.Option(
        "--cohort-multiple",
        help="--hide-sample: a cohort is at most this many times its expected contributors [no cap].",
    ),
]
# Options of the baselines (GDPFed Section 2, B.2), shared by `solve` and `compare`.
ModelDim = Annotated[
    int | None, typer.Option("--model-dim", help="Parameters d of the model (PFA keeps k/d of the projected noise).")
]
PfaDim = Annotated[int, typer.Option("--pfa-dim", help="PFA: dimension k of the public subspace.")]
PfaWindow = Annotated[int, typer.Option("--pfa-window", help="PFA: latest public noisy sums spanning the subspace.")]
PfaSubspace = Annotated[str, typer.Option("--pfa-subspace", help="PFA: top-k subspace by lanczos | randomized SVD.")]
SavingRounds = Annotated[
    int | None,
    typer.Option("--saving-rounds", help="Time-adaptive: rounds that save budget [T/2].", show_default=False),
]
SavingNoise = Annotated[float, typer.Option("--saving-noise", help="Time-adaptive: σ multiplier while saving.")]
MinShare = Annotated[
    float,
    typer.Option(
        "--min-share",
        help="F in [0, 1]: every group's weight share α_m ≥ F·|G_m|/n (1 = proportional) for HDP-Pooled and "
        "Problem 1 (GDPFed-op/+, and the cohorts' search); the recommendation only considers rows that meet it "
        "(0: the paper's Problem 1).",
    ),
]


def build_baselines(
    *,
    methods: str | None,
    model_dim: int | None,
    pfa_dim: int,
    pfa_window: int,
    pfa_subspace: str,
    saving_rounds: int | None,
    saving_noise: float,
) -> tuple[tuple[str, ...], BaselineOptions]:
    """Validate ``--methods`` and the baselines' options (before anything is solved)."""
    names = baseline_names(methods.split(","), model_dim) if methods else ()
    needing = needing_model_dim(names)
    if needing and model_dim is None:
        raise CliError(f"{needing[0]} needs --model-dim: the model's parameter count d (fmnist's CNN: 26010)")
    options = BaselineOptions(pfa_dim=pfa_dim, pfa_window=pfa_window, pfa_subspace=pfa_subspace, model_dim=model_dim,
                              saving_rounds=saving_rounds, saving_noise=saving_noise)  # fmt: skip
    return names, options


Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite", help="Replace an earlier, different result in the files this command writes.", show_default=False
    ),
]
OVERWRITE_HINT = "--overwrite replaces it"
"""How the commands ask for an earlier, different result to be replaced (:mod:`hdp_planner.io.overwrite`)."""
GroupsFile = Annotated[
    str | None,
    typer.Option(
        "--groups",
        help="`hdp-plan assign --output` CSV: each client's group and budget (needed for a plan made from "
        "per-client budgets; the ledger charges these clients).",
    ),
]
OverrideTrust = Annotated[
    bool, typer.Option("--override-trust", help="Allow --trust server on a plan solved for --trust secagg.")
]
# Options shared by train and compare (names are a contract).
DatasetOpt = Annotated[str, typer.Option("--dataset", help="fmnist | digits | cifar10 | svhn | shakespeare")]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="mlp (digits) | cnn (fmnist default, d = 26,010) | cnn2-paper (fmnist, McMahan et al. 2017's "
        "2-layer CNN, d = 1,663,370) | cnn3 (svhn) | resnet18-gn (cifar10) | lstm (shakespeare) [the dataset's].",
    ),
]
