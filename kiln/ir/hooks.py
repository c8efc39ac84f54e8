"""Hooks: the few operations on IR core nodes that a higher layer defines, registered by it.

Entry points: :func:`register_hook`, :func:`get_hook`, :data:`HOOK_PROVIDERS`.

``kiln.ir`` holds the nodes Relay and TIR share, and imports neither (ARCHITECTURE.md: a layer
imports only from below). A few operations on its nodes are still theirs: calling a
``GlobalVar`` or ``Constructor`` builds a ``relay.Call``, ``PrimExpr`` arithmetic is
:mod:`kiln.tir.op`'s, ``IRModule.from_expr`` needs Relay's free-variable analysis. The
package that defines one registers it here from its ``__init__`` (so it is in place whenever
any of its nodes exists); :func:`get_hook` imports the provider package named in
:data:`HOOK_PROVIDERS` when nothing registered the hook yet (``kiln.ir.IntImm(...) + 1``
before anything imported ``kiln.tir``).

Example
-------
>>> import kiln
>>> one = kiln.ir.IntImm("int32", 1)
>>> get_hook("prim_expr_ops")().add(one, 2).value
3
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["HOOK_PROVIDERS", "register_hook", "get_hook"]

# hook name -> (the package that registers it, what it does)
HOOK_PROVIDERS: dict[str, tuple[str, str]] = {
    "prim_expr_ops": ("kiln.tir", "() -> the module of PrimExpr arithmetic (add, multiply …)"),
    "make_call": ("kiln.relay", "(op, args) -> relay.Call: calling a GlobalVar/Constructor"),
    "function_from_expr": ("kiln.relay",
                           "expr -> relay.Function of its free variables (from_expr)"),
    "import_std": ("kiln.relay", "(module, file name) -> None: add a std library file"),
    "astext": ("kiln.relay", "(module, show_meta_data) -> the Relay text format"),
    "pass_by_name": ("kiln.relay", "name -> Pass, or None: PassContext(required_pass=...)"),
    "load_op_library": ("kiln.relay", "() -> None: register every operator (Op.get)"),
}

_HOOKS: dict[str, Any] = {}


def register_hook(name: str, value: Any) -> None:
    """Install the implementation of hook ``name`` (one of :data:`HOOK_PROVIDERS`)."""
    if name not in HOOK_PROVIDERS:
        raise TVMError(f"unknown IR hook {name!r}; hooks: {', '.join(sorted(HOOK_PROVIDERS))}")
    _HOOKS[name] = value


def get_hook(name: str) -> Callable[..., Any] | Any:
    """The implementation of hook ``name``, importing its provider package if needed."""
    value = _HOOKS.get(name)
    if value is None:
        provider = HOOK_PROVIDERS[name][0]
        importlib.import_module(provider)  # its __init__ registers the hook
        value = _HOOKS.get(name)
        if value is None:
            raise TVMError(f"IR hook {name!r} is not registered; {provider} should register "
                           f"it: {HOOK_PROVIDERS[name][1]}")
    return value
