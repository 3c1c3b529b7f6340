"""A run's privacy: ε spent per group by the rounds run, and its account in the privacy ledger (which ledger is
charged, the rounds reserved before round 1, each released before it is applied)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hdp_planner.ledger.runs import DEFAULT_LEDGER_ENV, default_ledger, plan_clients, plan_digest
from hdp_planner.ledger.store import GroupRound, Ledger, LedgerError
from hdp_planner_train.rules.specs import METHOD_NAMES
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.interrupts import HeldInterrupt
from hdp_planner_train.run.noise import noise_kind
from hdp_planner_train.run.options import RunConfig
from hdp_planner_train.run.settings import RunSettings

if TYPE_CHECKING:
    from hdp_planner_train.run.bound import BoundRun


def privacy_ledger(plan, spec, rounds_run: int) -> list[dict[str, Any]]:
    """ε spent per group after ``rounds_run`` rounds of the method's row as the run's trust model executes it
    (:meth:`~hdp_planner.planning.plan.Trust.epsilon_spent`: the plan's spending accountant, RDP composition of a σ
    schedule, or the distributed accounting of secure aggregation; δ of the plan), against the plan's budget for the
    group."""
    m = plan.method(METHOD_NAMES[spec.method])
    ledger = []
    for i, budget in enumerate(plan.row_budgets(m)):
        entry: dict[str, Any] = {"group": i + 1, "epsilon_budget": budget, "rounds": rounds_run}
        if not spec.private:
            entry["epsilon_spent"] = None  # no noise: ε = ∞
        elif rounds_run == 0:
            entry["epsilon_spent"] = 0.0
        else:
            entry["epsilon_spent"] = float(spec.trust.epsilon_spent(m, plan.config, group=i, rounds=rounds_run))
        ledger.append(entry)
    return ledger


PUBLIC_DATASETS = ("digits", "fmnist", "shakespeare")
"""Datasets the simulator reads from public copies installed on the machine when no ``--data-dir`` is given
(scikit-learn's digits, the ``dataset-fashion-mnist`` package, the ``shakespeare`` package's plays): their clients
are a split of public data, not people."""


SIMULATED_FEDERATION = "simulation"
"""The federation of the simulator's own clients 0..n−1 (``train``'s and ``compare``'s ``--federation`` default)."""


SIMULATED_FEDERATIONS = (SIMULATED_FEDERATION, "flower")
"""The federation names the commands give their simulated clients by default (``flower``: ``hdp-plan flower``'s
virtual nodes, ``deploy local``'s SuperNodes, a ``flwr run`` of the bundled apps)."""


def public_simulation(cfg: RunConfig) -> bool:
    """Whether the run's clients are a split of public data, not people: a dataset of :data:`PUBLIC_DATASETS` read
    from its installed copy, split into a command's own simulated clients (ids 0..n−1, no ``--groups``, the
    command's federation name). One rule for ``train``, ``compare``, ``flower`` and ``deploy``."""
    return (
        cfg.data.dataset in PUBLIC_DATASETS
        and cfg.data.data_dir is None
        and cfg.ledger.groups is None
        and cfg.ledger.federation in SIMULATED_FEDERATIONS
    )


def ledger_target(cfg: RunSettings, secure: bool) -> tuple[str | None, str]:
    """The ledger a run charges (a URL or SQLite file, or None) and one line saying which and why.

    ``--ledger auto`` charges the default ledger for secure runs, except a simulation of public data
    (:func:`public_simulation`): its clients are not people, so no lifetime budget is spent (the run still reports
    its ε). A user's own data (``--data-dir``, ``--groups``), another ``--federation`` or an explicit ``--ledger``
    charges."""
    target = cfg.ledger.url
    if target in (None, "", "none"):
        return None, "not charged: --ledger none"
    if target != "auto":
        return target, f"charged: federation {cfg.ledger.federation}"
    if not secure:
        return None, "not charged: seeded noise, a simulation whose model is never released"
    if public_simulation(cfg):
        return None, (
            f"not charged: {cfg.data.dataset} is public data split into simulated clients, not people, so no lifetime "
            "budget is spent (--ledger PATH charges one; --data-dir, --groups or --federation charge the default)"
        )
    target = default_ledger()
    if target in ("", "none"):  # $HDP_PLANNER_LEDGER=none: no default ledger
        return None, f"not charged: ${DEFAULT_LEDGER_ENV}=none"
    return target, f"charged: the default ledger, federation {cfg.ledger.federation}"


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

    def chain(self) -> dict[str, Any]:
        """What the run's output records of the ledger's chain: the head the run found, the head it left, and the
        file outside the database where the head is recorded for the next run to check."""
        found, left = self.book.found, self.book.head
        return {"found": found.as_dict() if found else None, "left": left.as_dict() if left else None,
                "recorded_in": str(self.book.anchor.path)}  # fmt: skip

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


NO_LEDGER_HINT = " (no ledger: --ledger none)"


TRAIN_REFUSAL_HINT = " (a simulation: --seeded-noise; no ledger: --ledger none)"


def ledger_run(
    cfg: RunSettings, bound: BoundRun, *, start: int, clients=None, secure: bool | None = None,
    resumed: Mapping[str, Any] | None = None, refusal_hint: str = TRAIN_REFUSAL_HINT,
) -> LedgerRun | None:  # fmt: skip
    """Open the account of the ``bound`` run (its plan, rules and rounds) in the ledger (:func:`ledger_target`) for
    its rounds from ``start``, refusing the run before round 1 if a client would exceed its lifetime budget.
    ``clients``: (membership, budgets) by client id; by default :func:`~hdp_planner.ledger.runs.plan_clients` of
    ``cfg.ledger.groups``. ``resumed``: the checkpoint a resumed run continues, whose :func:`ledger_checkpoint` names
    the ledger run it supersedes and the chain's head it recorded (:func:`check_released`). ``refusal_hint``: the
    command's own ways around a refusal, appended to it."""
    run_plan, spec, rounds = bound.run_plan, bound.spec, bound.rounds
    secure = noise_kind(cfg) == "secure" if secure is None else secure
    target = ledger_target(cfg, secure)[0]
    if not spec.private or target is None:
        return None
    row, plan = METHOD_NAMES[spec.method], run_plan.plan
    if clients is None:
        try:
            clients = plan_clients(plan, plan.method(row), cfg.ledger.groups)
        except ValueError as exc:
            raise TrainError(str(exc)) from None
    membership, budgets = clients
    if len(membership) != spec.n:
        raise TrainError(f"the ledger needs the plan's {len(membership)} clients, the run has {spec.n}")
    try:
        if "://" not in target:
            Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
        book = Ledger(target)
        supersedes = (resumed or {}).get("ledger_run")
        if supersedes is not None:
            check_released(book, supersedes, start, (resumed or {}).get("ledger_head"))
        if start >= rounds:  # a finished run resumed: no round to charge, no run of 0 rounds to record
            if supersedes is not None:
                book.finish(supersedes, of=plan_digest(plan))
            return None
        run_id = book.start_run(
            federation=cfg.ledger.federation, label=f"{cfg.method} {cfg.data.dataset} seed {cfg.seed}",
            plan_sha256=plan_digest(plan), membership=membership, budgets_of=budgets, delta=plan.config.delta,
            planned=planned_costs(plan, spec=spec, row=row, start=start, rounds=rounds), start=start,
            supersedes=supersedes, simulated=cfg.ledger.groups is None,
        )  # fmt: skip
    except LedgerError as exc:
        if "refused" in str(exc):  # a seeded run (compare's grid) charged all the same: no noise option helps
            hint = NO_LEDGER_HINT if noise_kind(cfg) == "seeded" else refusal_hint
            raise TrainError(f"{exc}{hint}") from None
        raise TrainError(str(exc)) from None
    except OSError as exc:
        raise TrainError(f"cannot create the privacy ledger {target}: {exc.strerror or exc}") from None
    return LedgerRun(book, run_id, start)


def ledger_checkpoint(account: LedgerRun | None) -> dict[str, Any]:
    """What a checkpoint records of the run's account: its ledger run, and the chain's head after its last write."""
    if account is None:
        return {"ledger_run": None}
    head = account.book.head
    return {"ledger_run": account.run_id, "ledger_head": head.digest if head else None}


def check_released(book: Ledger, run_id: str, start: int, head: str | None = None) -> None:
    """Refuse to resume at round ``start`` a run whose ledger run ``run_id`` released rounds past it: its checkpoint
    is older than what was charged (put back, or the run was killed between a round's release and its checkpoint),
    and resuming would release more rounds than the metrics report. Refuse it too if the chain no longer holds
    ``head``, the head its checkpoint recorded (a removed tail, a recomputed chain, an older copy put back, seen
    from the run's own output: it holds on another machine too)."""
    problem = book.check_chain(head).problem if head is not None else None
    if problem is not None:
        raise TrainError(f"--resume: the privacy ledger {book.target} does not hold what this run's checkpoint "
                         f"recorded: {problem}")  # fmt: skip
    run = book.state().runs.get(run_id)
    if run is not None and run.released_through > start:
        raise TrainError(
            f"--resume: the ledger {book.target} released {run.released_through} rounds of this run but its "
            f"checkpoint holds {start}: an older checkpoint, or a run killed between a round's release and its "
            "checkpoint; resuming would release more rounds than the metrics report: rerun with --overwrite"
        )


def planned_costs(plan, *, spec, row: str, start: int, rounds: int) -> list[list[GroupRound]]:
    """What rounds ``start``..``rounds``−1 cost each group, as the run's trust model executes the row
    (:meth:`~hdp_planner.planning.plan.Trust.costs`)."""
    return spec.trust.costs(plan.method(row), plan.config, start=start, rounds=rounds)
