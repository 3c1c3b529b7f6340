"""The options of the commands that train (``train``, ``compare``, ``flower``), declared once per option group
(:mod:`hdp_planner_train.run.options`) as option blocks (:class:`~hdp_planner_cli.option_blocks.OptionBlock`).

A command picks the options it takes and changes a default or a declaration where its meaning differs
(``compare --out`` is the grid's folder). Imports no trainer's torch or flwr: they load when a command runs.
"""

from __future__ import annotations

from hdp_planner_cli.option_blocks import Opt, OptionBlock, option
from hdp_planner_cli.options import (
    CohortMultiple,
    DatasetOpt,
    GroupsFile,
    HideSample,
    MaxCohort,
    ModelOpt,
    OverrideTrust,
)
from hdp_planner_train.run import options as run_options
from hdp_planner_train.simulator.options import PersonalOptions, SelectionOptions


def _noise_kind(secure: bool | None) -> str | None:
    return None if secure is None else ("secure" if secure else "seeded")


DATA = OptionBlock(group=run_options.DataOptions, options={
    "dataset": Opt(DatasetOpt, "fmnist"),
    "data_dir": Opt(option("--data-dir", str | None, "Where the dataset's files are.")),
    "clients": Opt(option("--clients", int | None, "Clients to split the data among (default: the paper's n).")),
    "dirichlet": Opt(option("--dirichlet", float | None,
                             "Dirichlet(α) label skew (default IID; natural for shakespeare).")),
    "shards": Opt(option("--shards", int | None,
                          "Pathological non-IID: S classes per client (N·S label-sorted shards).")),
    "iid_share": Opt(option("--iid-share", float | None,
                             "The selection paper's mix: share s in [0, 1] IID, the rest label-sorted.")),
    "group_classes": Opt(option("--group-classes", str | None, "Group-skewed labels: the classes of each plan group, "
                                 "e.g. 0,1,2,3/4,5,6/7,8,9 (per-group accuracy).")),
})  # fmt: skip
"""Which data, split how (:class:`~hdp_planner_train.run.options.DataOptions`)."""

MODEL = OptionBlock(group=run_options.ModelOptions, options={
    "model": Opt(ModelOpt),
    "engine": Opt(option("--engine", str, "vectorized (torch.func) | loop (reference)"), "vectorized"),
    "precision": Opt(option("--precision", str, "fp32 | bf16: the local forward only; updates, clipping, noise fp32."),
                     "fp32"),
    "batch_size": Opt(option("--batch-size", int | None, "Local batch (default per dataset).")),
    "momentum": Opt(option("--momentum", float | None, "Local SGD momentum (default per dataset).")),
    "lr_decay": Opt(option("--lr-decay", float, "Learning rate × decay^round."), 0.99),
    "weights": Opt(option("--weights", str, "plan | paper: the groups' weights, the plan's (a step of 1) or GDPFed "
                          "B.2's (1/qn)·r_m²/Σr² (a smaller step; post-processing, privacy unchanged)."), "plan"),
    "device": Opt(option("--device", str, "auto | cpu | cuda"), "auto"),
})  # fmt: skip
"""The model and its local optimisation (:class:`~hdp_planner_train.run.options.ModelOptions`)."""

NOISE = OptionBlock(group=run_options.NoiseOptions, options={
    "secure_noise": Opt(option(
        "--secure-noise/--seeded-noise", bool | None,
        "Noise and client sampling from the OS's CSPRNG (for models that are released), or reproducible from --seed "
        "(a simulation: never release its model; adds per-round diagnostics) [secure with --out, else seeded].",
    ), flat="noise", convert=_noise_kind),
    "dropout": Opt(option("--dropout", float, "secagg: probability that a sampled client drops out (simulated)."),
                   0.0),
})  # fmt: skip
"""The noise source and the simulated dropout (:class:`~hdp_planner_train.run.options.NoiseOptions`)."""

TRUST = OptionBlock(group=run_options.TrustOptions, options={
    "trust": Opt(option(
        "--trust", str | None,
        "server, or secagg: each group's sum through the exact integer pipeline of secure aggregation (distributed "
        "discrete Gaussian shares; needs a plan solved with --trust secagg) [the plan's].",
    )),
    "override_trust": Opt(OverrideTrust, False),
    "hide_sample": Opt(HideSample, False),
    "max_cohort": Opt(MaxCohort),
    "cohort_multiple": Opt(CohortMultiple),
    "sparse_graph": Opt(option(
        "--sparse-graph", bool,
        "secagg: each group's SecAgg+ shares keys with O(log c) neighbours instead of all c (rounds grow about as "
        "c^1.3, not c^2.4); every node accepts it. Only against an honest-but-curious server: the server draws the "
        "graph, and a malicious one could surround a client (see the trust model).",
    ), False),
})  # fmt: skip
"""Whom the clients trust (:class:`~hdp_planner_train.run.options.TrustOptions`)."""

AUDIT = OptionBlock(group=run_options.AuditOptions, options={
    "audit": Opt(option("--audit", bool,
                         "Insert canary clients; report an empirical ε per group beside the plan's."), False),
    "audit_canaries": Opt(option("--audit-canaries", int | None,
                                  "Canaries per group, half inserted on average [min(2000, d/M)].")),
})  # fmt: skip
"""The privacy audit (:class:`~hdp_planner_train.run.options.AuditOptions`)."""

LEDGER = OptionBlock(group=run_options.LedgerOptions, options={
    "ledger": Opt(option(
        "--ledger", str,
        "Privacy ledger charged round by round: an SQLAlchemy URL or SQLite file, none, or auto (the default ledger, "
        "$HDP_PLANNER_LEDGER or the user's, for secure runs on a user's --data-dir, --groups or --federation; none "
        "for seeded runs and for simulations of the bundled public datasets).",
    ), "auto"),
    "federation": Opt(option("--federation", str,
                              "A name the ledger records with the run (budgets are per client id)."), "simulation"),
    "groups": Opt(GroupsFile),
})  # fmt: skip
"""The privacy ledger charged (:class:`~hdp_planner_train.run.options.LedgerOptions`)."""

OUTPUT = OptionBlock(group=run_options.OutputOptions, options={
    "out": Opt(option("--out", str | None, "Folder for metrics.json/.csv, plot, checkpoint.")),
    "eval_every": Opt(option("--eval-every", int, "Evaluate every this many rounds."), 1),
    "plot": Opt(option("--plot", bool, "Write convergence.png to --out."), False),
    "resume": Opt(option("--resume", bool, "Continue from the checkpoint in --out."), False),
    "overwrite": Opt(option("--overwrite", bool, "Start over in an --out folder that holds an unfinished run."),
                     False),
})  # fmt: skip
"""What the run writes (:class:`~hdp_planner_train.run.options.OutputOptions`)."""

PERSONAL = OptionBlock(group=PersonalOptions, options={
    "rho": Opt(option("--rho", float | None, "SAM radius ρ for dp2-fedsam, dp-fedsam [0.1, the DP²-FedSAM paper].")),
    "head_steps": Opt(option("--head-steps", int | None,
                              "τ_h: head steps (dp2-fedsam, centaur), fine-tuning (dp-fedavg-ft) [τ].")),
})  # fmt: skip
"""The DP²-FedSAM family's options (:class:`~hdp_planner_train.simulator.options.PersonalOptions`)."""

SELECTION = OptionBlock(group=SelectionOptions, options={
    "noise_rule": Opt(option("--noise-rule", str | None,
                              "Selection methods: paper (its eqs. 6-7) | exact (RDP) [paper].")),
    "eta": Opt(option("--eta", float | None, "privacy-aware: Problem 1's weight η [1e5].")),
    "per_round": Opt(option("--clients-per-round", int | None,
                             "Selection methods: clients drawn per round K [round(q·n)].")),
    "candidates": Opt(option("--candidates", int | None, "power-of-choice: candidates d per round [2K].")),
})  # fmt: skip
"""The client-selection family's options (:class:`~hdp_planner_train.simulator.options.SelectionOptions`)."""
