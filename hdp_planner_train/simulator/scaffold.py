"""The run scaffold every trainer family shares: the run's configuration and errors, its noise source, the privacy
ledger, checkpoints, progress, and metrics.json/.csv and the convergence plot (GDPFed Algorithm 2's bookkeeping).

Imports no trainer: the dispatcher (:mod:`.trainer`) and the method families (:mod:`.personal`,
:mod:`.private_selection`) import it.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hdp_planner.io.files import os_message, write_json_atomic, write_text_atomic
from hdp_planner.ledger.runs import (
    DEFAULT_LEDGER_ENV,
    default_ledger,
    distributed_costs,
    plan_clients,
    plan_digest,
    round_costs,
)
from hdp_planner.ledger.store import GroupRound, Ledger, LedgerError
from hdp_planner.planfile.document import read_document
from hdp_planner.planfile.mechanism import executed_mechanism, mechanism_epsilon, row_budgets
from hdp_planner_train.learning.models import model_name
from hdp_planner_train.rounds.loop import Evaluate, RunLog, Schedule, Step, run_rounds
from hdp_planner_train.rules.specs import METHOD_NAMES
from hdp_planner_train.run.options import (
    AuditOptions,
    DataOptions,
    LedgerOptions,
    ModelOptions,
    NoiseOptions,
    OutputOptions,
    TrustOptions,
    changed_fields,
)
from hdp_planner_train.simulator import checkpoint
from hdp_planner_train.simulator.checkpoint import CHECKPOINT
from hdp_planner_train.simulator.interrupts import HeldInterrupt
from hdp_planner_train.simulator.options import PersonalOptions, SelectionOptions


class TrainError(ValueError):
    """A setting the user can fix: reported as one line, exit status 2, nothing written."""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """A simulator run (``hdp-plan train``): ``method`` of the plan file ``plan`` for ``rounds`` rounds (None: the
    plan's T) from ``seed``, with the shared option groups (:mod:`hdp_planner_train.run.options`) and the trainer
    families' own options (:mod:`.options`). :func:`hdp_planner_train.api.train_config` builds one from flat
    keywords."""

    plan: str
    method: str = "gdpfed+"
    rounds: int | None = None
    seed: int = 0
    data: DataOptions = field(default_factory=DataOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    noise: NoiseOptions = field(default_factory=NoiseOptions)
    trust: TrustOptions = field(default_factory=TrustOptions)
    audit: AuditOptions = field(default_factory=AuditOptions)
    ledger: LedgerOptions = field(default_factory=LedgerOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    personal: PersonalOptions = field(default_factory=PersonalOptions)  # the DP²-FedSAM family's options
    selection: SelectionOptions = field(default_factory=SelectionOptions)  # the client-selection family's options

    def __repr__(self) -> str:
        """The settings that differ from their defaults (the plan and method always)."""
        return f"TrainConfig({changed_fields(self, ('plan', 'method'))})"


SEEDED_NOTE = (
    "seeded noise: a simulation. Anyone holding the seed regenerates every noise draw and who took part, and can "
    "subtract the noise from the model: never release a model trained with seeded noise"
)


SECURE_NOTE = (
    "secure noise: noise and client sampling from the OS's CSPRNG; per-round diagnostics (measured noise, joined "
    "counts, round times) are not recorded, as they reveal who took part"
)


def noise_kind(cfg: TrainConfig) -> str:
    """The run's noise source: ``cfg.noise.kind``, or secure whenever the run writes a model (``--out``), else
    seeded."""
    kind = cfg.noise.kind if cfg.noise.kind is not None else ("secure" if cfg.output.out else "seeded")
    if kind not in ("secure", "seeded"):
        raise TrainError(f"noise source must be secure or seeded, got {kind!r}")
    return kind


def planned_lambda(plan, spec) -> float:
    """The Λ the run's noise should have: the row's exact Λ, or under secure aggregation the trust object's."""
    if not spec.private:
        return 0.0
    if spec.secagg is not None and spec.secagg.planned_lambda is not None:
        return float(spec.secagg.planned_lambda)
    return plan.method(METHOD_NAMES[spec.method]).lambda_exact


def privacy_ledger(plan, spec, rounds_run: int) -> list[dict[str, Any]]:
    """ε spent per group after ``rounds_run`` rounds of the executed mechanism (the plan's spending accountant,
    or RDP composition of a σ schedule; under secure aggregation the distributed accounting of the trust object's
    z_m; δ of the plan), against the plan's budget for the group."""
    c = plan.config
    m = plan.method(METHOD_NAMES[spec.method])
    mech = executed_mechanism(m, c)
    ledger = []
    for i, budget in enumerate(row_budgets(plan, m)):
        entry: dict[str, Any] = {"group": i + 1, "epsilon_budget": budget, "rounds": rounds_run}
        if not spec.private:
            entry["epsilon_spent"] = None  # no noise: ε = ∞
        elif rounds_run == 0:
            entry["epsilon_spent"] = 0.0
        elif spec.secagg is not None and spec.secagg.cohorts is not None:
            from hdp_planner_train.rules.cohort import epsilon_spent

            entry["epsilon_spent"] = epsilon_spent(spec.secagg, i, rounds=rounds_run, delta=c.delta)
        elif spec.secagg is not None:
            from hdp_planner_train.rules.secagg import epsilon_third_parties_spent

            entry["epsilon_spent"] = epsilon_third_parties_spent(spec, i, rounds=rounds_run, delta=c.delta)
        else:
            entry["epsilon_spent"] = float(mechanism_epsilon(mech, i, rounds_run, c.delta, c.spending_accountant))
        ledger.append(entry)
    return ledger


PUBLIC_DATASETS = ("digits", "fmnist", "shakespeare")
"""Datasets the simulator reads from public copies installed on the machine when no ``--data-dir`` is given
(scikit-learn's digits, the ``dataset-fashion-mnist`` package, the ``shakespeare`` package's plays): their clients
are a split of public data, not people."""

SIMULATED_FEDERATION = "simulation"
"""The federation of the simulator's own clients 0..n−1 (``--federation``'s default)."""


def ledger_target(cfg: TrainConfig, secure: bool) -> tuple[str | None, str]:
    """The ledger a run charges (a URL or SQLite file, or None) and one line saying which and why.

    ``--ledger auto`` charges the default ledger for secure runs, except a simulation of public data: a dataset of
    :data:`PUBLIC_DATASETS` read from its installed copy, split into the simulated federation's clients, without
    ``--groups``. Its clients are not people, so no lifetime budget is spent (the run still reports its ε).
    A user's own data (``--data-dir``, ``--groups``), another ``--federation`` or an explicit ``--ledger`` charges."""
    target = cfg.ledger.url
    if target in (None, "", "none"):
        return None, "not charged: --ledger none"
    if target != "auto":
        return target, f"charged: federation {cfg.ledger.federation}"
    if not secure:
        return None, "not charged: seeded noise, a simulation whose model is never released"
    public = cfg.data.dataset in PUBLIC_DATASETS and cfg.data.data_dir is None and cfg.ledger.groups is None
    if public and cfg.ledger.federation == SIMULATED_FEDERATION:
        return None, (
            f"not charged: {cfg.data.dataset} is public data split into simulated clients, not people, so no lifetime "
            "budget is spent (--ledger PATH charges one; --data-dir, --groups or --federation charge the default)"
        )
    target = default_ledger()
    if target in ("", "none"):  # $HDP_PLANNER_LEDGER=none: no default ledger
        return None, f"not charged: ${DEFAULT_LEDGER_ENV}=none"
    return target, f"charged: the default ledger, federation {cfg.ledger.federation}"


def run_identity(cfg: TrainConfig, data, batch: int, momentum: float, **extra: Any) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: the plan's hash and every setting that changes the run."""
    return {
        "plan_sha256": hashlib.sha256(Path(cfg.plan).read_bytes()).hexdigest(),
        "method": cfg.method,
        "dataset": cfg.data.dataset,
        "model": model_name(cfg.data.dataset, cfg.model.name),
        "seed": cfg.seed,
        "dirichlet": cfg.data.dirichlet,
        "shards": cfg.data.shards,
        "iid_share": cfg.data.iid_share,
        **({"group_classes": cfg.data.group_classes} if cfg.data.group_classes is not None else {}),
        **({"precision": cfg.model.precision} if cfg.model.precision != "fp32" else {}),
        "clients": data.n_clients,
        "batch_size": batch,
        "momentum": momentum,
        "lr_decay": cfg.model.lr_decay,
        "noise_source": noise_kind(cfg),  # a seeded checkpoint never continues as a secure run, nor back
        **extra,
    }


FINISHED = "metrics.json"
"""The file a finished run leaves in its ``--out`` folder."""


def check_finished(cfg: TrainConfig) -> None:
    """Refuse an ``--out`` folder that holds a finished run (its metrics.json) unless ``--overwrite`` replaces it or
    ``--resume`` continues it: a rerun would silently replace its results."""
    output = cfg.output
    if output.out and (Path(output.out) / FINISHED).is_file() and not (output.overwrite or output.resume):
        raise TrainError(f"{output.out} holds a finished run ({FINISHED}): choose another --out, or replace it with "
                         "--overwrite")  # fmt: skip


@contextlib.contextmanager
def output_folder(out: str | os.PathLike[str] | None) -> Iterator[Path | None]:
    """The run's ``--out`` folder, created and checked writable before round 1 (a probe file written and removed),
    so that a folder the run cannot write fails before any training and any charge to the ledger. If the run fails
    or is interrupted before it writes anything there, the folders created for it are removed again."""
    if not out:
        yield None
        return
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise TrainError(f"--out {out} is not a directory")
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        _remove_empty(created)
        raise TrainError(os_message(exc, folder)) from None
    try:
        yield folder
    except BaseException:
        _remove_empty(created)
        raise


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            return


def resume_state(cfg: TrainConfig, identity: dict[str, Any], rounds: int) -> dict[str, Any] | None:
    """The checkpoint in ``cfg.output.out`` with ``--resume`` (refused if it was made with other settings), else None.
    Without ``--resume`` a folder holding an unfinished run (a checkpoint and no metrics.json) is refused unless
    ``--overwrite``: starting over would silently replace the rounds it already ran."""
    if not cfg.output.resume:
        folder = Path(cfg.output.out) if cfg.output.out else None
        unfinished = folder and (folder / CHECKPOINT).is_file() and not (folder / "metrics.json").is_file()
        if unfinished and not cfg.output.overwrite:
            raise TrainError(
                f"{folder} holds an unfinished run ({CHECKPOINT}, no metrics.json): continue it with --resume, "
                "or start over with --overwrite"
            )
        return None
    path = Path(cfg.output.out) / CHECKPOINT if cfg.output.out else None
    if path is None or not path.is_file():
        raise TrainError(f"--resume: no {CHECKPOINT} in {cfg.output.out}")
    try:
        state = checkpoint.load(path.parent)
    except checkpoint.CheckpointError as exc:
        raise TrainError(f"--resume: {exc}") from None
    diff = [k for k, v in identity.items() if state["identity"].get(k) != v]
    if diff:
        raise TrainError(f"--resume: the checkpoint in {cfg.output.out} was made with a different {', '.join(diff)}")
    if state["next_round"] > rounds:
        raise TrainError(f"--resume: the checkpoint already ran {state['next_round']} rounds > --rounds {rounds}")
    return state


class LedgerRun:
    """A run's account in the privacy ledger: its rounds reserved at the start, each released before it is applied,
    the unreleased ones given back at the end (:mod:`hdp_planner.ledger`), Ctrl-C held while they are."""

    def __init__(self, book: Ledger, run_id: str, start: int) -> None:
        self.book, self.run_id, self.start = book, run_id, start
        self.finished = False

    def release(self, rnd: int) -> None:
        try:
            self.book.release(self.run_id, rnd - self.start)
        except LedgerError as exc:
            raise TrainError(f"stopped before round {rnd + 1} was released: {exc}") from None

    def finish(self) -> None:
        """Give the unreleased rounds back (once; later calls do nothing), a Ctrl-C meanwhile raised after."""
        if self.finished:
            return
        self.finished = True
        held = HeldInterrupt()
        held.hold()
        try:
            with contextlib.suppress(LedgerError):  # a ledger that went away keeps the reservation: safe
                self.book.finish(self.run_id)
        finally:
            held.let_go()


class CheckpointedRelease:
    """A run's account whose every release holds Ctrl-C (:class:`HeldInterrupt`) until :meth:`checkpointed`: an
    interrupt never falls between a round charged in the ledger and the checkpoint that records it, so the ledger
    never holds more released rounds than the checkpoint and ``--resume`` continues."""

    def __init__(self, account, held: HeldInterrupt) -> None:
        self.account, self.held = account, held

    def release(self, rnd: int) -> None:
        self.held.hold()
        self.account.release(rnd)

    def finish(self) -> None:
        self.account.finish()

    def checkpointed(self, checkpoint: Callable[[], None]) -> Callable[[], None]:
        """``checkpoint``, then the Ctrl-C held since the release, if any."""

        def write() -> None:
            checkpoint()
            self.held.let_go()

        return write


NO_LEDGER_HINT = " (no ledger: --ledger none)"
TRAIN_REFUSAL_HINT = " (a simulation: --seeded-noise; no ledger: --ledger none)"


def ledger_run(
    cfg: TrainConfig, plan, spec, start: int, rounds: int, clients=None, secure: bool | None = None,
    supersedes: str | None = None, refusal_hint: str = TRAIN_REFUSAL_HINT,
) -> LedgerRun | None:  # fmt: skip
    """Open the run's account in the ledger (:func:`ledger_target`), refusing the run before round 1 if a client
    would exceed its lifetime budget.
    ``clients``: (membership, budgets) by client id; by default :func:`~hdp_planner.ledger.runs.plan_clients` of
    ``cfg.ledger.groups``. ``supersedes``: the ledger run a resumed run continues (its checkpoint's ``ledger_run``).
    ``refusal_hint``: the command's own ways around a refusal, appended to it."""
    secure = noise_kind(cfg) == "secure" if secure is None else secure
    target = ledger_target(cfg, secure)[0]
    if not spec.private or target is None:
        return None
    row = METHOD_NAMES[spec.method]
    if clients is None:
        try:
            clients = plan_clients(plan, row, read_document(cfg.plan), cfg.ledger.groups)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    membership, budgets = clients
    if len(membership) != spec.n:
        raise TrainError(f"the ledger needs the plan's {len(membership)} clients, the run has {spec.n}")
    try:
        if "://" not in target:
            Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
        book = Ledger(target)
        if supersedes is not None:
            check_released(book, supersedes, start)
        run_id = book.start_run(
            federation=cfg.ledger.federation, label=f"{cfg.method} {cfg.data.dataset} seed {cfg.seed}",
            plan_sha256=plan_digest(plan), membership=membership, budgets_of=budgets, delta=plan.config.delta,
            planned=planned_costs(plan, spec, row, start, rounds), start=start, supersedes=supersedes,
        )  # fmt: skip
    except LedgerError as exc:
        if "refused" in str(exc):  # a seeded run (compare's grid) charged all the same: no noise option helps
            hint = NO_LEDGER_HINT if noise_kind(cfg) == "seeded" else refusal_hint
            raise TrainError(f"{exc}{hint}") from None
        raise TrainError(str(exc)) from None
    except OSError as exc:
        raise TrainError(f"cannot create the privacy ledger {target}: {exc.strerror or exc}") from None
    return LedgerRun(book, run_id, start)


def check_released(book: Ledger, run_id: str, start: int) -> None:
    """Refuse to resume at round ``start`` a run whose ledger run ``run_id`` released rounds past it: its checkpoint
    is older than what was charged (put back, or the run was killed between a round's release and its checkpoint),
    and resuming would release more rounds than the metrics report."""
    run = book.state().runs.get(run_id)
    if run is not None and run.released_through > start:
        raise TrainError(
            f"--resume: the ledger {book.target} released {run.released_through} rounds of this run but its "
            f"checkpoint holds {start}: an older checkpoint, or a run killed between a round's release and its "
            "checkpoint; resuming would release more rounds than the metrics report: rerun with --overwrite"
        )


def planned_costs(plan, spec, row: str, start: int, rounds: int) -> list[list[GroupRound]]:
    """What rounds ``start``..``rounds``−1 cost each group: the plan's sampled Gaussian rounds, or, under secure
    aggregation, the trust object's distributed discrete Gaussian rounds (z_m, q_m, τ·d' of the group)."""
    if spec.secagg is None:
        return round_costs(plan, row, start=start, rounds=rounds)
    if spec.secagg.cohorts is not None:
        from hdp_planner_train.rules.cohort import cohort_costs

        return cohort_costs(spec.secagg, start=start, rounds=rounds)
    return distributed_costs(q=spec.q, noise_multipliers=spec.noise_multiplier, sizes=spec.sizes,
                             delta_costs=[law.event_rate for law in spec.secagg.laws],
                             model_dim=spec.secagg.model_dim, start=start, rounds=rounds)  # fmt: skip


def device_arrays(data, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test) of ``data`` as tensors on ``device``."""
    return tuple(torch.as_tensor(a, device=device) for a in (data.x_train, data.y_train, data.x_test, data.y_test))


def save_checkpoint(out: Path, identity, theta: torch.Tensor, log: RunLog, plan, spec, **extra: Any) -> None:
    """Write θ, the run log, the privacy ledger and ``extra`` as the run's authenticated checkpoint
    (:mod:`.checkpoint`)."""
    state = {
        "identity": identity,
        "theta": theta.cpu(),
        **asdict(log),
        "privacy_ledger": privacy_ledger(plan, spec, log.next_round) if spec.private else None,
        **extra,
    }
    checkpoint.save(out, state)


def global_evaluation(model, x_test: torch.Tensor, y_test: torch.Tensor) -> Callable[[int, float], dict[str, Any]]:
    """:func:`run_rounds`' ``evaluate`` for a global model: its accuracy and loss on the test split."""
    from hdp_planner_train.learning.engines import evaluate

    def entry(r: int, lr: float) -> dict[str, Any]:
        acc, loss = evaluate(model, x_test, y_test)
        return {"round": r + 1, "accuracy": acc, "loss": loss}

    return entry


def train_rounds(
    cfg: TrainConfig,
    plan,
    spec,
    rounds: int,
    log: RunLog,
    account,
    *,
    step: Step,
    evaluate: Evaluate,
    checkpoint: Callable[[], None] | None = None,
    describe: Callable[[int, dict[str, Any]], str] | None = None,
) -> None:
    """A simulator run's rounds: :func:`~hdp_planner_train.rounds.loop.run_rounds` on the schedule of ``cfg``
    (lr·decay^r, ``--eval-every``) with a progress bar whose line is ``describe(done, entry)``, by default the ε each
    group has spent (:func:`round_description`)."""
    schedule = Schedule(rounds, plan.config.lr, cfg.model.lr_decay, cfg.output.eval_every)
    progress = progress_bar(cfg.output.progress)
    task = progress.add_task("training", total=rounds, completed=log.next_round)
    if describe is None:

        def describe(done: int, entry: dict[str, Any]) -> str:
            return round_description(plan, spec, done, rounds, entry["accuracy"], entry["loss"])

    def report(done: int, entry: dict[str, Any] | None, stats, seconds: float) -> None:
        if entry is not None:
            progress.update(task, description=describe(done, entry))
        progress.update(task, completed=done)

    held = HeldInterrupt()
    if account is not None and checkpoint is not None:
        account = CheckpointedRelease(account, held)
        checkpoint = account.checkpointed(checkpoint)
    with progress, held:
        run_rounds(schedule, log, step=step, evaluate=evaluate, account=account, report=report, checkpoint=checkpoint)


def round_description(plan, spec, done: int, rounds: int, acc: float, loss: float) -> str:
    """The progress line: round, accuracy, loss and the ε each group has spent of its budget."""
    line = f"round {done}/{rounds} acc {acc:.2f}% loss {loss:.3f}"
    if not spec.private:
        return line + " (no noise: ε unbounded)"
    spent = privacy_ledger(plan, spec, done)
    return line + " ε spent/budget " + " ".join(f"{e['epsilon_spent']:.3g}/{e['epsilon_budget']:g}" for e in spent)


def base_metrics(cfg: TrainConfig, plan, spec, data, device, rounds: int, d: int, batch: int, momentum: float,
                 log: RunLog) -> dict[str, Any]:  # fmt: skip
    """The metrics every plan-noised method reports (settings, accuracy history, ε spent, Λ measured vs planned)."""
    c = plan.config
    return {
        "method": cfg.method,
        "plan_method": METHOD_NAMES[spec.method],
        "dataset": cfg.data.dataset,
        "model": model_name(cfg.data.dataset, cfg.model.name),
        "device": str(device),
        "precision": cfg.model.precision,
        "seed": cfg.seed,
        "rounds": rounds,
        "plan_rounds": c.rounds,
        "clients": data.n_clients,
        "d": d,
        "batch_size": batch,
        "momentum": momentum,
        "lr": c.lr,
        "lr_decay": cfg.model.lr_decay,
        "local_steps": c.local_steps,
        "epsilon_spent": privacy_ledger(plan, spec, rounds),
        "noise_source": noise_kind(cfg),
        "noise_note": SEEDED_NOTE if noise_kind(cfg) == "seeded" else SECURE_NOTE,
        "noise_lambda_planned": planned_lambda(plan, spec),
        "ledger": ledger_target(cfg, noise_kind(cfg) == "secure")[1] if spec.private else "not charged: no noise",
        **log.summary(),
    }


def progress_bar(enabled: bool, console=None):
    """The rounds' progress: the description (round, accuracy, loss, ε spent) on a line of its own, the bar, the
    rounds done, the time elapsed and the time left below it, so that an 80-column terminal cuts none of them."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class StackedProgress(Progress):
        def get_renderables(self):
            for task in self.tasks:
                if task.visible:
                    yield Text(task.description, style="bold", overflow="fold")
            yield self.make_tasks_table(self.tasks)

    return StackedProgress(
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )


def status(enabled: bool, text: str):
    """A spinner with ``text`` on stderr while a long step after the progress bar runs (nothing when disabled)."""
    if not enabled:
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(text)


def json_ready(value: Any) -> Any:
    """``value`` with every NaN or infinity as None (JSON null): a run whose loss diverged is still recorded."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def write_metrics(metrics: dict[str, Any], out: Path, plot: bool) -> None:
    """metrics.json (non-finite numbers as null, ``"diverged": true`` when the final loss is not finite), metrics.csv
    (``nan`` where the loss diverged) and, with ``plot``, the convergence figure."""
    loss = metrics.get("final_loss")
    diverged = {"diverged": True} if isinstance(loss, float) and not math.isfinite(loss) else {}
    write_json_atomic(out / "metrics.json", json_ready({**metrics, **diverged}))
    table = io.StringIO()
    w = csv.writer(table)
    w.writerow(["round", "accuracy", "loss"])
    for h in metrics["history"]:
        w.writerow([h["round"], f"{h['accuracy']:.4f}", f"{h['loss']:.6f}"])
    write_text_atomic(out / "metrics.csv", table.getvalue())
    if plot:
        plot_history(metrics, out / "convergence.png")


def plot_history(metrics: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hdp_planner.report.plots import round_ticks

    rounds = [h["round"] for h in metrics["history"]]
    audit = metrics.get("audit")
    fig, axes = plt.subplots(1, 3 if audit else 2, figsize=(15 if audit else 10, 4))
    a1, a2 = axes[0], axes[1]
    a1.plot(rounds, [h["accuracy"] for h in metrics["history"]], marker="o", ms=3)
    a1.set_xlabel("communication round")
    a1.set_ylabel("test accuracy (%)")
    a2.plot(rounds, [h["loss"] for h in metrics["history"]], marker="o", ms=3, color="C1")
    a2.set_xlabel("communication round")
    a2.set_ylabel("test loss (cross-entropy)")
    for ax in (a1, a2):
        round_ticks(ax)
    if audit:
        plot_audit(axes[2], audit["groups"])
    fig.suptitle(f"{metrics['method']} on {metrics['dataset']} (seed {metrics['seed']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_audit(ax, groups: list[dict[str, Any]]) -> None:
    """Planned ε beside the empirical ε (95% interval) and the one-run lower bound, per group."""
    x = np.arange(len(groups))
    ax.bar(x - 0.2, [g["epsilon_planned"] for g in groups], 0.4, color="C7", label="planned ε (accountant)")
    emp = [g["epsilon_empirical"] if g["epsilon_empirical"] is not None else np.nan for g in groups]
    err = [
        [e - g["epsilon_empirical_interval"][0], g["epsilon_empirical_interval"][1] - e]
        if g["epsilon_empirical_interval"] else [0.0, 0.0]
        for e, g in zip(emp, groups)
    ]  # fmt: skip
    ax.bar(x + 0.2, emp, 0.4, yerr=np.array(err).T, capsize=3, color="C2", label="empirical ε̂ (95% interval)")
    ax.plot(x, [g["epsilon_lower_bound"] for g in groups], "k_", ms=18, mew=2, ls="none", label="one-run lower bound")
    ax.set_xticks(x, [f"group {g['group']}" for g in groups])
    ax.set_ylabel("ε")
    ax.set_title("privacy audit (canaries)")
    ax.legend(frameon=False, fontsize=8)
