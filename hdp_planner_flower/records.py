"""Flower records ↔ flat torch vectors, and the names of what the strategy and the client mod exchange."""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

ARRAYS = "arrays"  # the model (server → client) or the private update (client → server)
HDP = "hdp"  # ConfigRecord server → client: group, clip, noise-multiplier, joined, trust; MetricRecord back
TRAIN_SETTINGS = "train"  # ConfigRecord server → client: lr, local steps, data settings for the user's train
ENROLL = "query.hdp_enroll"  # message type of the enrolment query: each node reports its client id


def flatten(record: ArrayRecord) -> torch.Tensor:
    """All arrays of ``record``, in key order, as one float32 vector."""
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
