"""TVM's ``tvm._ffi``: the registration entry points code written for TVM imports from here.

kiln has no C++ core, so these are kiln's own registries: :func:`register_func` and
:func:`get_global_func` (the global function table), :func:`register_object` (node types),
:func:`register_error` (error names), and :func:`_init_api`, which copies a namespace of global
functions onto a module as TVM's generated ``_ffi_api`` modules do.
"""

from __future__ import annotations

import sys

from kiln.runtime.error import register_error
from kiln.runtime.object import register_object
from kiln.runtime.registry import get_global_func, list_global_func_names, register_func

__all__ = ["register_func", "get_global_func", "list_global_func_names", "register_object",
           "register_error", "_init_api"]


def _init_api(namespace: str, target_module_name: str | None = None) -> None:
    """Set each global function ``<namespace>.<name>`` as attribute ``name`` of a module.

    ``namespace`` may carry TVM's ``tvm.`` prefix (``"tvm.relay.op"`` reads functions
    registered as ``relay.op.*``); the module is ``target_module_name`` or ``namespace`` itself
    and must already be imported. Names with further dots stay in their sub-namespace.
    """
    module_name = target_module_name or namespace
    if module_name not in sys.modules:
        raise ValueError(f"_init_api: module {module_name!r} is not imported")
    module = sys.modules[module_name]
    prefix = namespace[len("tvm."):] if namespace.startswith("tvm.") else namespace
    for name in list_global_func_names():
        if not name.startswith(prefix + "."):
            continue
        short = name[len(prefix) + 1:]
        if "." in short:
            continue
        setattr(module, short, get_global_func(name))
