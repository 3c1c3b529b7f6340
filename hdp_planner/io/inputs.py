"""Text from the command line or files into validated numbers (one-line ValueErrors naming the input)."""

from __future__ import annotations

import math


def parse_floats(text: str | None, name: str) -> tuple[float, ...] | None:
    """Parse ``"a,b,c"`` into floats, rejecting anything that is not a finite number."""
    if text is None:
        return None
    values = []
    for item in text.split(","):
        try:
            v = float(item)
        except ValueError:
            raise ValueError(f"{name}: {item.strip()!r} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{name}: {item.strip()!r} is not a finite number")
        values.append(v)
    return tuple(values)


def parse_ints(text: str | None, name: str) -> tuple[int, ...] | None:
    """Parse ``"a,b,c"`` into whole numbers."""
    values = parse_floats(text, name)
    if values is None:
        return None
    if not all(v.is_integer() for v in values):
        raise ValueError(f"{name}: every value must be a whole number, got {text}")
    return tuple(int(v) for v in values)
