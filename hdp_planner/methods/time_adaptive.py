"""Time-adaptive privacy spending (Kiani et al., ICLR 2025) as a per-round σ schedule: its plan row and round rules."""

from __future__ import annotations

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.accounting.schedule import calibrate_schedule, schedule_epsilon
from hdp_planner.methods.method import Method, RoundRules
from hdp_planner.methods.options import BaselineOptions
from hdp_planner.planning.method_noise import MethodNoise, Phase
from hdp_planner.planning.plan import Plan
from hdp_planner.planning.rows import derived_row


def time_adaptive(plan: Plan, options: BaselineOptions) -> MethodNoise:
    """Time-adaptive privacy spending (Kiani et al., ICLR 2025): save budget early, spend it late.

    Every group is sampled at q and weighed as GDPFed; group m adds σ_m,save = κσ_m,spend in the first T_s rounds
    and σ_m,spend afterwards (κ = ``saving_noise``, T_s = ``saving_rounds``, T/2 by default), with σ_m,spend the
    smallest at which the composition of both phases meets ε_m exactly (RDP, :mod:`hdp_planner.accounting.schedule`).
    Kiani et al. save through lower sampling rates, hand-tuned per setting (GDPFed B.2); a σ schedule keeps q,
    the weights and the expected participants of GDPFed, so only the timing of the noise differs.
    """
    c, gdp = plan.config, plan.method("GDPFed")
    saving = c.rounds // 2 if options.saving_rounds is None else options.saving_rounds
    pairs = [
        calibrate_schedule(
            epsilon=e, delta=c.delta, q=c.q, rounds=c.rounds, saving_rounds=saving, saving_noise=options.saving_noise
        )
        for e in gdp.epsilon
    ]
    phases = tuple(
        Phase(rounds=rounds, noise_multiplier=tuple(p[i] for p in pairs))
        for i, rounds in enumerate((saving, c.rounds - saving))
        if rounds
    )
    spent = tuple(
        schedule_epsilon([(ph.rounds, ph.noise_multiplier[m]) for ph in phases], q=c.q, delta=c.delta)
        for m in range(len(gdp.size))
    )
    sigma = tuple(p[1] for p in pairs)
    return derived_row("Time-adaptive", gdp, plan, noise_multiplier=sigma, epsilon_spent=spent, schedule=phases)


def rdp_note(plan: Plan, options: BaselineOptions) -> str | None:
    """The plan's note when its accountant is not RDP."""
    if not get_accountant(plan.config.spending_accountant).refines:
        return None
    return "Time-adaptive is calibrated and accounted with RDP (its schedule composes RDP curves)"


RULES = RoundRules(sampling="plan-q", schedule=True)  # every group at the plan's q, σ in phases
METHODS = (  # the audit fits one σ per group: a schedule is not audited
    Method(key="time-adaptive", row="Time-adaptive", rules=RULES, build=time_adaptive, flower=True, note=rdp_note),
)
