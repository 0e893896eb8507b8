"""`StreamConfig` for bot code: the core's config, with `from_env()` reading the process env."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Self

from cordstream.domain import config as _domain


class StreamConfig(_domain.StreamConfig):
    """The same fields and checks as `cordstream.domain.StreamConfig` (see there).

    Not re-decorated as a dataclass: it adds no field, and `@dataclass(slots=True)` would
    rebuild the class and break `super()` in `from_env`.
    """

    __slots__ = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        """Read `INACTIVITY_TIMEOUT_MS` and the `CORDSTREAM_*` variables (default: os.environ)."""
        return super().from_env(os.environ if environ is None else environ)
