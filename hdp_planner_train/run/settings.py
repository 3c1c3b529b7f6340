"""The settings the run layer reads from a run's configuration (the trainer's ``TrainConfig`` has them all)."""

from __future__ import annotations

from typing import Protocol


class RunSettings(Protocol):
    """A run's configuration as the run layer reads it: the plan, method and data, the noise source, the trust model
    and the privacy ledger charged."""

    plan: str
    method: str
    dataset: str
    data_dir: str | None
    seed: int
    out: str | None
    noise: str | None
    model: str | None
    rounds: int | None
    precision: str
    lr_decay: float
    trust: str | None
    override_trust: bool
    dropout: float
    audit: bool
    ledger: str | None
    federation: str
    groups: str | None
