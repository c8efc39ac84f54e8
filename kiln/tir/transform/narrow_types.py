"""LegalizeNarrowTypes: bfloat16, the 8-bit floats and the sub-byte integers become bit
patterns that every codegen prints as plain ``uint8_t``/``uint16_t``, with their conversions
and arithmetic spelled out (TVM's BF16/FP8 ``ComputeLegalize`` + ``StorageLegalize``).

Entry points: :func:`LegalizeNarrowTypes` (the pass), :func:`legalize_narrow_types`.

The narrow types are ``bfloat16``, ``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2``,
``float8_e5m2fnuz`` ("narrow floats") and ``int4``/``uint4``/``int2``/``uint2`` (stored one per
byte in the low bits). After the pass a narrow value is only loaded, stored, selected, bound
by a let or broadcast; everything else goes through the C helpers of
:mod:`kiln.target.narrow_types_c` (``tir.call_extern``):

- ``Cast`` from a narrow float is ``kiln_<type>_to_f32(bits)`` (exact), then a float32 cast;
  to a narrow float, a float32 cast of the value then ``kiln_to_<type>``; a sub-byte integer
  is read with ``kiln_signed_bits`` (or a mask) and made with ``kiln_wrap_bits`` /
  ``kiln_float_to_bits`` (the rules are in that module's docstring);
- arithmetic, comparisons and math intrinsics on narrow values compute in float32 (narrow
  floats) or int32 (sub-byte integers) and cast the result back, once per operation;
- narrow constants become their bit patterns at compile time;
- an accumulation into a narrow buffer (a store whose value reads the buffer: sums,
  matmuls, convolutions, scans) is an error: rounding every step would disagree with the
  interpreter and ONNX's reference; max/min accumulations (exact) are fine.

The helper calls keep a loop serial (the vectorizer does not widen extern calls), so the pass
runs before VectorizeLoop; a narrow vector that reaches it anyway is an error naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.expr import FloatImm, IntImm, PrimExpr
from kiln.runtime.dtype import DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator
from kiln.tir.transform.base import prim_func_pass

__all__ = ["LegalizeNarrowTypes", "legalize_narrow_types", "is_narrow"]

# calls whose narrow arguments or result are bits moved around, not values computed with
_BIT_MOVERS = frozenset({"tir.if_then_else", "tir.likely", "tir.call_extern",
                         "tir.call_pure_extern", "tir.reinterpret", "tir.address_of",
                         "tir.tvm_access_ptr", "tir.type_annotation"})
_ARITH = (_e.Add, _e.Sub, _e.Mul, _e.Div, _e.Mod, _e.FloorDiv, _e.FloorMod, _e.Min, _e.Max)
_COMPARE = (_e.EQ, _e.NE, _e.LT, _e.LE, _e.GT, _e.GE)


def is_narrow(dtype: Any) -> bool:
    """Whether ``dtype`` (of any lane count) is one of the narrow types of this pass."""
    t = DataType(str(dtype))
    return t.is_float8 or t.type_code == DataTypeCode.BFLOAT or (
        t.type_code in (DataTypeCode.INT, DataTypeCode.UINT) and t.bits in (2, 4))


def _wide(dtype: DataType) -> str:
    """The type a narrow type computes in."""
    return "float32" if dtype.is_float else "int32"


def _bits_of_constant(value: float | int, dtype: DataType) -> int:
    """The bit pattern of a constant of narrow ``dtype`` (Relay cast rules)."""
    if not dtype.is_float:
        return int(value) & ((1 << dtype.bits) - 1)
    x = np.float32(value)
    if dtype.is_float8:
        import ml_dtypes

        largest = float(ml_dtypes.finfo(dtype.numpy_dtype).max)
        x = np.float32(np.clip(x, -largest, largest))
    storage = "uint16" if dtype.bits == 16 else "uint8"
    return int(np.array([x]).astype(dtype.numpy_dtype).view(storage)[0])


class _Legalizer(StmtExprMutator):
    """Rewrites scalar narrow-typed expressions as described in the module docstring."""

    @staticmethod
    def _scalar(node: PrimExpr, dtype: Any) -> DataType:
        t = DataType(str(dtype))
        if t.lanes > 1:
            raise TVMError(f"LegalizeNarrowTypes: a {t} vector expression ({node!r}) must not "
                           "be vectorized before this pass")
        return t

    # -- conversions ---------------------------------------------------------------------
    def to_wide(self, value: PrimExpr, source: DataType, target: str) -> PrimExpr:
        """A legalized narrow ``value`` of type ``source`` as ``target`` (a non-narrow type)."""
        if source.is_float:
            f32 = _e.Call("float32", "tir.call_extern",
                          [_e.StringImm(f"kiln_{source}_to_f32"), value])
            return f32 if target == "float32" else _e.Cast(target, f32)
        signed = _e.Call("int8", "tir.call_extern",
                         [_e.StringImm("kiln_signed_bits"), value, IntImm("int32", source.bits)])
        raw = signed if source.is_int else _e.Cast("int8", value)  # uint: the byte itself
        return raw if target == "int8" else _e.Cast(target, raw)

    def from_wide(self, value: PrimExpr, target: DataType) -> PrimExpr:
        """The bits of narrow ``target`` holding a (legalized, non-narrow) ``value``."""
        source = DataType(str(value.dtype))
        if target.is_float:
            f32 = value if source == "float32" else _e.Cast("float32", value)
            return _e.Call(str(target), "tir.call_extern",
                           [_e.StringImm(f"kiln_to_{target}"), f32])
        if source.is_float:
            wide = value if source == "float64" else _e.Cast("float64", value)
            helper, args = "kiln_float_to_bits", [wide]
        else:
            wide = value if source == "int64" else _e.Cast("int64", value)
            helper, args = "kiln_wrap_bits", [wide]
        return _e.Call(str(target), "tir.call_extern",
                       [_e.StringImm(helper), *args, IntImm("int32", target.bits)])

    def convert(self, value: PrimExpr, source: Any, target: Any) -> PrimExpr:
        """A legalized ``value`` of ``source`` as ``target`` (either may be narrow)."""
        source, target = DataType(str(source)), DataType(str(target))
        if source == target:
            return value
        if is_narrow(source):
            via = "float32" if is_narrow(target) and target.is_float else (
                str(target) if not is_narrow(target) else _wide(source))
            value, source = self.to_wide(value, source, via), DataType(via)
        if is_narrow(target):
            return self.from_wide(value, target)
        return value if source == target else _e.Cast(str(target), value)

    # -- visitors ------------------------------------------------------------------------
    def visit_BufferStore(self, node: Any) -> Any:
        if is_narrow(node.buffer.dtype) and not isinstance(node.value, _e.Max | _e.Min) \
                and _reads(node.value, node.buffer):
            # an accumulation (sum, matmul, conv, cumsum ...): rounding each step to the
            # narrow type gives another answer than the interpreter (ml_dtypes) and ONNX's
            # reference, which accumulate in their own orders and precisions
            raise TVMError(f"kiln does not compile accumulations in {node.buffer.dtype} (buffer "
                           f"{node.buffer.name!r}): cast the operands to float32 first")
        return self.generic_visit(node)

    def visit_Cast(self, node: _e.Cast) -> PrimExpr:
        value = self.visit(node.value)
        source = DataType(str(node.value.dtype))
        if not (is_narrow(node.dtype) or is_narrow(source)):
            return node if value is node.value else _e.Cast(node.dtype, value)
        self._scalar(node, node.dtype)
        return self.convert(value, source, node.dtype)

    def visit_FloatImm(self, node: FloatImm) -> PrimExpr:
        return self._constant(node)

    def visit_IntImm(self, node: IntImm) -> PrimExpr:
        return self._constant(node)

    def _constant(self, node: PrimExpr) -> PrimExpr:
        if not is_narrow(node.dtype):
            return node
        t = self._scalar(node, node.dtype)
        storage = "uint16" if t.bits == 16 else "uint8"
        bits = IntImm(storage, _bits_of_constant(node.value, t))
        return _e.Call(str(t), "tir.reinterpret", [bits])

    def _widened(self, node: PrimExpr, operands: list[PrimExpr]) -> tuple[list, DataType]:
        narrow = next(DataType(str(o.dtype)) for o in operands if is_narrow(o.dtype))
        self._scalar(node, narrow)
        wide = _wide(narrow)
        new = [self.visit(o) for o in operands]
        return [self.convert(v, o.dtype, wide) for v, o in zip(new, operands)], narrow

    def _arith(self, node: Any) -> PrimExpr:
        if not is_narrow(node.dtype):
            return self.generic_visit(node)
        (a, b), narrow = self._widened(node, [node.a, node.b])
        return self.convert(type(node)(a, b), _wide(narrow), narrow)

    def _compare(self, node: Any) -> PrimExpr:
        if not is_narrow(node.a.dtype):
            return self.generic_visit(node)
        (a, b), _ = self._widened(node, [node.a, node.b])
        return type(node)(a, b)

    def visit_Call(self, node: _e.Call) -> PrimExpr:
        narrow_args = [a for a in node.args if isinstance(a, PrimExpr) and is_narrow(a.dtype)]
        if node.op in _BIT_MOVERS or not (is_narrow(node.dtype) or narrow_args):
            return self.generic_visit(node)
        narrow = DataType(str(node.dtype)) if is_narrow(node.dtype) else \
            DataType(str(narrow_args[0].dtype))
        self._scalar(node, narrow)
        wide = _wide(narrow)
        args = [self.convert(self.visit(a), a.dtype, wide)
                if isinstance(a, PrimExpr) and is_narrow(a.dtype) else self.visit(a)
                for a in node.args]
        if not is_narrow(node.dtype):
            return _e.Call(node.dtype, node.op, args)
        return self.convert(_e.Call(wide, node.op, args), wide, node.dtype)


def _reads(expr: PrimExpr, buffer: Any) -> bool:
    """Whether ``expr`` loads from ``buffer``'s memory."""
    from kiln.tir.stmt_functor import post_order_visit

    found = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, _e.BufferLoad)
                     and n.buffer.data is buffer.data else None)
    return bool(found)


for _cls in _ARITH:
    setattr(_Legalizer, f"visit_{_cls.__name__}", _Legalizer._arith)
for _cls in _COMPARE:
    setattr(_Legalizer, f"visit_{_cls.__name__}", _Legalizer._compare)


# the scalar names of the narrow types (a vector's name is one of these + "x<lanes>")
_NARROW_NAMES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                           "float8_e5m2fnuz", "int4", "uint4", "int2", "uint2"})


def _mentions_narrow(func: PrimFunc) -> bool:
    """Whether any buffer or expression of ``func`` has a narrow type (the common case: no).
    Runs on every kernel, so it only compares each node's dtype string with a set."""
    from kiln.tir.stmt_functor import pre_order_visit

    if any(str(b.dtype).partition("x")[0] in _NARROW_NAMES for b in func.buffer_map.values()):
        return True
    found = []

    def check(node: Any) -> bool:
        dtype = getattr(node, "dtype", None)
        if type(dtype) is str and dtype.partition("x")[0] in _NARROW_NAMES:
            found.append(node)
        return not found  # stop descending once one is found

    pre_order_visit(func.body, check)
    return bool(found)


def legalize_narrow_types(func: PrimFunc) -> PrimFunc:
    """Apply the rewrites listed in the module docstring to ``func``."""
    if not _mentions_narrow(func):
        return func
    return func.with_body(_Legalizer().visit(func.body))


def LegalizeNarrowTypes():  # noqa: N802 - a pass factory, named like TVM's passes
    """The LegalizeNarrowTypes pass."""
    return prim_func_pass(legalize_narrow_types, "tir.LegalizeNarrowTypes")
