"""The baselines' own options (GDPFed Section 2, B.2): PFA's subspace and time-adaptive's saving phase."""

from __future__ import annotations

import math
from dataclasses import dataclass

SUBSPACES: tuple[str, ...] = ("lanczos", "randomized")


@dataclass(frozen=True, kw_only=True)
class BaselineOptions:
    """The baselines' own parameters.

    Args:
        pfa_dim: PFA's projection dimension k (PFA's code defaults to 1).
        pfa_window: How many of the public group's latest noisy sums span PFA's subspace.
        pfa_subspace: How the subspace is found: ``lanczos`` or ``randomized``.
        model_dim: The model's d, needed for PFA's Λ (the projected group keeps k/d of its noise).
        saving_rounds: Time-adaptive: the first rounds, which add more noise to save budget (None: ⌊T/2⌋).
        saving_noise: Time-adaptive: how many times the later rounds' noise the saving rounds add.

    Raises:
        ValueError: A value out of range.
    """

    pfa_dim: int = 1
    pfa_window: int = 10
    pfa_subspace: str = "lanczos"
    model_dim: int | None = None
    saving_rounds: int | None = None
    saving_noise: float = 2.0

    def __post_init__(self) -> None:
        for name in ("pfa_dim", "pfa_window"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name.replace('_', ' ')} must be a positive integer, got {v}")
        if self.pfa_dim > self.pfa_window:
            raise ValueError(f"pfa dim {self.pfa_dim} needs a window of at least as many rounds, got {self.pfa_window}")
        if self.pfa_subspace not in SUBSPACES:
            raise ValueError(f"pfa subspace must be one of {', '.join(SUBSPACES)}, got {self.pfa_subspace!r}")
        if self.model_dim is not None and (not isinstance(self.model_dim, int) or self.model_dim < self.pfa_dim):
            raise ValueError(f"model dim must be an integer ≥ the pfa dim {self.pfa_dim}, got {self.model_dim}")
        if not (isinstance(self.saving_noise, (int, float)) and math.isfinite(self.saving_noise)):
            raise ValueError(f"saving noise must be a number ≥ 1, got {self.saving_noise}")
