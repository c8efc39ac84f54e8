"""``kiln.lower``: a schedule to a TIR PrimFunc in an IRModule.

Entry points: :func:`lower`, :data:`LOWER_PIPELINE`.

``lower(s, args, name)`` builds the loop nest of the schedule
(:mod:`kiln.te.schedule_ops`), binds each argument tensor to a Buffer (``binds`` may supply
it), wraps the statement in a PrimFunc whose params are the buffers' data handles (plus any
scalar Vars given in ``args``), and runs the passes of :data:`LOWER_PIPELINE` in order.
MakePackedAPI is not part of it: code generators apply
:func:`kiln.tir.transform.make_packed_api` to the result.
"""

from __future__ import annotations

import sys
from typing import Any

from kiln.runtime.config import debug_level
from kiln.runtime.error import TVMError
from kiln.te.schedule import Schedule
from kiln.te.schedule_ops import schedule_to_stmt
from kiln.te.tensor import Tensor
from kiln.tir import expr as _e
from kiln.tir.buffer import Buffer, decl_buffer
from kiln.tir.function import PrimFunc
from kiln.tir.transform.loop_partition import partition_loops
from kiln.tir.transform.lower_intrin import lower_intrinsics
from kiln.tir.transform.narrow_types import legalize_narrow_types
from kiln.tir.transform.simplify import simplify_prim_func
from kiln.tir.transform.storage_flatten import flatten_buffers
from kiln.tir.transform.vectorize import unroll_stmt, vectorize_stmt

__all__ = ["lower", "LOWER_PIPELINE"]


def _vectorize(func: PrimFunc) -> PrimFunc:
    from kiln.ir.transform import PassContext

    config = PassContext.current().config or {}
    if config.get("tir.disable_vectorize", False):
        from kiln.tir.stmt import ForKind
        from kiln.tir.transform.vectorize import loops_to_serial

        return func.with_body(loops_to_serial(func.body, (ForKind.VECTORIZED,)))
    return func.with_body(vectorize_stmt(func.body, simplify_ramps=False))  # Simplify next


# (name, PrimFunc -> PrimFunc), run in this order by lower()
LOWER_PIPELINE = [
    ("tir.StorageFlatten", flatten_buffers),
    ("tir.Simplify", simplify_prim_func),
    ("tir.LoopPartition", partition_loops),
    ("tir.Simplify", simplify_prim_func),
    ("tir.LegalizeNarrowTypes", legalize_narrow_types),  # before vectorizing: scalar helpers
    ("tir.UnrollLoop", lambda f: f.with_body(unroll_stmt(f.body))),
    ("tir.VectorizeLoop", _vectorize),
    ("tir.Simplify", simplify_prim_func),
    ("tir.LowerIntrin", lower_intrinsics),
]


def _arg_buffers(args, binds: dict | None) -> tuple[list, dict[int, Buffer], dict]:
    binds = dict(binds or {})
    params: list = []
    tensor_buffers: dict[int, Buffer] = {}
    buffer_map: dict = {}
    for arg in args:
        if isinstance(arg, Tensor):
            name = arg.name.replace(".", "_")  # one buffer per output: "T_v0", "T_v1"
            buf = binds.get(arg) or decl_buffer(arg.shape, arg.dtype, name=name)
            tensor_buffers[id(arg)] = buf
            params.append(buf.data)
            buffer_map[buf.data] = buf
        elif isinstance(arg, Buffer):
            params.append(arg.data)
            buffer_map[arg.data] = arg
        elif isinstance(arg, _e.Var):
            params.append(arg)
        else:
            raise TVMError(f"lower: an argument must be a te.Tensor, a tir.Buffer or a "
                           f"tir.Var, got {type(arg).__name__}")
    for tensor, buf in binds.items():
        if isinstance(tensor, Tensor) and id(tensor) not in tensor_buffers:
            tensor_buffers[id(tensor)] = buf
    return params, tensor_buffers, buffer_map


def lower(inp: Any, args: list | None = None, name: str = "main", binds: dict | None = None,
          simple_mode: bool = False):
    """Lower a schedule to an IRModule holding one PrimFunc named ``name``.

    ``inp`` may also be a PrimFunc (or an IRModule of them) that only needs the passes.

    Example
    -------
    >>> import kiln as tvm
    >>> from kiln import te
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> xo, xi = s[B].split(B.op.axis[0], factor=16)
    >>> mod = tvm.lower(s, [A, B], name="double")
    >>> print(mod["double"].script().splitlines()[-1].strip())
    B[i.outer * 16 + i.inner] = A[i.outer * 16 + i.inner] * 2.0
    """
    from kiln.ir.expr import GlobalVar
    from kiln.ir.module import IRModule

    if isinstance(inp, IRModule):
        out = IRModule({})
        for gvar in inp.get_global_vars():
            func = inp[gvar]
            out[gvar.name_hint] = _run_pipeline(func, gvar.name_hint) \
                if isinstance(func, PrimFunc) else func
        return out
    if isinstance(inp, PrimFunc):
        func = inp
    else:
        if not isinstance(inp, Schedule):
            raise TVMError(f"lower expects a te.Schedule or a tir.PrimFunc, got "
                           f"{type(inp).__name__}")
        if args is None:
            raise TVMError("lower: give the argument tensors (inputs then outputs)")
        params, tensor_buffers, buffer_map = _arg_buffers(args, binds)
        body = schedule_to_stmt(inp, tensor_buffers)
        func = PrimFunc(params, body, None, buffer_map,
                        {"global_symbol": name, "tir.noalias": True})
    return IRModule({GlobalVar(name): _run_pipeline(func, name)})


def _run_pipeline(func: PrimFunc, name: str) -> PrimFunc:
    simplified = None  # what the last tir.Simplify returned
    for pass_name, run in LOWER_PIPELINE:
        if run is simplify_prim_func and func is simplified:
            # the passes between changed nothing (LoopPartition without a likely condition):
            # simplifying again would only reorder a sum's terms, which the Simplify after
            # vectorizing puts in its order anyway (the lowered kernels of the benchmark
            # models are the same); a tenth of lowering's time
            continue
        func = run(func)
        if run is simplify_prim_func:
            simplified = func
        if debug_level() >= 2:
            print(f"[kiln] after {pass_name}:\n{func.script()}", file=sys.stderr)
    if debug_level() >= 3:
        print(f"[kiln] lowered {name}:\n{func.script()}", file=sys.stderr)
    return func
