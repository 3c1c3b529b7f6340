"""The trust models' names and whether each lets the server see the clipped updates: what a node reads off a server's
message before it loads anything else. The registry (:mod:`.registry`) maps the same names to their classes, whose
``sees_updates`` agree with :data:`SEES_UPDATES` (tested)."""

from __future__ import annotations

SEES_UPDATES: dict[str, bool] = {"server": True, "secagg": False}
"""Every trust model by name, the default first: whether its server sees each sampled client's clipped update."""


def sees_updates(name: str) -> bool:
    """Whether the trust model called ``name`` lets the server see the clipped updates (an unknown name: no)."""
    return SEES_UPDATES.get(name, False)
