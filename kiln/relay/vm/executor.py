"""``create_executor("vm", ...)``: compile with the VM compiler, run with the VM.

Entry point: :class:`VMExecutor`.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.module import IRModule
from kiln.relay import expr as rx
from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray

__all__ = ["VMExecutor"]


class VMExecutor:
    """Evaluates Relay programs on the VM (TVM's ``relay.vm.VMExecutor``).

    ``evaluate()`` compiles ``mod`` once and returns a function of ``main``'s arguments;
    ``evaluate(expr)`` compiles ``expr`` as ``main`` of a copy of ``mod`` (a Function is called
    with arguments; any other expression is evaluated right away). The function returns
    copies of the VM's results (which are valid only until its next run), so each call's
    values are the caller's to keep, as TVM's graph executor wrapper copies its outputs.

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.add(x, x)))
    >>> run = relay.create_executor("vm", mod, kiln.cpu(0), "c").evaluate()
    >>> run(np.ones(2, "float32")).numpy()
    array([2., 2.], dtype=float32)
    """

    def __init__(self, mod: IRModule, device: Any, target: Any = None,
                 params: dict | None = None) -> None:
        if mod is None:
            raise TVMError("VMExecutor needs an IRModule")
        self.mod = mod
        self.device = device
        self.target = target
        self.params = params
        self.executable = None
        self.vm = None

    def _make(self, mod: IRModule) -> Any:
        from kiln.relay.vm.compiler import compile as vm_compile
        from kiln.runtime.vm import VirtualMachine

        self.executable = vm_compile(mod, self.target, params=self.params)
        self.vm = VirtualMachine(self.executable, self.device)
        return self.vm

    def evaluate(self, expr: Any = None, binds: dict | None = None) -> Any:
        """A Python function running ``main`` (or ``expr``) on the VM."""
        if expr is None:
            vm = self._make(self.mod)
            return lambda *args, **kwargs: _detached(vm.run(*args, **kwargs))
        if binds:
            expr = rx.bind(expr, binds)
        mod = IRModule(dict(self.mod.functions), dict(self.mod.type_definitions))
        if isinstance(expr, rx.Function):
            mod["main"] = expr
            vm = self._make(mod)
            return lambda *args, **kwargs: _detached(vm.run(*args, **kwargs))
        mod["main"] = rx.Function([], expr)
        vm = self._make(mod)
        return vm.run()


def _detached(value: Any) -> Any:
    """``value`` with every tensor copied out of the VM's storage (tuples at any depth)."""
    if isinstance(value, NDArray):
        return value.copyto(value.device)
    if isinstance(value, ADT):
        return ADT(value.tag, [_detached(field) for field in value.fields])
    return value
