"""The trainer families' own options, one frozen dataclass per family, beside the run's settings
(:class:`~hdp_planner_train.simulator.scaffold.TrainConfig`). None means the family's default; each family refuses
its options for a method that does not use them (:func:`~.personal.check_options`,
:func:`~.private_selection.check_selection_options`)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class PersonalOptions:
    """The DP²-FedSAM family (:mod:`.personal`): ``rho``, the SAM radius ρ of dp2-fedsam and dp-fedsam (default 0.1,
    the DP²-FedSAM paper's); ``head_steps``, τ_h head steps (dp2-fedsam, centaur) or fine-tuning steps (dp-fedavg-ft)
    (default: the plan's local steps τ)."""

    rho: float | None = None
    head_steps: int | None = None


@dataclass(frozen=True)
class SelectionOptions:
    """The client-selection family (:mod:`.private_selection`): ``noise_rule``, paper (its eqs. 6-7) or exact (RDP);
    ``eta``, Problem 1's weight η (privacy-aware; default 1e5); ``per_round``, clients drawn per round K (default
    round(q·n)); ``candidates``, power of choice's d (default 2K)."""

    noise_rule: str | None = None
    eta: float | None = None
    per_round: int | None = None
    candidates: int | None = None


FAMILY_OPTIONS: dict[str, type] = {"personal": PersonalOptions, "selection": SelectionOptions}
"""The options class of each trainer family that has options, under its field name in ``TrainConfig``."""


def gather_family_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with every family option given by its own name (``rho=0.05``) moved into its family's dataclass
    (``personal=PersonalOptions(rho=0.05)``), merged with one given whole."""
    out = dict(options)
    for family, cls in FAMILY_OPTIONS.items():
        names = {f.name for f in fields(cls)}
        loose = {k: out.pop(k) for k in list(out) if k in names}
        if loose:
            out[family] = replace(out.get(family) or cls(), **loose)
    return out
