"""How hard the property tests search. `make test` uses 1; `make fuzz` a larger scale.

Set `CORDSTREAM_FUZZ_SCALE=N` to multiply every property test's example count by N.
"""

from __future__ import annotations

import os


def examples(base: int) -> int:
    """`base` examples, times the scale from the environment (at least 1)."""
    return base * max(1, int(os.environ.get("CORDSTREAM_FUZZ_SCALE", "1")))
