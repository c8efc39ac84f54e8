"""The error kiln.jit raises for programs it cannot compile or for ill-typed operations."""

from __future__ import annotations

from kiln.runtime.error import TVMError


class JitError(TVMError):
    """A construct kiln.jit cannot compile, or a type/shape error, with the source location."""

    def __init__(self, message: str, loc=None):
        if loc is not None:
            text = f"\n    {loc.text.strip()}" if getattr(loc, "text", "") else ""
            message = f"{message}\n  at {loc}{text}"
        super().__init__(message)
