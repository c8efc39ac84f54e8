"""How TIR passes are packaged: :func:`prim_func_pass` and :class:`PrimFuncPass`.

A TIR pass is a function ``PrimFunc -> PrimFunc``. Wrapped as a :class:`PrimFuncPass` it
runs on an IRModule (every PrimFunc in it, like TVM's ``tvm.tir.transform`` passes, through
kiln's pass infrastructure) or directly on a single PrimFunc.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.transform import ModulePass, PassContext, PassInfo
from kiln.runtime.config import debug_level
from kiln.runtime.object import register_object
from kiln.tir.function import PrimFunc

__all__ = ["PrimFuncPass", "prim_func_pass"]


@register_object("tir.PrimFuncPass")
class PrimFuncPass(ModulePass):
    """A pass over each PrimFunc of a module; also callable on one PrimFunc."""

    _fields = {"func_pass": "any"}

    def __init__(self, func_pass: Callable[[PrimFunc], PrimFunc], name: str,
                 opt_level: int = 0) -> None:
        def run_on_module(mod, ctx: PassContext):
            out = mod.copy()
            for gvar in list(out.get_global_vars()):
                func = out[gvar]
                if isinstance(func, PrimFunc):
                    out.update_func(gvar, func_pass(func))
            return out

        super().__init__(run_on_module, PassInfo(opt_level, name))
        self._set("func_pass", func_pass)

    def __call__(self, mod: Any) -> Any:
        if isinstance(mod, PrimFunc):
            result = self.func_pass(mod)
            if debug_level() >= 2:
                import sys

                print(f"[kiln] after {self.pass_info.name}:\n{result.script()}", file=sys.stderr)
            return result
        return super().__call__(mod)


def prim_func_pass(func_pass: Callable[[PrimFunc], PrimFunc], name: str,
                   opt_level: int = 0) -> PrimFuncPass:
    """Wrap ``func_pass`` (PrimFunc -> PrimFunc) as a pass named ``name``."""
    return PrimFuncPass(func_pass, name, opt_level)
