"""Where hdp-planner keeps what outlives a run on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def user_data_folder() -> Path:
    """The user's data folder of hdp-planner: ``$XDG_DATA_HOME/hdp-planner``, else ``~/.local/share/hdp-planner``."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "hdp-planner"
