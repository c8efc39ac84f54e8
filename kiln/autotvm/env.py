"""Process-wide AutoTVM state: :data:`GLOBAL_SCOPE` (``in_tuning`` while a builder
instantiates candidates, so templates create weights in their packed layout)."""

from __future__ import annotations

__all__ = ["AutotvmGlobalScope", "GLOBAL_SCOPE"]


class AutotvmGlobalScope:
    """Flags read by templates: ``in_tuning`` (building a candidate for measurement) and
    ``silent`` (no fallback warnings)."""

    def __init__(self) -> None:
        self.in_tuning = False
        self.silent = False


GLOBAL_SCOPE = AutotvmGlobalScope()
