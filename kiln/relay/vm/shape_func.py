"""VM bytecode for shape functions: ``ShapeOf`` + ``InvokePacked`` of a primitive's shape kernel.

Entry point: :func:`emit_shape_function` (used by the VM compiler).

The shape kernel itself is lowered by the one TE compiler
(:meth:`~kiln.relay.backend.te_compiler.TECompiler.lower_shape_func`, rules composed in
:mod:`kiln.relay.backend.shape_func`); this module only emits the instructions that feed it
the run-time shapes (or values, for a data-dependent function) and allocate its outputs.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.type import TupleType
from kiln.relay import expr as rx
from kiln.relay.backend.shape_func import needs_input_data
from kiln.runtime.vm import bytecode as bc

__all__ = ["emit_shape_function", "needs_input_data"]


def _flat_types(ty: Any) -> list[Any]:
    return [t for f in ty.fields for t in _flat_types(f)] if isinstance(ty, TupleType) else [ty]


def emit_shape_function(compiler: Any, func: rx.Function,
                        args: list[int]) -> list[tuple[int, int] | None]:
    """Emit ShapeOf + InvokePacked of ``func``'s shape function.

    ``compiler`` is the VM's function compiler (``emit``, ``emit_dst``, ``alloc``, ``ctx``).
    Returns, per flat output, ``(shape register, byte-size register)``, or None for an output
    whose shape is static. With only static outputs, the kernel is called when it checks
    that the run-time inputs agree with them, and nothing is emitted otherwise.
    """
    shape_func = compiler.ctx.tec.lower_shape_func(func)
    if shape_func.name is None:
        return [None] * len(shape_func.dynamic)
    flat_args: list[int] = []
    for param, register in zip(func.params, args):
        if isinstance(param.checked_type, TupleType):
            for k in range(len(_flat_types(param.checked_type))):
                flat_args.append(compiler.emit_dst(
                    lambda d, k=k, r=register: bc.GetField(r, k, d)))
        else:
            flat_args.append(register)
    if shape_func.by_value:
        inputs = [flat_args[i] for i in shape_func.inputs]
    else:
        inputs = [compiler.emit_dst(lambda d, r=flat_args[i]: bc.ShapeOf(r, d))
                  for i in shape_func.inputs]
    out_types = _flat_types(func.body.checked_type)
    results: list[tuple[int, int] | None] = []
    out_registers: list[int] = []
    for ty, is_dynamic in zip(out_types, shape_func.dynamic):
        if not is_dynamic:
            results.append(None)
            continue
        shape_reg = compiler.alloc.static_tensor((len(ty.shape),), "int64", True)
        size_reg = compiler.alloc.static_tensor((1,), "int64", True)
        out_registers += [shape_reg, size_reg]
        results.append((shape_reg, size_reg))
    if shape_func.checked:
        out_registers.append(compiler.alloc.static_tensor((1,), "int64", True))
    packed = compiler.ctx.packed_index(shape_func.name)
    compiler.emit(bc.InvokePacked(packed, len(out_registers), tuple(inputs + out_registers)))
    return results

