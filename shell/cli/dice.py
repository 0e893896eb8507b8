"""The demos' dice tool: `roll_dice`, which `cordstream demo --bot` and `cordstream chat` offer
the model (each declares it in its provider's format)."""

from __future__ import annotations

import random
from collections.abc import Mapping

__all__ = ["roll_dice"]


async def roll_dice(arguments: Mapping[str, object]) -> object:
    """Roll `count` dice (default 1, at most 100 are rolled) with `sides` sides (default 6)."""
    sides, count = arguments.get("sides", 6), arguments.get("count", 1)
    if not isinstance(sides, int) or not isinstance(count, int) or sides < 2 or count < 1:
        raise ValueError("sides must be an integer ≥ 2 and count an integer ≥ 1")
    rolls = [random.randint(1, sides) for _ in range(min(count, 100))]  # a game, not a secret
    return {"rolls": rolls, "total": sum(rolls)}
