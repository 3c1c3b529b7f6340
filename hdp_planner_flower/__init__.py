"""Optional Flower integration (GDPFed on Flower's Message API): ``hdp-plan flower PLAN ...``.

Importing this package imports neither flwr nor torch; its modules do: :mod:`.strategy` (the server's strategy),
:mod:`.mods` (the client-side mod), :mod:`.records` (records ↔ flat vectors), :mod:`.app` (the ClientApp, initial
model and central evaluation for the trainer's datasets) and :mod:`.simulation` (the ServerApp's work, the
``hdp-plan flower`` command, the ``flwr run`` ServerApp). Install with the ``flower`` extra.

The API, each name loaded from its module on first use: :class:`HdpStrategy` (the server side of a plan),
:func:`client_app` (a ClientApp that trains under the plan), :func:`hdp_mod` (the client mod that clips to the plan),
:func:`share_mod` and :func:`secagg_mods` (the client's noise share under SecAgg+), :class:`FlowerConfig` and
:func:`run_flower` (a plan on Flower's simulation engine from Python), and the deployment on this machine
(:class:`DeployConfig` and :func:`deploy_local`, over :class:`LocalDeployment`; :class:`DeployError`). The environment
helpers below keep Flower offline.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from hdp_planner.io.lazy import lazy_getattr

FLOWER_HINT = "pip install torch==2.13.0 && pip install -e '.[train,flower]'"

OFFLINE_ENV = {
    "FLWR_TELEMETRY_ENABLED": "0",  # no usage reports
    "FLWR_DISABLE_UPDATE_CHECK": "1",  # no version check against PyPI
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",  # `flwr run` uses this environment, installs nothing
}
"""Environment that keeps Flower offline (set by the app and the CLI unless the caller set them)."""


QUIET_ENV = {
    "RAY_DISABLE_FAILURE_SIGNAL_HANDLER": "1",  # a stopped Ray process dumps no stack trace on the terminal
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",  # silences a Ray FutureWarning
}
"""Environment that keeps Ray quiet when a run is stopped (set unless the caller set them)."""


def offline_env() -> dict[str, str]:
    """Set :data:`OFFLINE_ENV` and :data:`QUIET_ENV` (keeping values the caller chose) and, when no ``FLWR_HOME`` is
    set, one in a fresh temporary folder that also holds Ray's session folder (``RAY_TMPDIR``), so that removing it
    leaves nothing behind.

    Returns:
        The variables it set, and their values.
    """
    chosen = {k: v for k, v in {**OFFLINE_ENV, **QUIET_ENV}.items() if k not in os.environ}
    if "FLWR_HOME" not in os.environ:
        chosen["FLWR_HOME"] = tempfile.mkdtemp(prefix="hdp-flwr-")
        if "RAY_TMPDIR" not in os.environ:
            chosen["RAY_TMPDIR"] = ray_folder(chosen["FLWR_HOME"])
    os.environ.update(chosen)
    return chosen


RAY_PATH_ROOM = 40
"""The longest folder Ray's session folder may sit in: its sockets' paths add about 70 characters, and a Unix
socket's path holds at most 107."""


def ray_folder(home: str) -> str:
    """Where Ray keeps its session folder: ``home`` when its path is short enough, else a fresh folder in /tmp."""
    return home if len(home) <= RAY_PATH_ROOM else tempfile.mkdtemp(prefix="hdp-ray-", dir="/tmp")


@contextmanager
def offline_environment() -> Iterator[dict[str, str]]:
    """:func:`offline_env` for the duration of a run: afterwards the variables it set are unset again and the
    temporary ``FLWR_HOME`` it made (with Ray's session folder) is removed (also when the run fails or is interrupted).

    Returns:
        A context manager yielding the variables it set.
    """
    chosen = offline_env()
    try:
        yield chosen
    finally:
        for key in chosen:
            os.environ.pop(key, None)
        for key in ("FLWR_HOME", "RAY_TMPDIR"):
            if key in chosen:
                shutil.rmtree(chosen[key], ignore_errors=True)


def require_flwr() -> str:
    """Check that Flower is installed.

    Returns:
        flwr's version.

    Raises:
        RuntimeError: Flower is not installed; the message names the extra to install.
    """
    try:
        import flwr
    except ImportError:
        raise RuntimeError(f"hdp-plan flower needs Flower: install the flower extra ({FLOWER_HINT})") from None
    return str(flwr.__version__)


__getattr__ = lazy_getattr(
    __name__,
    {
        "DeployConfig": "hdp_planner_flower.deploy_local",
        "DeployError": "hdp_planner_flower.deploy",
        "FlowerConfig": "hdp_planner_flower.preparation",
        "HdpStrategy": "hdp_planner_flower.strategy",
        "LocalDeployment": "hdp_planner_flower.deploy",
        "client_app": "hdp_planner_flower.app",
        "deploy_local": "hdp_planner_flower.deploy_local",
        "hdp_mod": "hdp_planner_flower.mods",
        "run_flower": "hdp_planner_flower.simulation",
        "secagg_mods": "hdp_planner_flower.secagg_mod",
        "share_mod": "hdp_planner_flower.secagg_mod",
    },
)
"""The names that import flwr and torch, loaded when first asked for."""


__all__ = [
    "FLOWER_HINT",
    "OFFLINE_ENV",
    "QUIET_ENV",
    "DeployConfig",
    "DeployError",
    "FlowerConfig",
    "HdpStrategy",
    "LocalDeployment",
    "client_app",
    "deploy_local",
    "hdp_mod",
    "offline_env",
    "offline_environment",
    "require_flwr",
    "run_flower",
    "secagg_mods",
    "share_mod",
]
