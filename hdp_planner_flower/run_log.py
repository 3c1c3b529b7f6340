"""A deployment run's log (:meth:`~hdp_planner_flower.deploy.LocalDeployment.run`): each line of ``flwr run``'s output
after the seconds since the run started, and what the log last says went wrong."""

from __future__ import annotations

import re
from pathlib import Path

LOG_TIME = re.compile(r"^\s*\d+\.\d\d ")
"""The seconds :func:`stamped` writes before a line."""


def stamped(seconds: float, line: str) -> str:
    """A line of the run's output as its log keeps it: the seconds since the run started, then the line."""
    return f"{seconds:8.2f} {line}"


def last_error(log: Path) -> str:
    """What ``log`` last says went wrong: the text in its last error box (the ``flwr`` command draws its errors as a
    box of line characters titled "Error"), else its last line that names an error, else its last line."""
    lines = [LOG_TIME.sub("", line).strip() for line in log.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line]
    boxes = [i for i, line in enumerate(lines) if line.startswith("╭") and "Error" in line]
    if boxes:
        inside = []
        for line in lines[boxes[-1] + 1 :]:
            if line.startswith("╰"):
                break
            inside.append(line.strip("│ "))
        if any(inside):
            return " ".join(text for text in inside if text)[:300]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[-1][:300]
