"""Removal of unreachable global functions (TVM's ``relay.transform.RemoveUnusedFunctions``).

Entry point: :func:`RemoveUnusedFunctions`.

A global function is kept when it is reachable from an entry function (``main`` unless
``entry_functions`` names others) through references to global variables — in calls or as
values. Everything else is removed; type definitions stay. Naming an entry function the
module lacks is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.ir.expr import GlobalVar
from kiln.relay.expr_functor import post_order_visit
from kiln.relay.transform.pass_util import relay_module_pass
from kiln.runtime.error import TVMError

__all__ = ["RemoveUnusedFunctions"]


def _referenced(func: Any) -> set[str]:
    found: set[str] = set()
    body = getattr(func, "body", None)
    if body is not None:
        post_order_visit(func, lambda n: isinstance(n, GlobalVar) and found.add(n.name_hint))
    return found


def remove_unused_functions(mod: Any, entry_functions: Sequence[str] | None = None) -> Any:
    """A copy of ``mod`` holding only the functions reachable from the entries."""
    entries = list(entry_functions) if entry_functions else ["main"]
    missing = [name for name in entries if name not in mod]
    if entry_functions and missing:
        raise TVMError(f"RemoveUnusedFunctions: entry function(s) {missing} are not in the "
                       f"module (it has {sorted(gv.name_hint for gv in mod.functions)})")
    reachable: set[str] = set()
    stack = [name for name in entries if name in mod]
    while stack:
        name = stack.pop()
        if name in reachable or name not in mod:
            continue
        reachable.add(name)
        stack.extend(_referenced(mod[name]))
    result = mod.copy()
    for gvar in list(result.functions):
        if gvar.name_hint not in reachable:
            result.remove(gvar)
    return result


def RemoveUnusedFunctions(entry_functions: Sequence[str] | None = None):  # noqa: N802
    """The pass removing global functions no entry function can reach.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], x))
    >>> mod["unused"] = relay.Function([x], x)
    >>> [gv.name_hint for gv in RemoveUnusedFunctions()(mod).get_global_vars()]
    ['main']
    """
    return relay_module_pass("RemoveUnusedFunctions", 1,
                             lambda mod, ctx: remove_unused_functions(mod, entry_functions))
