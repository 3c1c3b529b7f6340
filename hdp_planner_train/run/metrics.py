"""The metrics every plan-noised run reports, the simulator's and Flower's alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hdp_planner.rules.noise import lambda_exact
from hdp_planner.trust.registry import trust_name
from hdp_planner_train.rounds.loop import RunLog
from hdp_planner_train.rules.secagg import Withheld
from hdp_planner_train.rules.specs import METHOD_NAMES, GroupSpec
from hdp_planner_train.run.ledger import ledger_target, privacy_ledger
from hdp_planner_train.run.noise import SECURE_NOTE, SEEDED_NOTE, noise_kind
from hdp_planner_train.run.settings import RunSettings

if TYPE_CHECKING:
    from hdp_planner_train.run.bound import BoundRun


def planned_lambda(plan, spec) -> float:
    """The Λ the run's noise should have: the row's exact Λ (at the weights the run applies, when they are not the
    plan's: ``--weights paper``), or under secure aggregation the trust model's."""
    if not spec.private:
        return 0.0
    if spec.secagg is not None and spec.secagg.planned_lambda is not None:
        return float(spec.secagg.planned_lambda)
    row = plan.method(METHOD_NAMES[spec.method])
    if tuple(spec.weight) == tuple(row.weight):
        return row.lambda_exact
    noise = row.rms_noise_multiplier(plan.config.rounds)
    return lambda_exact(spec.weight, noise, row.k_ratio, row.clips(plan.config.clip), row.pooled)


def base_metrics(
    cfg: RunSettings, bound: BoundRun, *, rounds: int, d: int, log: RunLog, model: str, account=None
) -> dict[str, Any]:
    """The metrics every plan-noised method reports (settings, model, accuracy history, ε spent, Λ measured vs
    planned) of the ``bound`` run after ``rounds`` rounds, its model ``model`` of ``d`` parameters; with the run's
    ``account`` in the privacy ledger (:class:`~hdp_planner_train.run.ledger.LedgerRun`), the ledger's chain as the
    run found and left it."""
    plan, spec = bound.plan, bound.spec
    c = plan.config
    return {
        "method": cfg.method,
        "plan_method": METHOD_NAMES[spec.method],
        "dataset": cfg.data.dataset,
        "model": model,
        "device": str(bound.device),
        "precision": cfg.model.precision,
        "seed": cfg.seed,
        "rounds": rounds,
        "plan_rounds": c.rounds,
        "clients": bound.data.n_clients,
        "d": d,
        "batch_size": bound.batch,
        "momentum": bound.momentum,
        "lr": c.lr,
        "lr_decay": cfg.model.lr_decay,
        "weights": cfg.model.weights,
        "local_steps": c.local_steps,
        "epsilon_spent": privacy_ledger(plan, spec, rounds),
        "noise_source": noise_kind(cfg),
        "noise_note": SEEDED_NOTE if noise_kind(cfg) == "seeded" else SECURE_NOTE,
        "noise_lambda_planned": planned_lambda(plan, spec),
        "ledger": ledger_target(cfg, noise_kind(cfg) == "secure")[1] if spec.private else "not charged: no noise",
        **({"ledger_chain": account.chain()} if account is not None else {}),
        **log.summary(),
    }


def trust_metrics(
    plan, spec: GroupSpec, rounds: int, withheld: Sequence[tuple[int, Withheld]] | None
) -> dict[str, Any]:
    """The trust model the run followed (``"kind"``, and the plan's where that differs) and what it records of the
    rounds run (:meth:`~hdp_planner.planning.plan.Trust.metrics`). ``withheld``: under secure aggregation, the
    group-rounds (round index, :class:`~hdp_planner_train.rules.secagg.Withheld`) that released nothing, recorded with
    how many and why (a simulation's; None for a secure run, as they depend on who took part)."""
    kind, planned = trust_name(spec.trust), trust_name(plan.trust)
    doc: dict[str, Any] = {"kind": kind, **({"plan_trust": planned} if planned != kind else {})}
    dropout = spec.secagg.dropout if spec.secagg is not None else 0.0
    doc.update(spec.trust.metrics(plan.method(METHOD_NAMES[spec.method]), plan.config, rounds=rounds, dropout=dropout,
                                  seeded=withheld is not None))  # fmt: skip
    if withheld is not None and spec.secagg is not None:  # which group-rounds released nothing: simulations only
        doc.update(withheld_metrics(withheld))
    return doc


def withheld_metrics(withheld: Sequence[tuple[int, Withheld]]) -> dict[str, Any]:
    """How many group-rounds released nothing and, where any did, each one's round, group and reason."""
    doc: dict[str, Any] = {"group_rounds_withheld": len(withheld)}
    if withheld:
        doc["withheld"] = [{"round": r + 1, "group": w.group + 1, "reason": w.reason} for r, w in withheld]
    return doc
