"""The trainer families' own options, one frozen dataclass per family, beside the run's option groups
(:mod:`hdp_planner_train.run.options`). None means the family's default; each family refuses its options for a
method that does not use them (:func:`~.personal.check_options`,
:func:`~.private_selection.check_selection_options`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PersonalOptions:
    """The DP²-FedSAM family (:mod:`.personal`): ``rho``, the SAM radius ρ of dp2-fedsam and dp-fedsam (default 0.1,
    the DP²-FedSAM paper's); ``head_steps``, τ_h head steps (dp2-fedsam, centaur) or fine-tuning steps (dp-fedavg-ft)
    (default: the plan's local steps τ)."""

    rho: float | None = None
    head_steps: int | None = None


@dataclass(frozen=True, kw_only=True)
class SelectionOptions:
    """The client-selection family (:mod:`.private_selection`): ``noise_rule``, paper (its eqs. 6-7) or exact (RDP);
    ``eta``, Problem 1's weight η (privacy-aware; default 1e5); ``per_round``, clients drawn per round K (default
    round(q·n)); ``candidates``, power of choice's d (default 2K)."""

    noise_rule: str | None = None
    eta: float | None = None
    per_round: int | None = None
    candidates: int | None = None
