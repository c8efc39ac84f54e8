"""``kiln.build``: lower a schedule (or take TIR) and generate a runnable Module.

Entry points: :func:`build`, :func:`to_ir_module`.

The steps, in order: normalize the input to an IRModule of PrimFuncs (a TE schedule is lowered
with :func:`kiln.te.lowering.lower`), resolve the target (argument, ``with Target(...)``,
else ``llvm`` when llvmlite is installed and ``c`` otherwise), then hand the module to the
target kind's build function from :data:`kiln.target.build.BUILD_FUNCTIONS`.
``KILN_DEBUG=3`` prints the lowered TIR; ``4`` also prints the generated source and the
compiler command with the cache path.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from kiln.runtime import config
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module

__all__ = ["build", "to_ir_module", "describe_schedule"]


def _default_target():
    from kiln.target import Target
    from kiln.target.codegen_llvm import llvm_available

    current = Target.current(allow_none=True)
    if current is not None:
        return current
    return Target("llvm" if llvm_available() else "c")


def to_ir_module(inputs: Any, args: Sequence[Any] | None = None,
                 name: str = "default_function", binds: Mapping | None = None) -> Any:
    """PrimFuncs by name (an IRModule, or a dict for a lone PrimFunc) from any build input."""
    from kiln.ir.module import IRModule

    kind = type(inputs).__name__
    if kind == "Schedule":
        if args is None:
            raise TVMError("build: a schedule needs `args`, the tensors of the function")
        from kiln.te.lowering import lower

        mod = lower(inputs, list(args), name=name, binds=binds)
        source = describe_schedule(inputs)
        return {gvar.name_hint: mod[gvar].with_attr("kiln.source", source)
                for gvar in mod.get_global_vars()}
    if kind == "PrimFunc":
        func = inputs
        if not func.attrs.get("global_symbol"):
            func = func.with_attr("global_symbol", name)
        return {func.attrs["global_symbol"]: func}
    if isinstance(inputs, IRModule):
        return inputs
    raise TVMError(
        f"build: expected a te.Schedule, tir.PrimFunc, IRModule or dict of target -> IRModule, "
        f"got {kind}"
    )


def describe_schedule(schedule: Any) -> str:
    """One line per computed stage, ``B[i] = exp(A[i])``: the comment atop generated code."""
    lines = []
    for stage in schedule.stages:
        op = stage.op
        body = getattr(op, "body", None)
        if not body or not hasattr(op, "axis"):
            continue
        axes = ", ".join(iv.var.name for iv in op.axis)
        lines.append(f"{op.name}[{axes}] = {body[0]!r}")
    return "; ".join(lines)


def build(inputs: Any, args: Sequence[Any] | None = None, target: Any = None,
          target_host: Any = None, name: str = "default_function",
          binds: Mapping | None = None) -> Module:
    """Build a function from a schedule or TIR into a runtime Module (TVM's ``tvm.build``).

    Parameters
    ----------
    inputs : te.Schedule, tir.PrimFunc, IRModule, or dict of target -> IRModule
    args : list of te.Tensor / tir.Var, required with a schedule (inputs, then outputs)
    target : str or Target, default ``Target.current()``, else ``"llvm"`` (``"c"`` when
        llvmlite is not installed)
    target_host : str or Target, optional; host code of a CPU target runs on the target itself
    name : the function's symbol when ``inputs`` does not name it
    binds : optional tensor -> buffer bindings for lowering

    Example
    -------
    >>> import numpy as np, kiln as tvm
    >>> from kiln import te
    >>> n = te.var("n")
    >>> A = te.placeholder((n,), name="A")
    >>> B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    >>> f = tvm.build(te.create_schedule(B.op), [A, B], target="c", name="double_it")
    >>> a = tvm.nd.array(np.arange(4, dtype="float32")); b = tvm.nd.empty((4,))
    >>> f["double_it"](a, b); b.numpy().tolist()
    [0.0, 2.0, 4.0, 6.0]
    """
    from kiln.target import Target
    from kiln.target.build import build_module

    if isinstance(inputs, Mapping):
        modules = [build(mod, args, tgt, target_host, name, binds)
                   for tgt, mod in inputs.items()]
        if not modules:
            raise TVMError("build: the dict of target -> IRModule is empty")
        root = modules[0]
        for other in modules[1:]:
            root.import_module(other)
        return root
    mod = to_ir_module(inputs, args, name, binds)
    target = _default_target() if target is None else Target(target)
    if target_host is not None:
        target = Target(target, target_host)
    if config.debug_level() >= 3:
        from kiln.target.codegen_c import functions_of

        for symbol, func in functions_of(mod):
            print(f"[kiln build] lowered TIR of {symbol} for {target}:\n{func}", file=sys.stderr)
    return build_module(mod, target)
