"""A run's noise source: secure (the OS's CSPRNG) or seeded (a simulation), and what each means for its model."""

from __future__ import annotations

from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings

SEEDED_NOTE = (
    "seeded noise: a simulation. Anyone holding the seed regenerates every noise draw and who took part, and can "
    "subtract the noise from the model: never release a model trained with seeded noise"
)


SECURE_NOTE = (
    "secure noise: noise and client sampling from the OS's CSPRNG; per-round diagnostics (measured noise, joined "
    "counts, round times) are not recorded, as they reveal who took part"
)


def noise_kind(cfg: RunSettings) -> str:
    """The run's noise source: ``cfg.noise.kind``, or secure whenever the run writes a model (``--out``), else
    seeded."""
    kind = cfg.noise.kind if cfg.noise.kind is not None else ("secure" if cfg.output.out else "seeded")
    if kind not in ("secure", "seeded"):
        raise TrainError(f"noise source must be secure or seeded, got {kind!r}")
    return kind
