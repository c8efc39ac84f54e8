"""TIR arithmetic and intrinsics (TVM's ``tvm.tir.op`` and the operator overloads).

Entry points: :func:`const`, :func:`convert_expr`, the arithmetic behind ``PrimExpr``'s Python
operators (:func:`add` ... :func:`cast`), division flavours (:func:`truncdiv`,
:func:`floordiv`, :func:`indexdiv` ...), math intrinsics (:func:`exp`, :func:`sqrt` ...),
:func:`call_intrin`, :func:`call_extern`, :func:`call_packed`, :func:`if_then_else`,
:func:`min_value` / :func:`max_value`, :func:`all` / :func:`any`, :func:`comm_reducer` and
the :data:`INTRINSICS` table.

Type promotion follows TVM: a Python number adopts the other operand's dtype (a Python float
against an integer expression makes both float32); two integer types widen to the larger; int
with float converts to the float; a scalar against a vector is broadcast. Operations on
immediates fold to immediates, and the neutral elements (``x + 0``, ``x * 1``) fold away.
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from kiln.ir.expr import FloatImm, IntImm, PrimExpr
from kiln.runtime.dtype import DataType, dtype_str
from kiln.runtime.error import TVMError
from kiln.tir import expr as _e

__all__ = [
    "INTRINSICS", "convert_expr", "const", "add", "subtract", "multiply", "divide", "floordiv",
    "floormod", "truncdiv", "truncmod", "indexdiv", "indexmod", "div", "negative", "left_shift",
    "right_shift", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "less",
    "less_equal", "greater", "greater_equal", "equal", "not_equal", "equal_op", "not_equal_op",
    "logical_and", "logical_or", "logical_not", "cast", "reinterpret", "min", "max", "abs",
    "if_then_else", "likely", "call_intrin", "call_extern", "call_pure_extern", "call_packed",
    "min_value", "max_value", "all", "any", "comm_reducer", "sum", "type_annotation", "ret",
    "isnan", "isinf", "isfinite", "power", "pow", "tvm_struct_get", "address_of",
] + [name for name in ("exp exp2 exp10 log log2 log10 log1p expm1 tanh sigmoid erf sqrt rsqrt "
                       "floor ceil round trunc nearbyint fabs sin cos tan asin acos atan sinh "
                       "cosh asinh acosh atanh popcount clz atan2 fmod hypot copysign nextafter "
                       "ldexp").split()]

# Every intrinsic name kiln emits in ``tir.Call.op``, with what it means. Codegen looks names
# up here (and in its own op -> C table); passes never emit a name that is not listed.
INTRINSICS: dict[str, str] = {
    # pure math, lane-wise; float unless noted
    **{f"tir.{n}": "math, 1 argument" for n in (
        "exp exp2 exp10 log log2 log10 log1p expm1 tanh sigmoid erf sqrt rsqrt floor ceil "
        "round trunc nearbyint fabs sin cos tan asin acos atan sinh cosh asinh acosh atanh "
        "isnan isinf isfinite popcount clz").split()},
    **{f"tir.{n}": "math, 2 arguments" for n in (
        "pow atan2 fmod hypot copysign nextafter ldexp").split()},
    "tir.bitwise_and": "integer a & b", "tir.bitwise_or": "integer a | b",
    "tir.bitwise_xor": "integer a ^ b", "tir.bitwise_not": "integer ~a",
    "tir.shift_left": "integer a << b", "tir.shift_right": "integer a >> b",
    "tir.if_then_else": "(cond, t, f): only the taken side is evaluated",
    "tir.masked_load": "(BufferLoad, mask): the load's lanes where mask holds, 0 elsewhere; "
                       "the other lanes' memory is not read (tir.MaskFaultingLanes)",
    "tir.likely": "(cond): cond, marked as usually true (loop partition hint)",
    "tir.reinterpret": "(x): bit cast to the call's dtype",
    "tir.call_extern": "(StringImm name, args...): call the C function `name`",
    "tir.call_pure_extern": "like call_extern, without side effects",
    "tir.tvm_call_packed": "(StringImm name, args...): call a global PackedFunc; Buffer "
                           "arguments are passed as DLTensor* built from the buffer's fields",
    "tir.tvm_struct_get": "(handle, index, kind): field `kind` (k* below) of DLTensor "
                          "`handle`[index], or TVMValue content for kTVMValueContent",
    "tir.tvm_access_ptr": "(type_annotation, data, offset, extent, rw_mask): &data[offset]; "
                          "LowerIntrin rewrites it to address_of",
    "tir.address_of": "(BufferLoad): the address of the loaded element",
    "tir.type_annotation": "a typed null carrying only its dtype",
    "tir.isnullptr": "(handle): handle == NULL",
    "tir.ret": "(value): return value from the function",
    "tir.tvm_tuple": "(values...): a tuple payload of an AttrStmt (buffer_dim_align)",
}

# DLTensor / TVMValue field kinds for tir.tvm_struct_get (TVM's builtin::TVMStructFieldKind).
kArrAddr, kArrData, kArrShape, kArrStrides, kArrNDim = 0, 1, 2, 3, 4
kArrTypeCode, kArrTypeBits, kArrTypeLanes, kArrByteOffset = 5, 6, 7, 8
kArrDeviceId, kArrDeviceType, kArrKindBound_ = 9, 10, 11
kTVMValueContent, kTVMValueKindBound_ = 12, 13


# ---------------------------------------------------------------------------------------------
# conversion and promotion

def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, PrimExpr)


def const(value: Any, dtype: Any = None, span=None) -> PrimExpr:
    """An immediate of ``dtype`` (default int32 for ints, float32 for floats).

    Example
    -------
    >>> from kiln import tir
    >>> tir.const(3, "int64").dtype, tir.const(1.5).dtype
    ('int64', 'float32')
    """
    if isinstance(value, PrimExpr):
        return value if dtype is None else cast(value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -(2 ** 31) <= value < 2 ** 31 else "int64"
        else:
            dtype = "float32"
    dtype = dtype_str(dtype)
    dt = DataType(dtype)
    if dt.lanes > 1:
        return _e.Broadcast(const(value, dtype_str(dt.element_of)), dt.lanes)
    if dt.is_float:
        return FloatImm(dtype, float(value))
    return IntImm(dtype, int(value))


def convert_expr(value: Any) -> PrimExpr:
    """Turn a Python value (int, float, bool, str, IterVar, ``a == b``) into a PrimExpr."""
    if isinstance(value, _e.IterVar):
        return value.var
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, _e.EqualOp):
        return value.asobject()
    if isinstance(value, bool | int | float):
        return const(value)
    if isinstance(value, str):
        return _e.StringImm(value)
    if hasattr(value, "asobject"):  # te.Tensor slices and similar
        return value.asobject()
    raise TVMError(f"cannot convert {value!r} (a {type(value).__name__}) to a TIR expression")


def _lanes(dtype: str) -> int:
    return DataType(dtype).lanes


def _broadcast_to(value: PrimExpr, lanes: int) -> PrimExpr:
    if lanes == 1 or _lanes(value.dtype) == lanes:
        return value
    return _e.Broadcast(value, lanes)


def match_types(a: PrimExpr, b: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
    """TVM's BinaryOpMatchTypes: make both operands one dtype."""
    lanes = builtins.max(_lanes(a.dtype), _lanes(b.dtype))
    a, b = _broadcast_to(a, lanes), _broadcast_to(b, lanes)
    if a.dtype == b.dtype:
        return a, b
    ta, tb = DataType(a.dtype), DataType(b.dtype)
    if ta.is_float and not tb.is_float:
        return a, cast(b, a.dtype)
    if tb.is_float and not ta.is_float:
        return cast(a, b.dtype), b
    if ta.is_bool != tb.is_bool:
        return (cast(a, b.dtype), b) if ta.is_bool else (a, cast(b, a.dtype))
    if ta.bits != tb.bits:
        return (cast(a, b.dtype), b) if ta.bits < tb.bits else (a, cast(b, a.dtype))
    # same width, int vs uint: TVM picks the signed type's width but keeps the unsigned one
    return (a, cast(b, a.dtype)) if ta.is_uint else (cast(a, b.dtype), b)


def _operands(a: Any, b: Any) -> tuple[PrimExpr, PrimExpr]:
    if _is_number(a) and not _is_number(b):
        b = convert_expr(b)
        a = _weak_const(a, b.dtype)
    elif _is_number(b) and not _is_number(a):
        a = convert_expr(a)
        b = _weak_const(b, a.dtype)
    else:
        a, b = convert_expr(a), convert_expr(b)
    return match_types(a, b)


def _weak_const(value: int | float, other_dtype: str) -> PrimExpr:
    """A Python number next to an expression takes that expression's (element) dtype."""
    dt = DataType(other_dtype)
    element = dtype_str(dt.element_of)
    if isinstance(value, float) and not dt.is_float:
        return const(value, "float32")
    if dt.is_handle:
        return const(value)
    if dt.is_bool:
        return const(value) if not isinstance(value, bool) else const(value, "bool")
    return const(value, element)


def _imm(value: Any) -> int | float | None:
    return value.value if isinstance(value, IntImm | FloatImm) else None


def _fold(dtype: str, value: int | float) -> PrimExpr:
    if DataType(dtype).is_float:
        return FloatImm(dtype, value)
    return IntImm(dtype, int(value))


def _is_int_type(dtype: str) -> bool:
    dt = DataType(dtype)
    return dt.is_int or dt.is_uint


# ---------------------------------------------------------------------------------------------
# arithmetic with constant folding

def add(a: Any, b: Any, span=None) -> PrimExpr:
    """``a + b``."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return _fold(a.dtype, va + vb)
    if va == 0:
        return b
    if vb == 0:
        return a
    return _e.Add(a, b, span)


def subtract(a: Any, b: Any, span=None) -> PrimExpr:
    """``a - b``."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return _fold(a.dtype, va - vb)
    if vb == 0:
        return a
    return _e.Sub(a, b, span)


def multiply(a: Any, b: Any, span=None) -> PrimExpr:
    """``a * b``."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return _fold(a.dtype, va * vb)
    if va == 1:
        return b
    if vb == 1:
        return a
    if (va == 0 or vb == 0) and _is_int_type(a.dtype):
        return _fold(a.dtype, 0)
    return _e.Mul(a, b, span)


def _check_nonzero(vb, what: str) -> None:
    if vb == 0:
        raise TVMError(f"{what}: division by zero")


def divide(a: Any, b: Any, span=None) -> PrimExpr:
    """``a / b`` for floats; integer ``/`` is ambiguous in TIR, as in TVM."""
    a, b = _operands(a, b)
    if _is_int_type(a.dtype):
        raise TVMError("Cannot use / on integer expressions: use // (floordiv), "
                       "tir.truncdiv or tir.indexdiv instead")
    return div(a, b, span)


def div(a: Any, b: Any, span=None) -> PrimExpr:
    """``a / b``, truncating for integers (``tir.Div``)."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if vb is not None:
        _check_nonzero(vb, "div")
    if va is not None and vb is not None:
        if _is_int_type(a.dtype):
            q = builtins.abs(va) // builtins.abs(vb)
            return _fold(a.dtype, q if (va >= 0) == (vb >= 0) else -q)
        return _fold(a.dtype, va / vb)
    if vb == 1:
        return a
    return _e.Div(a, b, span)


truncdiv = div


def truncmod(a: Any, b: Any, span=None) -> PrimExpr:
    """``a % b`` with C (truncated) semantics (``tir.Mod``)."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if vb is not None:
        _check_nonzero(vb, "truncmod")
    if va is not None and vb is not None:
        if _is_int_type(a.dtype):
            return _fold(a.dtype, int(math.fmod(va, vb)))
        return _fold(a.dtype, math.fmod(va, vb))
    if vb == 1 and _is_int_type(a.dtype):
        return _fold(a.dtype, 0)
    return _e.Mod(a, b, span)


def floordiv(a: Any, b: Any, span=None) -> PrimExpr:
    """``floor(a / b)`` (``tir.FloorDiv`` for integers)."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if vb is not None:
        _check_nonzero(vb, "floordiv")
    if not _is_int_type(a.dtype):
        return floor(div(a, b))
    if va is not None and vb is not None:
        return _fold(a.dtype, va // vb)
    if vb == 1:
        return a
    return _e.FloorDiv(a, b, span)


def floormod(a: Any, b: Any, span=None) -> PrimExpr:
    """``a - floor(a / b) * b`` (``tir.FloorMod`` for integers)."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if vb is not None:
        _check_nonzero(vb, "floormod")
    if va is not None and vb is not None:
        return _fold(a.dtype, va % vb if _is_int_type(a.dtype) else va - math.floor(va / vb) * vb)
    if vb == 1 and _is_int_type(a.dtype):
        return _fold(a.dtype, 0)
    return _e.FloorMod(a, b, span)


indexdiv = floordiv
indexmod = floormod


def negative(a: Any, span=None) -> PrimExpr:
    """``-a``."""
    a = convert_expr(a)
    va = _imm(a)
    if va is not None:
        return _fold(a.dtype, -va)
    return subtract(_weak_const(0, a.dtype), a)


def min(a: Any, b: Any, span=None) -> PrimExpr:  # noqa: A001 - TVM's name
    """``min(a, b)``."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return a if va <= vb else b
    return _e.Min(a, b, span)


def max(a: Any, b: Any, span=None) -> PrimExpr:  # noqa: A001 - TVM's name
    """``max(a, b)``."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return a if va >= vb else b
    return _e.Max(a, b, span)


_COMPARE = {
    _e.LT: lambda x, y: x < y, _e.LE: lambda x, y: x <= y, _e.GT: lambda x, y: x > y,
    _e.GE: lambda x, y: x >= y, _e.EQ: lambda x, y: x == y, _e.NE: lambda x, y: x != y,
}


def compare(node_class: type, a: Any, b: Any, span=None) -> PrimExpr:
    """``node_class(a, b)`` (a comparison node class: LT, EQ …) after the operands' types
    are matched, folded to a bool constant when both are constants."""
    a, b = _operands(a, b)
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return IntImm("bool", int(_COMPARE[node_class](va, vb)))
    return node_class(a, b, span)


def less(a: Any, b: Any, span=None) -> PrimExpr:
    """``a < b``."""
    return compare(_e.LT, a, b, span)


def less_equal(a: Any, b: Any, span=None) -> PrimExpr:
    """``a <= b``."""
    return compare(_e.LE, a, b, span)


def greater(a: Any, b: Any, span=None) -> PrimExpr:
    """``a > b``."""
    return compare(_e.GT, a, b, span)


def greater_equal(a: Any, b: Any, span=None) -> PrimExpr:
    """``a >= b``."""
    return compare(_e.GE, a, b, span)


def equal(a: Any, b: Any, span=None) -> PrimExpr:
    """``a == b`` as an ``EQ`` node (or a folded bool)."""
    return compare(_e.EQ, a, b, span)


def not_equal(a: Any, b: Any, span=None) -> PrimExpr:
    """``a != b`` as an ``NE`` node (or a folded bool)."""
    return compare(_e.NE, a, b, span)


def equal_op(a: Any, b: Any) -> _e.EqualOp:
    """What Python's ``a == b`` returns for PrimExprs: an :class:`~kiln.tir.expr.EqualOp`."""
    a, b = _operands(a, b)
    return _e.EqualOp(a, b)


def not_equal_op(a: Any, b: Any) -> _e.NotEqualOp:
    """What Python's ``a != b`` returns for PrimExprs."""
    a, b = _operands(a, b)
    return _e.NotEqualOp(a, b)


def _as_bool(value: Any) -> PrimExpr:
    value = convert_expr(value)
    if not DataType(value.dtype).is_bool:
        value = not_equal(value, _weak_const(0, value.dtype))
    return value


def logical_and(a: Any, b: Any, span=None) -> PrimExpr:
    """``a && b``."""
    a, b = _as_bool(a), _as_bool(b)
    va, vb = _imm(a), _imm(b)
    if va is not None:
        return b if va else a
    if vb is not None:
        return a if vb else b
    return _e.And(a, b, span)


def logical_or(a: Any, b: Any, span=None) -> PrimExpr:
    """``a || b``."""
    a, b = _as_bool(a), _as_bool(b)
    va, vb = _imm(a), _imm(b)
    if va is not None:
        return a if va else b
    if vb is not None:
        return b if vb else a
    return _e.Or(a, b, span)


def logical_not(a: Any, span=None) -> PrimExpr:
    """``!a``."""
    a = _as_bool(a)
    va = _imm(a)
    if va is not None:
        return IntImm("bool", int(not va))
    return _e.Not(a, span)


def all(*args: Any, span=None) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical and of all arguments (``tir.all(a, b, c)``)."""
    if not args:
        raise TVMError("tir.all needs at least one argument")
    result = _as_bool(args[0])
    for arg in args[1:]:
        result = logical_and(result, arg)
    return result


def any(*args: Any, span=None) -> PrimExpr:  # noqa: A001 - TVM's name
    """Logical or of all arguments (``tir.any(a, b, c)``)."""
    if not args:
        raise TVMError("tir.any needs at least one argument")
    result = _as_bool(args[0])
    for arg in args[1:]:
        result = logical_or(result, arg)
    return result


def _int_call(name: str, a: Any, b: Any | None = None) -> PrimExpr:
    if b is None:
        a = convert_expr(a)
        if not _is_int_type(a.dtype):
            raise TVMError(f"{name} needs an integer operand, got {a.dtype}")
        va = _imm(a)
        if va is not None:
            return _fold(a.dtype, ~va)
        return _e.Call(a.dtype, name, [a])
    a, b = _operands(a, b)
    if not _is_int_type(a.dtype) and not DataType(a.dtype).is_bool:
        raise TVMError(f"{name} needs integer operands, got {a.dtype}")
    va, vb = _imm(a), _imm(b)
    if va is not None and vb is not None:
        return _fold(a.dtype, _INT_FOLD[name](va, vb))
    return _e.Call(a.dtype, name, [a, b])


_INT_FOLD = {
    "tir.bitwise_and": lambda x, y: x & y, "tir.bitwise_or": lambda x, y: x | y,
    "tir.bitwise_xor": lambda x, y: x ^ y, "tir.shift_left": lambda x, y: x << y,
    "tir.shift_right": lambda x, y: x >> y,
}


def bitwise_and(a: Any, b: Any, span=None) -> PrimExpr:
    """``a & b``."""
    return _int_call("tir.bitwise_and", a, b)


def bitwise_or(a: Any, b: Any, span=None) -> PrimExpr:
    """``a | b``."""
    return _int_call("tir.bitwise_or", a, b)


def bitwise_xor(a: Any, b: Any, span=None) -> PrimExpr:
    """``a ^ b``."""
    return _int_call("tir.bitwise_xor", a, b)


def bitwise_not(a: Any, span=None) -> PrimExpr:
    """``~a``."""
    return _int_call("tir.bitwise_not", a)


def left_shift(a: Any, b: Any, span=None) -> PrimExpr:
    """``a << b``."""
    return _int_call("tir.shift_left", a, b)


def right_shift(a: Any, b: Any, span=None) -> PrimExpr:
    """``a >> b``."""
    return _int_call("tir.shift_right", a, b)


def cast(value: Any, dtype: Any, span=None) -> PrimExpr:
    """Convert ``value`` to ``dtype`` (folds immediates)."""
    dtype = dtype_str(dtype)
    if _is_number(value):
        return const(value, dtype)
    value = convert_expr(value)
    if value.dtype == dtype:
        return value
    dt = DataType(dtype)
    v = _imm(value)
    if v is not None and dt.lanes == 1:
        if dt.is_float:
            return FloatImm(dtype, float(v))
        if dt.is_bool:
            return IntImm(dtype, int(bool(v)))
        return IntImm(dtype, _wrap(int(v), dt))
    if dt.lanes > 1 and _lanes(value.dtype) == 1:
        return _e.Broadcast(cast(value, dtype_str(dt.element_of)), dt.lanes)
    return _e.Cast(dtype, value, span)


def _wrap(value: int, dt: DataType) -> int:
    bits = dt.bits
    value &= (1 << bits) - 1
    if dt.is_int and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def reinterpret(dtype: Any, value: Any, span=None) -> PrimExpr:
    """Bit-cast ``value`` to ``dtype``."""
    return _e.Call(dtype_str(dtype), "tir.reinterpret", [convert_expr(value)])


def abs(x: Any, span=None) -> PrimExpr:  # noqa: A001 - TVM's name
    """``|x|``: ``tir.fabs`` for floats, a Select for signed integers."""
    x = convert_expr(x)
    dt = DataType(x.dtype)
    v = _imm(x)
    if v is not None:
        return _fold(x.dtype, builtins.abs(v))
    if dt.is_float:
        return _e.Call(x.dtype, "tir.fabs", [x])
    if dt.is_uint:
        return x
    return _e.Select(greater_equal(x, 0), x, negative(x))


def if_then_else(cond: Any, t: Any, f: Any, span=None) -> PrimExpr:
    """``cond ? t : f`` evaluating only the taken side (``tir.if_then_else``)."""
    cond = _as_bool(cond)
    t, f = _operands(t, f)
    vc = _imm(cond)
    if vc is not None:
        return t if vc else f
    return _e.Call(t.dtype, "tir.if_then_else", [cond, t, f])


def likely(cond: Any, span=None) -> PrimExpr:
    """Mark ``cond`` as likely true (the loop partitioner splits loops on it)."""
    cond = _as_bool(cond)
    if _imm(cond) is not None:
        return cond
    return _e.Call(cond.dtype, "tir.likely", [cond])


def call_intrin(dtype: Any, func_name: str, *args: Any, span=None) -> PrimExpr:
    """Call intrinsic ``func_name`` (a name in :data:`INTRINSICS`)."""
    name = func_name if func_name.startswith("tir.") else "tir." + func_name
    if name not in INTRINSICS:
        raise TVMError(f"unknown TIR intrinsic {func_name!r}; known: see kiln.tir.op.INTRINSICS")
    return _e.Call(dtype, name, list(args))


def call_extern(dtype: Any, func_name: str, *args: Any, span=None) -> PrimExpr:
    """Call the external C function ``func_name`` (``tir.call_extern``).

    Example
    -------
    >>> from kiln import tir
    >>> tir.call_extern("int32", "my_kernel", 1, 2).args[0].value
    'my_kernel'
    """
    return _e.Call(dtype, "tir.call_extern", [_e.StringImm(func_name), *args])


def call_pure_extern(dtype: Any, func_name: str, *args: Any, span=None) -> PrimExpr:
    """Call a side-effect-free external C function."""
    return _e.Call(dtype, "tir.call_pure_extern", [_e.StringImm(func_name), *args])


def call_packed(*args: Any, span=None) -> PrimExpr:
    """Call the global PackedFunc named ``args[0]`` (``tir.tvm_call_packed``).

    Buffer arguments are passed to the function as DLTensors.
    """
    if not args or not isinstance(args[0], str):
        raise TVMError("call_packed: the first argument must be the function name (a str)")
    return _e.Call("int32", "tir.tvm_call_packed", [_e.StringImm(args[0]), *args[1:]])


def tvm_struct_get(arr: Any, index: int, field: int, dtype: Any) -> PrimExpr:
    """Read field ``field`` (``kArrData`` ...) of the DLTensor/TVMValue array ``arr``."""
    return _e.Call(dtype, "tir.tvm_struct_get", [arr, const(index), const(field)])


def address_of(load: PrimExpr) -> PrimExpr:
    """The address of the element a BufferLoad reads."""
    return _e.Call("handle", "tir.address_of", [load])


def type_annotation(dtype: Any) -> PrimExpr:
    """A typed null value (used as the first argument of ``tvm_access_ptr``)."""
    return _e.Call(dtype, "tir.type_annotation", [])


def ret(value: Any) -> PrimExpr:
    """Return ``value`` from the function."""
    value = convert_expr(value)
    return _e.Call(value.dtype, "tir.ret", [value])


def min_value(dtype: Any, span=None) -> PrimExpr:
    """The smallest value of ``dtype`` (``-inf`` for floats)."""
    dt = DataType(dtype)
    if dt.is_float:
        return FloatImm(dtype_str(dtype), -math.inf)
    if dt.is_bool or dt.is_uint:
        return IntImm(dtype_str(dtype), 0)
    return IntImm(dtype_str(dtype), -(1 << (dt.bits - 1)))


def max_value(dtype: Any, span=None) -> PrimExpr:
    """The largest value of ``dtype`` (``inf`` for floats)."""
    dt = DataType(dtype)
    if dt.is_float:
        return FloatImm(dtype_str(dtype), math.inf)
    if dt.is_bool:
        return IntImm(dtype_str(dtype), 1)
    if dt.is_uint:
        return IntImm(dtype_str(dtype), (1 << dt.bits) - 1)
    return IntImm(dtype_str(dtype), (1 << (dt.bits - 1)) - 1)


# ---------------------------------------------------------------------------------------------
# math intrinsics

def _math1(name: str):
    full = "tir." + name

    def intrinsic(x: Any, span=None) -> PrimExpr:
        x = convert_expr(x)
        if name in _FLOAT_ONLY and _is_int_type(x.dtype):
            x = cast(x, "float32")
        dtype = "bool" if name in ("isnan", "isinf", "isfinite") else x.dtype
        return _e.Call(dtype, full, [x])

    intrinsic.__name__ = name
    intrinsic.__doc__ = f"Lane-wise ``{name}(x)`` as a ``{full}`` call."
    return intrinsic


def _math2(name: str):
    full = "tir." + name

    def intrinsic(x: Any, y: Any, span=None) -> PrimExpr:
        x, y = _operands(x, y)
        return _e.Call(x.dtype, full, [x, y])

    intrinsic.__name__ = name
    intrinsic.__doc__ = f"Lane-wise ``{name}(x, y)`` as a ``{full}`` call."
    return intrinsic


_FLOAT_ONLY = frozenset(
    "exp exp2 exp10 log log2 log10 log1p expm1 tanh sigmoid erf sqrt rsqrt sin cos tan asin "
    "acos atan sinh cosh asinh acosh atanh".split())

exp, exp2, exp10, log, log2, log10, log1p, expm1 = (_math1(n) for n in (
    "exp", "exp2", "exp10", "log", "log2", "log10", "log1p", "expm1"))
tanh, sigmoid, erf, sqrt, rsqrt = (_math1(n) for n in ("tanh", "sigmoid", "erf", "sqrt", "rsqrt"))
floor, ceil, round, trunc, nearbyint, fabs = (_math1(n) for n in (  # noqa: A001
    "floor", "ceil", "round", "trunc", "nearbyint", "fabs"))
sin, cos, tan, asin, acos, atan = (_math1(n) for n in ("sin", "cos", "tan", "asin", "acos",
                                                       "atan"))
sinh, cosh, asinh, acosh, atanh = (_math1(n) for n in ("sinh", "cosh", "asinh", "acosh",
                                                       "atanh"))
isnan, isinf, isfinite, popcount, clz = (_math1(n) for n in ("isnan", "isinf", "isfinite",
                                                             "popcount", "clz"))
power, atan2, fmod, hypot, copysign, nextafter, ldexp = (_math2(n) for n in (
    "pow", "atan2", "fmod", "hypot", "copysign", "nextafter", "ldexp"))
pow = power  # noqa: A001 - TVM's name
power.__name__ = "power"


# ---------------------------------------------------------------------------------------------
# reducers

def comm_reducer(fcombine, fidentity, name: str = "reduce"):
    """Make a commutative reducer such as ``te.sum`` from a combine and an identity function.

    ``fcombine(x, y)`` combines two values (or tuples of values for argmax-style reducers);
    ``fidentity(dtype)`` (or ``fidentity(dtype0, dtype1, ...)``) gives the identity.
    The result is called as ``reducer(expr, axis, where=None, init=None)``.

    Example
    -------
    >>> from kiln import te, tir
    >>> mysum = tir.comm_reducer(lambda x, y: x + y, lambda t: tir.const(0, t), name="mysum")
    >>> k = te.reduce_axis((0, 8), name="k")
    >>> A = te.placeholder((8,), name="A")
    >>> type(mysum(A[k], axis=k)).__name__
    'Reduce'
    """

    def reducer(expr, axis, where=None, init=None, *args):
        if isinstance(axis, int | PrimExpr) and not isinstance(axis, _e.IterVar):
            # reducer(a, b): combine two plain values
            return fcombine(convert_expr(expr), convert_expr(axis))
        axes = list(axis) if isinstance(axis, list | tuple) else [axis]
        exprs = list(expr) if isinstance(expr, list | tuple) else [convert_expr(expr)]
        exprs = [convert_expr(e) for e in exprs]
        dtypes = [e.dtype for e in exprs]
        lhs = [_e.Var(f"x{i}" if len(exprs) > 1 else "x", d) for i, d in enumerate(dtypes)]
        rhs = [_e.Var(f"y{i}" if len(exprs) > 1 else "y", d) for i, d in enumerate(dtypes)]
        if len(exprs) == 1:
            result = [fcombine(lhs[0], rhs[0])]
            identity = [fidentity(dtypes[0])]
        else:
            result = list(fcombine(tuple(lhs), tuple(rhs)))
            identity = list(fidentity(*dtypes))
        result = [convert_expr(r) for r in result]
        identity = [cast(convert_expr(v), d) for v, d in zip(identity, dtypes)]
        combiner = _e.CommReducer(lhs, rhs, result, identity)
        condition = const(True) if where is None else _as_bool(where)
        inits = [] if init is None else [convert_expr(v) for v in (
            init if isinstance(init, list | tuple) else [init])]
        outs = [_e.Reduce(combiner, exprs, axes, condition, i, inits)
                for i in range(len(exprs))]
        return outs[0] if len(outs) == 1 else tuple(outs)

    reducer.__name__ = name
    reducer.__doc__ = f"The ``{name}`` commutative reducer: ``{name}(expr, axis, where=None)``."
    return reducer


sum = comm_reducer(lambda x, y: add(x, y), lambda t: const(0, t), name="sum")  # noqa: A001
