"""The global function registry: named PackedFuncs shared by Python and C.

Entry points: :func:`register_func`, :func:`get_global_func`, :func:`list_global_func_names`,
:func:`remove_global_func`.

C code reaches the same table through ``TVMFuncRegisterGlobal`` / ``TVMFuncGetGlobal`` /
``TVMBackendGetFuncFromEnv`` (the support library forwards them here). kiln itself uses TVM's
naming conventions for lookups: ``runtime.module.loadfile_<fmt>``,
``runtime.module.loadbinary_<type_key>``, ``target.build.<kind>``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kiln.runtime.error import TVMError
from kiln.runtime.packed_func import PackedFunc, convert_to_tvm_func

__all__ = [
    "register_func",
    "get_global_func",
    "list_global_func_names",
    "remove_global_func",
    "GlobalFuncNotFoundError",
]


class GlobalFuncNotFoundError(TVMError, ValueError):
    """``get_global_func`` found no function of that name (a ValueError, as in TVM)."""


_GLOBAL_FUNCS: dict[str, PackedFunc] = {}
_lock = threading.Lock()


def register_func(
    func_name: str | Callable[..., Any],
    f: Callable[..., Any] | None = None,
    override: bool = False,
) -> Any:
    """Register ``f`` as the global function ``func_name``; usable as a decorator.

    Returns ``f`` itself (or the decorator). Registering a taken name without
    ``override=True`` raises :class:`TVMError`.

    Example
    -------
    >>> @register_func("example.double", override=True)
    ... def double(x):
    ...     return 2 * x
    >>> get_global_func("example.double")(21)
    42
    >>> @register_func
    ... def example_triple(x):
    ...     return 3 * x
    >>> remove_global_func("example_triple")
    """
    if callable(func_name) and f is None:
        return register_func(func_name.__name__, func_name, override)
    if not isinstance(func_name, str):
        raise TypeError(f"register_func expects a function name (str), got {func_name!r}")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        packed = convert_to_tvm_func(func)
        if not packed.name:
            packed._set("name", func_name)
        with _lock:
            if func_name in _GLOBAL_FUNCS and not override:
                raise TVMError(
                    f"Global PackedFunc {func_name!r} is already registered "
                    "(pass override=True to replace it)"
                )
            _GLOBAL_FUNCS[func_name] = packed
        return func

    return register if f is None else register(f)


def get_global_func(name: str, allow_missing: bool = False) -> PackedFunc | None:
    """The global function ``name``; None if missing and ``allow_missing``, else an error.

    Example
    -------
    >>> get_global_func("no.such.function", allow_missing=True) is None
    True
    """
    func = _GLOBAL_FUNCS.get(name)
    if func is None and not allow_missing:
        raise GlobalFuncNotFoundError(f"Cannot find global function {name}")
    return func


def list_global_func_names() -> list[str]:
    """Names of all registered global functions, sorted."""
    return sorted(_GLOBAL_FUNCS)


def remove_global_func(name: str) -> None:
    """Unregister ``name``; raises :class:`TVMError` if it is not registered."""
    with _lock:
        if _GLOBAL_FUNCS.pop(name, None) is None:
            raise GlobalFuncNotFoundError(f"Cannot remove global function {name}: not registered")
