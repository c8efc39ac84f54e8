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
    "RPCSessionTimeoutError",
    "register_error",
    "create_ffi_error",
    "ERROR_TYPE",
]

from collections.abc import Callable
from typing import Any

# Error name -> class: how an error message crossing the FFI ("OpError: ...") becomes a class.
ERROR_TYPE: dict[str, type] = {}


def register_error(func_name: Any = None, cls: type | None = None) -> Any:
    """Register an error class under a name so :func:`create_ffi_error` can build it.

    Usable as ``@register_error``, ``@register_error("Name")`` or
    ``register_error("Name", cls)``, as in TVM.

    Example
    -------
    >>> @register_error
    ... class MyError(TVMError):
    ...     pass
    >>> isinstance(create_ffi_error("MyError: xyz"), MyError)
    True
    """
    if callable(func_name):
        cls, func_name = func_name, func_name.__name__

    def register(error_cls: type) -> type:
        if not (isinstance(error_cls, type) and issubclass(error_cls, BaseException)):
            raise TypeError(f"register_error expects an exception class, got {error_cls!r}")
        ERROR_TYPE[func_name if isinstance(func_name, str) else error_cls.__name__] = error_cls
        return error_cls

    return register if cls is None else register(cls)


def create_ffi_error(message: str) -> BaseException:
    """The exception a message ``"ErrorName: text"`` stands for (TVMError when unregistered)."""
    first = message.split("\n", 1)[0]
    name, sep, _ = first.partition(":")
    error_cls: Callable[[str], BaseException] = TVMError
    if sep and name.strip() in ERROR_TYPE:
        error_cls = ERROR_TYPE[name.strip()]
    return error_cls(message)


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


for _cls in (TVMError, InternalError, RPCError, RPCSessionTimeoutError, OpError,
             OpNotImplemented, OpAttributeRequired, OpAttributeInvalid, OpAttributeUnImplemented,
             DiagnosticError, TypeInferenceError):
    register_error(_cls)
for _cls in (ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError):
    register_error(_cls.__name__, _cls)
