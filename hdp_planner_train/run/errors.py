"""The error a run reports to its user."""

from __future__ import annotations


class TrainError(ValueError):
    """A setting the user can fix: reported as one line, exit status 2, nothing written."""
