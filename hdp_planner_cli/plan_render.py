"""How ``hdp-plan solve`` and ``verify`` print a plan: the per-group table, the Λ comparison of the methods, the
tables under secure aggregation and with hidden participation, and the closing lines."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from hdp_planner.accounting.accountants import get_accountant
from hdp_planner.distributed.cohort_colluders import tolerated_group_colluders
from hdp_planner.methods.pooled import recalibrated_lambda
from hdp_planner.planning.config import PlanConfig
from hdp_planner.planning.method_noise import MethodNoise
from hdp_planner.planning.plan import METHODS, Plan
from hdp_planner.planning.rows import rdp_sigmas
from hdp_planner.rules.noise import compare_noise
from hdp_planner.trust.cohort_rows import keeps_every_group
from hdp_planner_cli.console import fit_table, labelled, optional_columns, pct, whole

STARVED_SHARE = 0.01
"""A cohort row whose smallest group's share of the update is below this gets a note: its clients barely count."""


def _fmt(x: float, digits: int = 4) -> str:
    return f"{x:.{digits}g}"


def describe_baseline(m: MethodNoise, config: PlanConfig) -> str:
    """One line on what a baseline's noise entry does beyond GDPFed's rules."""
    if m.projection is not None:
        pr = m.projection
        return (
            f"group {pr.public + 1} is public; group {pr.projected + 1}'s noisy sum is projected onto the top-{pr.dim} "
            f"subspace ({pr.subspace}) of the public group's last {pr.window} noisy sums; d = {pr.model_dim}"
        )
    if m.schedule is not None:
        first = m.schedule[0]
        if len(m.schedule) == 1:
            return "constant σ (no saving phase)"
        factor = first.noise_multiplier[0] / m.noise_multiplier[0]
        return f"σ × {factor:.3g} in rounds 1-{first.rounds} (saving), then σ_m (spending) to round {config.rounds}"
    clips = m.clips(config.clip)
    return (
        f"one pool of {sum(m.expected_clients):.4g} expected clients, clipped to C_m = "
        f"{', '.join(f'{x:.3g}' for x in clips)}, one noise draw of std {clips[0] * m.noise_multiplier[0]:.4g}"
    )


def render_plan(p: Plan, console: Console) -> None:
    """Print the per-group plan, the Λ comparison of the four methods, and the plan's notes."""
    c, g = p.config, p.groups
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"GDPFed+ plan: n={c.n}, T={c.rounds}, q={c.q:g}, δ={c.delta:.3g}, C={c.clip:g}, "
        f"accountant={c.accountant}",
    )
    rdp = rdp_sigmas(p)  # PLD plans: how much noise PLD saves over RDP at the same (ε_m, q_m)
    columns = ["group", "ε_m", "|G_m|", "q_m", "r_m", "σ_m", "σ_m²", "k_m/d", "ω_m", "ε\nspent"]
    for col in columns + (["σ_m\nby RDP", "PLD\nsaves"] if rdp else []):
        table.add_column(col, justify="right")
    optional_columns(table, "σ_m²", "ω_m")  # σ_m² is σ_m squared; ω_m is in plan.json
    for i in range(len(g.size)):
        extra = []
        if rdp:
            extra = [_fmt(rdp[i]), f"{100 * (1 - g.noise_multiplier[i] / rdp[i]):.1f}% of σ"]
        table.add_row(
            str(i + 1),
            _fmt(g.epsilon[i]),
            str(g.size[i]),
            pct(g.q[i], 4) + "%",
            _fmt(g.expected_clients[i]),
            _fmt(g.noise_multiplier[i]),
            _fmt(g.sigma2[i]),
            _fmt(g.k_ratio[i]),
            _fmt(g.weight[i]),
            _fmt(g.epsilon_spent[i]),
            *extra,
        )
    console.print(table)
    baseline = p.method("DP-FedAvg")
    base = baseline.lam
    population = "/".join(pct(x) for x in p.population_share) + "%"
    noise = Table(
        box=box.SIMPLE_HEAD,
        title=f"Noise Λ ({c.lambda_convention} convention) and representation (population share {population})",
    )
    columns = ["method", "q_m (%)", "Λ", "against\nDP-FedAvg", "clients a\nround r_m", "weight\nα_m (%)", "σ_m²"]
    for col in columns:
        noise.add_column(col, justify="right", no_wrap=col == "method")
    optional_columns(noise, "σ_m²")  # every row's σ_m is in plan.json
    for m in p.methods:
        sigma2 = "/".join(
            "→".join(f"{ph.noise_multiplier[i] ** 2:.3g}" for ph in m.schedule or ()) or f"{m.sigma2[i]:.3g}"
            for i in range(len(m.size))
        )
        clients, share = p.representation(m)
        noise.add_row(
            m.name,
            "/".join(pct(q) for q in m.q),
            f"{m.lam:.4g}",
            "—" if m is baseline else compare_noise(m.lam, base=base),
            "/".join(f"{x:.2g}" for x in clients),
            "/".join(pct(a) for a in share) + ("" if p.meets_min_share(m) else " ✗"),
            sigma2,
        )
    console.print(noise)
    if not all(p.meets_min_share(m) for m in p.methods):
        console.print(f"✗: some group's weight share is below {c.min_share:g}·|G_m|/n (--min-share)", highlight=False)
    for m in p.methods[len(METHODS) :]:
        console.print(labelled(f"{m.name}:", "cyan", describe_baseline(m, c)))
    gain = 1 - p.objective / p.uniform_objective
    moved = f"lower it by {100 * gain:.2g}%"
    if gain < 0:
        moved = f"raise it by {-100 * gain:.2g}% (the price of --min-share or --fixed-q)"
    console.print(
        f"Problem 1 (GDPFed's bound on the training error, σ model {c.sigma_model}): the chosen q_m {moved} against "
        f"q_m = q ({p.objective:.8g} against {p.uniform_objective:.8g}); most of it does not depend on the q_m",
        highlight=False,
    )
    for note in p.notes:
        console.print(labelled("note:", "yellow", note))


def pld_saving_line(p: Plan) -> str | None:
    """For an RDP plan: how much less exact noise the recommended row would carry calibrated with PLD."""
    acc = get_accountant(p.config.accountant)
    if acc.refines or acc.rule:  # for a plain RDP plan only
        return None
    rec = p.method(p.recommendation.method)
    lam = recalibrated_lambda(p, rec, "pld")
    if lam is None:
        return None
    return (
        f"PLD accountant: {rec.name} would carry Λ = {lam:.4g} instead of {rec.lambda_exact:.4g} "
        f"({100 * (1 - lam / rec.lambda_exact):.1f}% less noise; plan with --accountant pld)"
    )


def render_trust(p: Plan, console: Console) -> None:
    """The plan under secure aggregation: per row and group z_m, ε against each adversary, and the price (nothing
    for a plan whose trust model recalibrates no row; a plan that fell back to a trusted server shows the secure
    form it declined)."""
    trust = p.trust.declined or p.trust
    if trust.parameters is None:
        return
    params, k = trust.parameters, trust.parameters.participations or p.config.rounds
    table = Table(
        box=box.SIMPLE_HEAD,
        title=f"under secure aggregation: b={params.bits} bits, survivors F={params.survivors:g}, colluders "
        f"k={params.colluders}, participations K={k}, d={params.model_dim}",
    )
    for col in ("method", "group", "ε\nbudget", "share\nα_m", "σ trusted\nserver", "z\nsecagg", "effective\nσ",
                "ε third\nparties", f"ε server\n(K={k})", "Λ\nsecagg", "price of\ndistrust"):  # fmt: skip
        table.add_column(col, justify="right")
    optional_columns(table, "σ trusted\nserver", "effective\nσ")  # both in plan.json's trust object
    for r in trust.rows:
        m = p.method(r.name)
        share = m.weight_share(p.config.clip)
        for i, g in enumerate(r.groups or ()):
            first = i == 0
            table.add_row(
                r.name if first else "", str(i + 1), _fmt(m.epsilon[i]), f"{share[i]:.1%}", _fmt(m.noise_multiplier[i]),
                _fmt(g.noise_multiplier), _fmt(g.effective_noise_multiplier), _fmt(g.epsilon_third_parties),
                _fmt(g.epsilon_server), _fmt(r.lambda_secagg) if first else "", f"{r.price:.2f}x" if first else "",
            )  # fmt: skip
    console.print(*fit_table(console, table))
    for r in trust.rows:
        if r.groups is None:
            console.print(labelled(f"{r.name}:", "cyan", r.note))


def recommendation_line(p: Plan) -> str:
    """The one closing line of `solve`: the least-noise row meeting --min-share against the planned row."""
    r = p.recommendation
    where = f"rows meeting --min-share {p.config.min_share:g}" if p.config.min_share > 0 else "planned rows"
    if r.method == p.groups.name:
        return f"recommended: {r.method} (the planned row): least exact Λ = {r.lam:.4g} among the {where}"
    return (
        f"recommended: {r.method}: least exact Λ = {r.lam:.4g} among the {where}, "
        f"{r.ratio_to_planned:.2f}x less noise than the planned {p.groups.name}"
    )


def render_hidden(p: Plan, console: Console) -> None:
    """Public cohorts, private coins: per row and group the cohort m, coin p, expected contributors r = m·p,
    memberships K, threshold t, z and ε against the server; then the recommended row's frontier of cohort size
    against Λ, and the colluders each of its groups may hold for the law's k colluders per cohort to hold
    (:func:`~hdp_planner.distributed.cohort_colluders.tolerated_group_colluders`); nothing where participation is not
    hidden."""
    hidden = p.hidden
    if hidden is None:
        return
    table = Table(box=box.SIMPLE_HEAD, title="hiding who contributes: public cohorts, private coins")
    for col in ("method", "group", "ε\nbudget", "share\nα_m", "cohort\nm", "coin\np", "contri-\nbutors r",
                "member-\nships K", "thresh-\nold t", "z", "ε\nserver", "Λ", "price"):  # fmt: skip
        table.add_column(col, justify="right")
    optional_columns(table, "coin\np", "thresh-\nold t", "z")  # each in plan.json's cohort section
    for name, r in hidden.rows:
        if r is None:
            continue
        m, kept = p.method(name), keeps_every_group(r, p)
        for i, g in enumerate(r.groups):
            first = i == 0
            share = f"{r.weight_shares[i]:.1%}" + ("" if kept else " ✗")
            table.add_row(
                name if first else "", str(i + 1), _fmt(m.epsilon[i]), share, str(g.cohort), f"{g.coin:.3g}",
                f"{g.expected_contributors:.3g}", str(g.memberships), str(g.threshold), _fmt(g.noise_multiplier),
                _fmt(g.epsilon_server),
                _fmt(r.lambda_cohort) if first else "", f"{r.price:.2f}x" if first else "",
            )  # fmt: skip
    console.print(*fit_table(console, table))
    if hidden.frontier:
        frontier = Table(box=box.SIMPLE_HEAD, title=f"{hidden.recommendation}: cohort size against noise")
        for col in ("cohorts at most", "vectors a round", "Λ", "Λ / trusted Λ"):
            frontier.add_column(col, justify="right")
        for f in hidden.frontier:
            cap = "the group" if f.multiple is None else f"{f.multiple:g}x contributors"
            frontier.add_row(cap, str(f.vectors_per_round), _fmt(f.lam), f"{f.price:.2f}x")
        console.print(*fit_table(console, frontier))
    best = dict(hidden.rows).get(hidden.recommendation) if hidden.recommendation is not None else None
    sizes = p.method(hidden.recommendation).size if best is not None else ()
    if best is not None and len(best.groups) == len(sizes):
        colluders = p.trust.parameters.colluders
        allowed = [
            tolerated_group_colluders(
                size=size, cohort=g.cohort, tolerated=colluders, memberships=g.memberships, delta=p.config.delta
            )
            for g, size in zip(best.groups, sizes)
        ]
        console.print(f"colluders: with cohorts drawn by the public rule, each of a client's K cohorts holds at most "
                      f"k = {colluders} of them except with probability at most δ = {p.config.delta:.3g} while its "
                      f"group holds at most {' / '.join(map(str, allowed))} (the hypergeometric tail)",
                      highlight=False, soft_wrap=whole(console))  # fmt: skip
    if any(r is not None and not keeps_every_group(r, p) for _, r in hidden.rows):
        console.print(f"✗: some group's share α_m is below {p.config.min_share:g}·|G_m|/n (--min-share): not "
                      "recommended", highlight=False)  # fmt: skip
    for name, r in hidden.rows:
        if r is None:
            console.print(labelled(f"{name}:", "cyan", "no cohort under these caps (or no distributed form)"))
        elif min(r.weight_shares) < STARVED_SHARE:
            shares = " / ".join(f"{s:.2%}" for s in r.weight_shares)
            console.print(labelled(f"{name}:", "yellow", f"the groups' shares of the update are {shares}: the least "
                                   "Λ leaves some groups' clients almost out of the model (--min-share keeps each "
                                   "group a share of its population's)"))  # fmt: skip


def trust_lines(p: Plan) -> list[str]:
    """The closing lines of ``solve`` under secure aggregation (its recommended row) and with hidden participation
    (the recommended cohort row); none for a trusted server, but the line that says it was a fallback."""
    lines = []
    trust = p.trust
    if trust.declined is not None:
        why = trust.declined.unplanned(p)
        return [f"no row has a secure form under --trust secagg ({why}): the plan is written for a trusted server "
                "(--trusted-fallback), which sees every sampled client's clipped update"]  # fmt: skip
    if trust.parameters is not None and trust.recommendation is not None:
        best = next(r for r in trust.rows if r.name == trust.recommendation)
        lines.append(f"recommended under secagg: {best.name}: least Λ = {best.lambda_secagg:.4g} with distributed "
                     f"noise ({best.price:.2f}x its Λ with a trusted server)")  # fmt: skip
    hidden = p.hidden
    if hidden is not None:
        cohort = None if hidden.recommendation is None else hidden.row(hidden.recommendation)
        lines.append("no row can hide who contributes under these caps" if cohort is None else
                     f"recommended with hidden participation: {cohort.name}: Λ = {cohort.lambda_cohort:.4g}, "
                     f"{cohort.price:.2f}x its Λ with a trusted server, {cohort.vectors_per_round} vectors a round, "
                     f"every group's ε against the server within its budget")  # fmt: skip
    return lines


def spent_of_budget(spent: float, budget: float) -> str:
    """ "spent ≤ budget" with as many digits of ``spent`` (4 to 12) as make the comparison true as printed; a spent ε
    above the budget by less than verify's tolerance (a relative 1e-9) reads "= budget (to 9 digits)"."""
    limit = f"{budget:.12g}"
    if spent > budget:
        return f"= {limit} (to 9 digits)"
    text = next(t for t in (f"{spent:.{d}g}" for d in range(4, 18)) if float(t) <= budget)
    return f"{text} ≤ {limit}"
