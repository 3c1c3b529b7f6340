"""A run's options in groups, shared by ``hdp-plan train`` (:class:`~hdp_planner_train.simulator.scaffold.
TrainConfig`), ``compare`` (:class:`~hdp_planner_train.simulator.compare.CompareConfig`) and ``flower``
(:class:`~hdp_planner_flower.preparation.FlowerConfig`): each configuration is a composition of these groups plus its
own few fields, so that an option is declared, validated and documented once.

The groups:

- :class:`DataOptions`: which data, split how among the clients (``--dataset``, ``--data-dir``, ``--clients``,
  ``--dirichlet``, ``--shards``, ``--iid-share``, ``--group-classes``);
- :class:`ModelOptions`: the model and its local optimisation (``--model``, ``--engine``, ``--precision``,
  ``--batch-size``, ``--momentum``, ``--lr-decay``, ``--device``; ``chunk``, clients per vectorized batch);
- :class:`NoiseOptions`: where the noise comes from (``--secure-noise/--seeded-noise``) and the simulated dropout of
  sampled clients under secure aggregation (``--dropout``);
- :class:`TrustOptions`: whom the clients trust (``--trust``, ``--override-trust``; compare's ``--hide-sample``,
  ``--max-cohort``, ``--cohort-multiple``; Flower's ``--sparse-graph``);
- :class:`AuditOptions`: the empirical privacy audit (``--audit``, ``--audit-canaries``);
- :class:`LedgerOptions`: the privacy ledger charged (``--ledger``, ``--federation``, ``--groups``);
- :class:`OutputOptions`: what the run writes and reports (``--out``, ``--plot``, ``--resume``, ``--overwrite``,
  ``--eval-every``; ``progress``, the progress bar).

A group's field is named for what it holds inside the group (``cfg.audit.enabled``); its flat keyword, the name
``hdp_planner_train.train`` takes and the command line spells, is the field's name unless the group's ``FLAT``
maps another (``audit`` → ``enabled``). :func:`gather_options` moves flat keywords into their groups.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, TypeVar

C = TypeVar("C")


def _default(f: Field) -> Any:
    return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]


def changed_fields(obj: Any, always: tuple[str, ...] = ()) -> str:
    """``name=value`` of the fields of the dataclass ``obj`` that differ from their defaults (``always`` too),
    comma-separated: a configuration's repr names only what was set."""
    shown = [f"{f.name}={getattr(obj, f.name)!r}" for f in fields(obj)
             if f.name in always or (f.default is MISSING and f.default_factory is MISSING)  # type: ignore[misc]
             or getattr(obj, f.name) != _default(f)]  # fmt: skip
    return ", ".join(shown)


class _Group:
    """An option group: its repr names the options that differ from their defaults."""

    FLAT: ClassVar[dict[str, str]] = {}
    """Flat keyword → field, where the two differ."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({changed_fields(self)})"


@dataclass(frozen=True, kw_only=True, repr=False)
class DataOptions(_Group):
    """Which data, split how among the clients.

    Args:
        dataset: fmnist, digits, cifar10, svhn or shakespeare.
        data_dir: Where the dataset's files are (None: the installed public copy).
        clients: The clients to split it among (None: the paper's n).
        dirichlet: Dirichlet(α) label skew (None: IID; natural for shakespeare).
        shards: Pathological non-IID: S classes per client.
        iid_share: The selection paper's mix: a share s IID, the rest label-sorted.
        group_classes: Group-skewed labels, the classes of each plan group ("0,1,2,3/4,5,6/7,8,9").
    """

    dataset: str = "fmnist"
    data_dir: str | None = None
    clients: int | None = None
    dirichlet: float | None = None
    shards: int | None = None
    iid_share: float | None = None
    group_classes: str | None = None


@dataclass(frozen=True, kw_only=True, repr=False)
class ModelOptions(_Group):
    """The model and its local optimisation.

    Args:
        name: A ``models.MODELS`` name (None: the dataset's default); flat keyword ``model``.
        engine: vectorized (torch.func) or loop (the reference).
        precision: Of the local forward pass, fp32 or bf16 (updates, clipping and noise stay float32).
        batch_size: Local SGD's batch (None: the dataset's).
        momentum: Local SGD's momentum (None: the dataset's).
        lr_decay: The learning rate's factor per round.
        weights: The groups' aggregation weights: plan (the plan's ω_m, a step of 1) or paper (GDPFed B.2's,
            :func:`hdp_planner.rules.noise.paper_aggregation_weights`).
        chunk: Clients per vectorized batch (None: all).
        device: auto, cpu or cuda.
    """

    FLAT: ClassVar[dict[str, str]] = {"model": "name"}

    name: str | None = None
    engine: str = "vectorized"
    precision: str = "fp32"
    batch_size: int | None = None
    momentum: float | None = None
    lr_decay: float = 0.99
    weights: str = "plan"
    chunk: int | None = None
    device: str = "auto"


@dataclass(frozen=True, kw_only=True, repr=False)
class NoiseOptions(_Group):
    """Where the noise comes from.

    Args:
        kind: secure (the OS's CSPRNG) or seeded (reproducible from the seed: a simulation whose model is never
            released); None: secure when the run writes a model (``out``), else seeded. Flat keyword ``noise``.
        dropout: Under secure aggregation, the probability that a sampled client drops out before the sum
            (simulated).
    """

    FLAT: ClassVar[dict[str, str]] = {"noise": "kind"}

    kind: str | None = None
    dropout: float = 0.0


@dataclass(frozen=True, kw_only=True, repr=False)
class TrustOptions(_Group):
    """Whom the clients trust.

    Args:
        kind: server (a trusted server adds the noise) or secagg (each group's sum through the exact integer pipeline
            of secure aggregation); None: the plan's. Flat keyword ``trust``.
        override: Allow server on a plan solved for secagg. Flat keyword ``override_trust``.
        hide_sample: Planning under secagg (compare): public cohorts and private coins.
        max_cohort: Planning with ``hide_sample``: clients in a cohort at most.
        cohort_multiple: Planning with ``hide_sample``: a cohort at most this many times its expected contributors.
        sparse_graph: On Flower, SecAgg+ over the neighbour rule's sparse graph (an honest-but-curious server).
    """

    FLAT: ClassVar[dict[str, str]] = {"trust": "kind", "override_trust": "override"}

    kind: str | None = None
    override: bool = False
    hide_sample: bool = False
    max_cohort: int | None = None
    cohort_multiple: float | None = None
    sparse_graph: bool = False


@dataclass(frozen=True, kw_only=True, repr=False)
class AuditOptions(_Group):
    """The privacy audit (:mod:`hdp_planner.audit`).

    Args:
        enabled: Insert canary clients and report an empirical ε per group. Flat keyword ``audit``.
        canaries: Canaries per group, in and out together (None: min(2000, ⌊d/M⌋)). Flat keyword
            ``audit_canaries``.
    """

    FLAT: ClassVar[dict[str, str]] = {"audit": "enabled", "audit_canaries": "canaries"}

    enabled: bool = False
    canaries: int | None = None


@dataclass(frozen=True, kw_only=True, repr=False)
class LedgerOptions(_Group):
    """The privacy ledger (:mod:`hdp_planner.ledger`).

    Args:
        url: An SQLAlchemy URL or SQLite file, none, or auto (the default ledger where the run charges one;
            ``ledger_target`` says when). Flat keyword ``ledger``.
        federation: A name the ledger records with the run (budgets are per client id).
        groups: ``hdp-plan assign``'s file: the clients the ledger charges, each with its own budget.
    """

    FLAT: ClassVar[dict[str, str]] = {"ledger": "url"}

    url: str | None = "auto"
    federation: str = "simulation"
    groups: str | None = None


@dataclass(frozen=True, kw_only=True, repr=False)
class OutputOptions(_Group):
    """What the run writes and reports.

    Args:
        out: The folder of metrics.json/.csv, the plot and checkpoints (None: nothing written).
        plot: Write the convergence figure.
        resume: Continue from the checkpoint in ``out``.
        overwrite: Start over in a folder that holds a run.
        eval_every: Rounds between evaluations.
        progress: Show the progress bar.
    """

    out: str | None = None
    plot: bool = False
    resume: bool = False
    overwrite: bool = False
    eval_every: int = 1
    progress: bool = True


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """What every run of a plan takes, in the simulator (:class:`~hdp_planner_train.simulator.scaffold.TrainConfig`)
    and on Flower (:class:`~hdp_planner_flower.preparation.FlowerConfig`), each adding its own fields.

    Args:
        method: A ``--method`` key of the plan.
        rounds: Rounds to run (None: the plan's T).
        seed: The run's seed (data split, initial model; the noise too where it is seeded).
        data: Which data, split how.
        trust: Whom the clients trust (the plan's trust model unless asked).
        audit: The privacy audit.
        ledger: The privacy ledger charged.
        output: What the run writes and reports.
    """

    method: str = "gdpfed+"
    rounds: int | None = None
    seed: int = 0
    data: DataOptions = field(default_factory=DataOptions)
    trust: TrustOptions = field(default_factory=TrustOptions)
    audit: AuditOptions = field(default_factory=AuditOptions)
    ledger: LedgerOptions = field(default_factory=LedgerOptions)
    output: OutputOptions = field(default_factory=OutputOptions)


def flat_names(group: type) -> dict[str, str]:
    """Flat keyword → field of the options group (or family options class) ``group``."""
    by_field = {field: flat for flat, field in getattr(group, "FLAT", {}).items()}
    return {by_field.get(f.name, f.name): f.name for f in fields(group)}


def gather_options(config: type, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for the configuration class ``config`` with every flat keyword moved into its group
    (``dataset="digits"`` → ``data=DataOptions(dataset="digits")``, ``rho=0.05`` →
    ``personal=PersonalOptions(rho=0.05)``), merged into a group given whole, or else into the configuration's
    default group. A keyword that is a group's field name and a flat option (``audit``, ``model``, …) is the whole
    group when its value is one, else the flat option. Keywords of no group are left as they are."""
    out = dict(options)
    for f in fields(config):
        group = type(_default(f)) if f.default_factory is not MISSING else None  # type: ignore[misc]
        if group is None or not is_dataclass(group):
            continue
        whole = out.pop(f.name) if isinstance(out.get(f.name), group) else None
        loose = {field: out.pop(flat) for flat, field in flat_names(group).items() if flat in out}
        if whole is not None or loose:
            out[f.name] = replace(whole if whole is not None else _default(f), **loose)
    return out


def configure(config: type[C], **options: Any) -> C:
    """An instance of the configuration class ``config`` from its own fields and its groups' options, flat or whole
    (:func:`gather_options`): ``configure(TrainConfig, method="gdpfed+", dataset="digits", audit=True)``."""
    return config(**gather_options(config, options))
