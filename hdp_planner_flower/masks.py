"""SecAgg+ masks from a cryptographic PRG: ChaCha20 keyed by SHA-256 of the full shared secret.

Flower's SecAgg+ (flwr 1.41, ``flwr.common.secure_aggregation.secaggplus_utils.pseudo_rand_gen``) expands every mask
seed by XOR-folding it to 32 bits (a pairwise seed, base64 text of the ECDH secret, keeps about 28 bits of entropy)
and drawing from numpy's MT19937, and draws each mask entry from [0, R − 2] instead of [0, R − 1]. A masked vector is
then only as hidden as a 32-bit seed: with few neighbours a search over the seeds is feasible in principle, and
MT19937's state is recoverable from its output. :func:`chacha_masks` draws the same shapes from ChaCha20 (the
``cryptography`` package, which Flower already depends on) keyed by SHA-256 of the whole seed, uniform on
[0, R) for R a power of two. :func:`secure_masks` puts it in place of Flower's generator in both the client mod and
the server workflow for the duration of a block, and :func:`masked_secaggplus_mod` is Flower's client mod under it; the
protocol itself (keys, shares, encryption) is Flower's, unchanged.
"""

from __future__ import annotations

import hashlib
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.typing import ClientAppCallable

MASK_USERS = (
    "flwr.client.mod.secure_aggregation.secaggplus_mod",
    "flwr.server.workflow.secure_aggregation.secaggplus_workflow",
)
"""The Flower modules that expand mask seeds (both import ``pseudo_rand_gen`` by name)."""

MASK_MODULUS = 1 << 32
"""The modulus our SecAgg+ runs use: b-bit integers ride on it as an exact shift (:mod:`.secagg_workflow`)."""
NONCE = b"hdp-planner-mask"  # 16 bytes: one stream per key, the key is a hash of the secret
_lock = threading.Lock()
_depth = 0
_originals: dict[str, object] = {}


def chacha_masks(seed: bytes, num_range: int, dimensions_list: list[tuple[int, ...]]) -> list[np.ndarray]:
    """Masks of the given shapes, uniform on [0, ``num_range``) (a power of two ≤ 2^32), from ChaCha20 keyed by
    SHA-256(``seed``): a drop-in for Flower's ``pseudo_rand_gen``."""
    if num_range < 2 or num_range & (num_range - 1) or num_range > 1 << 32:
        raise ValueError(f"the mask range must be a power of two ≤ 2^32, got {num_range}")
    sizes = [int(np.prod(shape)) for shape in dimensions_list]
    stream = Cipher(algorithms.ChaCha20(hashlib.sha256(seed).digest(), NONCE), mode=None).encryptor()
    words = np.frombuffer(stream.update(bytes(4 * sum(sizes))), dtype="<u4").astype(np.int64) & (num_range - 1)
    out, start = [], 0
    for shape, size in zip(dimensions_list, sizes):
        out.append(words[start : start + size].reshape(shape) if shape else np.array(words[start], dtype=np.int64))
        start += size
    return out


@contextmanager
def secure_masks() -> Iterator[None]:
    """Within the block, Flower's SecAgg+ (client mod and server workflow) expands its mask seeds with
    :func:`chacha_masks`; nested and concurrent blocks share one replacement, restored when the last one ends."""
    global _depth
    with _lock:
        if _depth == 0:
            for name in MASK_USERS:
                module = importlib.import_module(name)
                _originals[name] = module.pseudo_rand_gen
                module.pseudo_rand_gen = chacha_masks
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name in MASK_USERS:
                    importlib.import_module(name).pseudo_rand_gen = _originals.pop(name)


def masked_secaggplus_mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
    """Flower's ``secaggplus_mod`` with masks from :func:`chacha_masks`."""
    with secure_masks():
        return secaggplus_mod(msg, ctxt, call_next)
