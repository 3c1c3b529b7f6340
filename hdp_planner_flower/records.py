"""Flower records ↔ flat torch vectors, and the names of what the strategy and the client mod exchange. Importing it
does not import torch (a node's stages that never touch a model read the names)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord

if TYPE_CHECKING:
    import torch

ARRAYS = "arrays"  # the model (server → client) or the private update (client → server)
HDP = "hdp"  # ConfigRecord server → client: group, clip, noise-multiplier, joined, trust; MetricRecord back
TRAIN_SETTINGS = "train"  # ConfigRecord server → client: lr, local steps, data settings for the user's train
ENROLL = "query.hdp_enroll"  # message type of the enrolment query: each node reports its client id
COHORT = "query.hdp_cohort"  # message type of the cohort seed's commitment round (hdp_planner_flower.cohort_seed)


def flatten(record: ArrayRecord) -> torch.Tensor:
    """All arrays of ``record``, in key order, as one float32 vector."""
    import torch

    parts = [np.asarray(a.numpy(), dtype=np.float32).ravel() for a in record.values()]
    return torch.from_numpy(np.concatenate(parts)) if parts else torch.zeros(0)


def unflatten(like: ArrayRecord, flat: torch.Tensor) -> ArrayRecord:
    """An ArrayRecord with the keys and shapes of ``like`` holding ``flat``."""
    out, start = {}, 0
    values = flat.detach().cpu().numpy()
    for key, arr in like.items():
        shape = tuple(arr.shape)
        size = int(np.prod(shape))
        out[key] = Array(values[start : start + size].reshape(shape).astype(np.float32, copy=True))
        start += size
    if start != flat.numel():
        raise ValueError(f"a vector of {flat.numel()} values does not fill arrays of {start}")
    return ArrayRecord(out)


RULES_PREFIX, SETTINGS_PREFIX = "hdp.", "train."
"""Under SecAgg+ (legacy FitIns) the round's rules and train settings travel as one flat config with these prefixes."""


def fit_config(rules: ConfigRecord, settings: ConfigRecord) -> dict:
    """The flat FitIns config of a round from its rules and train settings."""
    return {**{RULES_PREFIX + k: v for k, v in rules.items()}, **{SETTINGS_PREFIX + k: v for k, v in settings.items()}}


def split_config(config: dict) -> tuple[ConfigRecord, ConfigRecord]:
    """(rules, train settings) from a flat FitIns config: :func:`fit_config`'s inverse."""
    rules = {k[len(RULES_PREFIX) :]: v for k, v in config.items() if k.startswith(RULES_PREFIX)}
    settings = {k[len(SETTINGS_PREFIX) :]: v for k, v in config.items() if k.startswith(SETTINGS_PREFIX)}
    return ConfigRecord(rules), ConfigRecord(settings)
