"""Optional Flower integration (GDPFed on Flower's Message API): ``hdp-plan flower PLAN ...``.

Importing this package imports neither flwr nor torch; its modules do: :mod:`.strategy` (the server's strategy),
:mod:`.mods` (the client-side mod), :mod:`.records` (records ↔ flat vectors), :mod:`.app` (the ClientApp, initial
model and central evaluation for the trainer's datasets) and :mod:`.simulation` (the ServerApp's work, the
``hdp-plan flower`` command, the ``flwr run`` ServerApp). Install with the ``flower`` extra.

The API: :class:`HdpStrategy` (the server side of a plan), :func:`hdp_mod` (the client mod that clips to the plan)
and :func:`share_mod` (the client's noise share under SecAgg+), :class:`FlowerConfig` and :func:`run_flower` (a
plan on Flower's simulation engine from Python), each loaded from its module on first use.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

FLOWER_HINT = "pip install torch==2.13.0 && pip install -e '.[train,flower]'"

OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",  # no usage reports
    "FLWR_DISABLE_UPDATE_CHECK": "1",  # no version check against PyPI
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # `flwr run` uses this environment, installs nothing
}
"""Environment that keeps Flower offline (set by the app and the CLI unless the caller set them)."""


def offline_env() -> dict[str, str]:
    """Set :data:`OFFLINE_ENV` (keeping values the caller chose) and a ``FLWR_HOME`` in a fresh temporary folder
    when none is set; returns what was set."""
    chosen = {k: v for k, v in OFFLINE_ENV.items() if k not in os.environ}
    if "FLWR_HOME" not in os.environ:
        chosen["FLWR_HOME"] = tempfile.mkdtemp(prefix="hdp-flwr-")
    os.environ.update(chosen)
    return chosen


@contextmanager
def offline_environment() -> Iterator[dict[str, str]]:
    """:func:`offline_env` for the duration of a run: afterwards the variables it set are unset again and the
    temporary ``FLWR_HOME`` it made is removed (also when the run fails or is interrupted)."""
    chosen = offline_env()
    try:
        yield chosen
    finally:
        for key in chosen:
            os.environ.pop(key, None)
        if "FLWR_HOME" in chosen:
            shutil.rmtree(chosen["FLWR_HOME"], ignore_errors=True)


def require_flwr() -> str:
    """flwr's version, or a :class:`RuntimeError` naming the extra to install."""
    try:
        import flwr
    except ImportError:
        raise RuntimeError(f"hdp-plan flower needs Flower: install the flower extra ({FLOWER_HINT})") from None
    return str(flwr.__version__)


_LAZY = {
    "FlowerConfig": "hdp_planner_flower.simulation",
    "HdpStrategy": "hdp_planner_flower.strategy",
    "hdp_mod": "hdp_planner_flower.mods",
    "run_flower": "hdp_planner_flower.simulation",
    "share_mod": "hdp_planner_flower.secagg_mod",
}


def __getattr__(name: str) -> Any:
    """The names that import flwr and torch, loaded when first asked for (PEP 562)."""
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FLOWER_HINT",
    "OFFLINE_ENV",
    "FlowerConfig",
    "HdpStrategy",
    "hdp_mod",
    "offline_env",
    "offline_environment",
    "require_flwr",
    "run_flower",
    "share_mod",
]
