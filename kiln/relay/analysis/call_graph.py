"""The call graph of an IRModule's global functions (TVM's ``relay.analysis.CallGraph``).

Entry point: :class:`CallGraph`.
"""

from __future__ import annotations

from kiln.ir.expr import GlobalVar
from kiln.relay.expr import Function
from kiln.relay.expr_functor import post_order_visit

__all__ = ["CallGraph"]


class CallGraph:
    """Which global functions each global function references.

    Example
    -------
    >>> from kiln import relay
    >>> import kiln
    >>> x = relay.var("x", shape=(1,))
    >>> mod = kiln.IRModule({"f": relay.Function([x], x)})
    >>> f = mod.get_global_var("f")
    >>> mod["main"] = relay.Function([x], relay.Call(f, [x]))
    >>> CallGraph(mod).ref_count(f), CallGraph(mod).is_recursive(f)
    (1, False)
    """

    def __init__(self, module) -> None:
        self.module = module
        self._callees: dict[GlobalVar, list[GlobalVar]] = {}
        for gvar, func in module.functions.items():
            callees: list[GlobalVar] = []
            if isinstance(func, Function):
                post_order_visit(func, lambda n, out=callees: out.append(n)
                                 if isinstance(n, GlobalVar) else None)
            self._callees[gvar] = [module.get_global_var(g.name_hint) if g.name_hint in module
                                   else g for g in callees]

    def _gvar(self, var) -> GlobalVar:
        return self.module.get_global_var(var) if isinstance(var, str) else var

    def callees(self, var) -> list[GlobalVar]:
        """Global functions referenced by ``var``'s function (each once)."""
        return list(dict.fromkeys(self._callees[self._gvar(var)]))

    def ref_count(self, var) -> int:
        """How many functions reference ``var``."""
        gvar = self._gvar(var)
        return sum(gvar in callees for callees in self._callees.values())

    def global_call_count(self, var) -> int:
        """How many distinct global functions ``var``'s function references."""
        return len(self.callees(var))

    def is_recursive(self, var) -> bool:
        """Whether ``var``'s function can reach itself through calls."""
        start = self._gvar(var)
        stack, seen = list(self.callees(start)), set()
        while stack:
            gvar = stack.pop()
            if gvar is start:
                return True
            if gvar in seen or gvar not in self._callees:
                continue
            seen.add(gvar)
            stack.extend(self.callees(gvar))
        return False

    def print_var(self, var) -> str:
        gvar = self._gvar(var)
        names = ", ".join(f"@{g.name_hint}" for g in self.callees(gvar))
        return f"@{gvar.name_hint} -> [{names}] (referenced {self.ref_count(gvar)} times)"

    def __str__(self) -> str:
        return "\n".join(self.print_var(g) for g in self._callees)
