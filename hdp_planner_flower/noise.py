"""Noise for Flower runs: Gaussian draws from the operating system's entropy, never from a written seed."""

from __future__ import annotations

import secrets

import torch


def secure_generator() -> torch.Generator:
    """A torch generator seeded from OS entropy (``secrets``); the seed is never stored or written."""
    return torch.Generator().manual_seed(secrets.randbits(63))


def secure_normal(d: int, std: float) -> torch.Tensor:
    """N(0, std²·I_d) from :func:`secure_generator`."""
    return torch.randn(d, generator=secure_generator()) * std
