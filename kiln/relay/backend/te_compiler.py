"""The TE compiler: lower each primitive (fused) Relay function to one TIR PrimFunc.

Entry points: :class:`TECompiler` (``lower(func) -> LoweredFunc``, ``ir_module()``,
``build()``) and :func:`lower_primitive`.

For a function marked ``Primitive=1`` (made by FuseOps), the compiler creates a
``te.placeholder`` per tensor parameter (tuple parameters are flattened), walks the body and
asks each operator's strategy for a compute (:func:`~kiln.relay.op.strategy.
select_implementation`). The *anchor* is the op with the highest pattern kind; when it is a
complex op (reduction, conv, dense …) its implementation's schedule schedules the whole group
(TVM allows only one such op per group), otherwise the target's injective schedule does. The
schedule is lowered to a PrimFunc named ``tvmgen_<mod_name>_<fused name>``.

Lowered functions are cached by structural hash + target, so identical groups share one
kernel; the C toolchain's on-disk cache then makes a second build of the same model compile
nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.op.op import OpPattern
from kiln.runtime.error import TVMError

__all__ = ["TECompiler", "LoweredFunc", "lower_primitive", "is_reshape_only"]

# ops that only change the shape: a group made only of them runs as a zero-copy view (__nop)
_RESHAPE_OPS = frozenset({"reshape", "squeeze", "expand_dims", "nn.batch_flatten",
                          "reshape_like", "contrib_reverse_reshape"})


@dataclass
class LoweredFunc:
    """A lowered primitive: its kernel name, PrimFunc, and hash attribute (16 hex digits)."""

    name: str
    prim_func: Any
    hash: str
    num_inputs: int
    num_outputs: int
    num_ops: int = 1


# Python frames one fused Relay op may need in the recursive TE/TIR walks below it: an op nests
# its TIR expression a few levels deep (sigmoid: 1 / (1 + exp(-x))), and each level costs the
# lowering passes, the arith simplifier and codegen a handful of frames.
_FRAMES_PER_FUSED_OP = 64


@contextlib.contextmanager
def kernel_recursion_room(num_ops: int) -> Iterator[None]:
    """Let the recursive TE/TIR walks of a kernel fused from ``num_ops`` ops run, then restore.

    A fused kernel's expressions nest at most as deep as its Relay calls, and FuseOps caps a
    group at ``relay.FuseOps.max_depth`` ops (256 by default), so the increase is bounded by
    the kernel: it is not a global lift of Python's recursion limit.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + _FRAMES_PER_FUSED_OP * max(num_ops, 1))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _count_calls(func: rx.Function) -> int:
    from kiln.relay.expr_functor import post_order_visit

    calls = [0]

    def count(node: Any) -> None:
        if isinstance(node, rx.Call):
            calls[0] += 1

    post_order_visit(func.body, count)
    return calls[0]


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    if not isinstance(ty, TensorType):
        raise TVMError(f"a primitive function can only take and return tensors, got {ty!r}")
    return [ty]


def is_reshape_only(func: rx.Function) -> bool:
    """Whether a primitive function only reshapes its single input (TVM's reshape_only)."""
    calls = []
    node = func.body
    while isinstance(node, rx.Call) and isinstance(node.op, Op):
        calls.append(node.op.name)
        if len(node.args) != 1 and node.op.name != "reshape_like":
            return False
        node = node.args[0]
    return bool(calls) and all(c in _RESHAPE_OPS for c in calls) and node in func.params


class _ComputeBuilder:
    """Builds the te compute of a primitive function body, remembering the anchor op."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.memo: dict[int, list] = {}
        self.anchor: tuple[int, Any, Any, list] | None = None  # (pattern, impl, attrs, outs)

    def visit(self, node: Any) -> list:
        key = id(node)
        if key in self.memo:
            return self.memo[key]
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise TVMError(f"cannot lower {type(node).__name__} inside a primitive function")
        result = method(node)
        self.memo[key] = result
        return result

    def visit_Constant(self, node: rx.Constant) -> list:
        from kiln import te

        array = node.data.numpy()
        if array.ndim != 0:
            raise TVMError("a non-scalar constant inside a primitive function; FuseOps must "
                           "pass it as a parameter")
        dtype = str(array.dtype)
        return [te.compute((), lambda: te.const(array.item(), dtype), name="compile_engine_const")]

    def visit_Tuple(self, node: rx.Tuple) -> list:
        return [t for f in node.fields for t in self.visit(f)]

    def visit_TupleGetItem(self, node: rx.TupleGetItem) -> list:
        fields = self.visit(node.tuple_value)
        sizes = [len(_flat_types(t)) for t in node.tuple_value.checked_type.fields]
        start = sum(sizes[: node.index])
        return fields[start: start + sizes[node.index]]

    def visit_Let(self, node: rx.Let) -> list:
        self.memo[id(node.var)] = self.visit(node.value)
        return self.visit(node.body)

    def visit_Call(self, node: rx.Call) -> list:
        from kiln.relay.op.strategy import select_implementation

        if not isinstance(node.op, Op):
            raise TVMError(f"a primitive function may only call operators, found {node.op!r}")
        inputs = [t for a in node.args for t in self.visit(a)]
        out_type = node.checked_type
        impl, outs = select_implementation(node.op, node.attrs, inputs, out_type, self.target)
        pattern = node.op.get_attr("TOpPattern")
        pattern = int(OpPattern.OPAQUE if pattern is None else pattern)
        if pattern >= OpPattern.COMM_REDUCE and self.anchor is not None \
                and self.anchor[0] >= OpPattern.COMM_REDUCE:
            raise TVMError("Cannot apply TOPI schedule to a primitive function with two "
                           f"complicated ops ({self.anchor[1].name} and {impl.name})")
        if self.anchor is None or pattern >= self.anchor[0]:
            self.anchor = (pattern, impl, node.attrs, outs)
        return outs


def lower_primitive(func: rx.Function, target: Any, name: str) -> Any:
    """Lower one primitive Relay function to a PrimFunc named ``name``."""
    from kiln import te
    from kiln.relay.op.strategy import target_schedule
    from kiln.te.lowering import lower

    builder = _ComputeBuilder(target)
    inputs = []
    for param in func.params:
        types = _flat_types(param.checked_type)
        # a tuple parameter flattens to one placeholder per field, each with its own name
        names = [param.name_hint] if len(types) == 1 else [
            f"{param.name_hint}_{i}" for i in range(len(types))]
        tensors = [te.placeholder(tuple(t.concrete_shape), str(t.dtype), name=name)
                   for t, name in zip(types, names)]
        builder.memo[id(param)] = tensors
        inputs.extend(tensors)
    outputs = builder.visit(func.body)
    # an output that is an input (identity group) needs a copy to have its own buffer
    outputs = [te.compute(o.shape, lambda *i, o=o: o(*i), name="copy")
               if any(o is i for i in inputs) else o for o in outputs]
    anchor = builder.anchor
    if anchor is not None and anchor[0] >= OpPattern.COMM_REDUCE:
        _, impl, attrs, _ = anchor
        sch = impl.schedule(attrs, outputs, target)
    else:
        sch = target_schedule("injective", outputs, target)
    lowered = lower(sch, inputs + outputs, name=name)
    prim_func = lowered[name] if isinstance(lowered, IRModule) else lowered
    return prim_func, len(inputs), len(outputs)


class TECompiler:
    """Lowers primitive functions for one target, sharing kernels between equal functions."""

    def __init__(self, target: Any, mod_name: str = "default") -> None:
        from kiln.target import Target

        self.target = Target(target) if isinstance(target, str) else target
        self.prefix = f"tvmgen_{mod_name}_" if mod_name else ""
        self._cache: dict[int, list[tuple[rx.Function, LoweredFunc]]] = {}
        self._names: set[str] = set()
        self.lowered: list[LoweredFunc] = []

    def lower(self, func: rx.Function) -> LoweredFunc:
        """The kernel of a primitive function (lowered once per structurally equal function)."""
        key = structural_hash(func)
        for seen, lowered in self._cache.get(key, ()):
            if structural_equal(seen, func):
                return lowered
        from kiln.relay.transform.fuse_ops import fused_function_name

        name = self._unique(self.prefix + fused_function_name(func))
        num_ops = _count_calls(func)
        with kernel_recursion_room(num_ops):
            prim_func, n_in, n_out = lower_primitive(func, self.target, name)
        lowered = LoweredFunc(name, prim_func, f"{key & (2**64 - 1):016x}", n_in, n_out,
                              num_ops)
        self._cache.setdefault(key, []).append((func, lowered))
        self.lowered.append(lowered)
        return lowered

    def _unique(self, name: str) -> str:
        candidate, k = name, 0
        while candidate in self._names:
            k += 1
            candidate = f"{name}_{k}"
        self._names.add(candidate)
        return candidate

    def ir_module(self) -> IRModule:
        """Every lowered PrimFunc, by kernel name."""
        return IRModule({lowered.name: lowered.prim_func for lowered in self.lowered})

    def build(self) -> Any:
        """Compile all kernels into one runtime Module (one C/LLVM translation unit)."""
        from kiln.target.build import build_module

        deepest = max((lowered.num_ops for lowered in self.lowered), default=1)
        with kernel_recursion_room(deepest):
            return build_module(self.ir_module(), self.target)
