"""kiln's error hierarchy, rooted at :class:`TVMError` (alias :class:`KilnError`).

Names follow TVM (``tvm.error``) so user code that catches them ports unchanged.
"""

from __future__ import annotations

__all__ = [
    "TVMError",
    "KilnError",
    "InternalError",
    "RPCError",
    "RPCSessionTimeoutError",
    "OpError",
    "OpNotImplemented",
    "OpAttributeRequired",
    "OpAttributeInvalid",
    "OpAttributeUnImplemented",
    "DiagnosticError",
    "TypeInferenceError",
]


class TVMError(RuntimeError):
    """Base of every error kiln raises on purpose."""


KilnError = TVMError


class InternalError(TVMError):
    """An invariant of kiln itself was broken (a bug in kiln, not in the input)."""


class RPCError(TVMError):
    """An error in the RPC / microTVM transport or session layer."""


class RPCSessionTimeoutError(RPCError, TimeoutError):
    """An RPC session outlived its ``session_timeout`` (TVM's ``tvm.error`` name)."""


class OpError(TVMError):
    """Base of operator-related errors raised by frontends."""


class OpNotImplemented(OpError, NotImplementedError):
    """An operator is not supported (by a frontend or a target)."""


class OpAttributeRequired(OpError, AttributeError):
    """A required operator attribute is missing."""


class OpAttributeInvalid(OpError, AttributeError):
    """An operator attribute has an invalid value."""


class OpAttributeUnImplemented(OpError, NotImplementedError):
    """An operator attribute value is valid but not supported."""


class DiagnosticError(TVMError):
    """An error reported with source location (span) information."""


class TypeInferenceError(DiagnosticError):
    """Type inference failed: the message names the expression and the mismatch."""
