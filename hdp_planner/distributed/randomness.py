"""Uniform integers for the exact samplers, from the OS's CSPRNG or (tests only) a seeded generator.

Every random decision of :mod:`hdp_planner.distributed.sampler` is a comparison of uniform integers, so the
samplers are exact whatever the source; only the source decides who can regenerate the draws."""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np


class Bits(Protocol):
    """A source of independent uniform random bytes."""

    def bytes(self, size: int) -> bytes: ...


class SecureBits:
    """Bytes from ``os.urandom`` (the kernel's ChaCha20 CSPRNG): nothing recorded regenerates them."""

    def bytes(self, size: int) -> bytes:
        return os.urandom(size)


class SeededBits:
    """Bytes from a seeded PCG64 stream: reproducible draws for tests and simulations, never for release."""

    def __init__(self, seed: int | np.random.SeedSequence) -> None:
        self._rng = np.random.Generator(np.random.PCG64(seed))

    def bytes(self, size: int) -> bytes:
        return self._rng.bytes(size)


WORDS = (np.uint8, np.uint16, np.uint32, np.uint64)


def words(bits: Bits, dtype: type[np.unsignedinteger], size: int) -> np.ndarray:
    """``size`` uniform unsigned integers of ``dtype`` (writable)."""
    return np.frombuffer(bits.bytes(size * np.dtype(dtype).itemsize), dtype=dtype).copy()


def _mask(bound: np.ndarray) -> np.ndarray:
    """2^bit_length(bound − 1) − 1 for each bound ≥ 1: the smallest all-ones word covering [0, bound)."""
    v = bound.astype(np.uint64) - np.uint64(1)
    for shift in (1, 2, 4, 8, 16, 32):
        v |= v >> np.uint64(shift)
    return v


def below(bits: Bits, bound: np.ndarray | int, size: int | None = None) -> np.ndarray:
    """Uniform integers in [0, bound) (int64, exact) by masked rejection: each try keeps the low bit_length(bound − 1)
    bits of a random word (the narrowest of 8, 16, 32 or 64 bits that holds every bound) and is accepted when below
    ``bound``, with probability > 1/2. ``bound`` is an array of positive integers below 2^63, or one with ``size``."""
    b = np.asarray(bound, dtype=np.int64)
    scalar = b.ndim == 0
    n = b.size if size is None else size
    if not scalar and size is not None and b.size != size:
        raise ValueError(f"{b.size} bounds for {size} draws")
    b = b.ravel()
    if b.size and b.min() < 1:
        raise ValueError("bounds must be ≥ 1")
    if scalar and int(b[0]) == 1:
        return np.zeros(n, dtype=np.int64)
    largest = int(b.max()) if b.size else 1  # the word must hold the bound itself (2^8 is no uint8: it would be 0)
    dtype = next(w for w in WORDS if largest < 2 ** (8 * np.dtype(w).itemsize))
    mask = _mask(b).astype(dtype)
    bound_w = b.astype(dtype)
    if scalar:
        return _below_scalar(bits, bound_w[0], mask[0], n)
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        x = words(bits, dtype, todo.size) & mask[todo]
        ok = x < bound_w[todo]
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    return out


def _below_scalar(bits: Bits, bound: np.unsignedinteger, mask: np.unsignedinteger, size: int) -> np.ndarray:
    """``size`` uniforms below one ``bound`` by masked rejection, in batches sized by the acceptance rate
    bound/(mask + 1) > 1/2: the accepted words in order, the first ``size`` of them (i.i.d. kept in order)."""
    rate = int(bound) / (int(mask) + 1)
    parts, need = [], size
    while need:
        x = words(bits, type(bound), int(need / rate * 1.02) + 64) & mask
        kept = x[x < bound][:need]
        parts.append(kept.astype(np.int64))
        need -= kept.size
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
