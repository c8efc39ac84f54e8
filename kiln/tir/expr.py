"""TIR expression nodes (TVM's ``tvm.tir.expr``).

Entry points: :class:`Var`, :class:`SizeVar`, :class:`IterVar`, :class:`StringImm`,
:class:`Cast`, the binary nodes (:class:`Add` ... :class:`Max`, comparisons :class:`EQ` ...
:class:`GE`, :class:`And`, :class:`Or`), :class:`Not`, :class:`Select`,
:class:`BufferLoad`, :class:`ProducerLoad`, :class:`Ramp`, :class:`Broadcast`, :class:`Let`,
:class:`Call`, :class:`Shuffle`, :class:`Reduce`, :class:`CommReducer`; plus the Python-side
:class:`EqualOp` / :class:`NotEqualOp` that ``a == b`` returns.

Node constructors take TVM's argument order. Field names are TVM's, so ``For.loop_var``,
``Add.a`` and ``Call.op`` read as in TVM. ``Call.op`` is the intrinsic's name as a string
(``"tir.exp"``); the table of names kiln emits is :data:`kiln.tir.op.INTRINSICS`.

Binding fields (variables a node introduces, for structural equality) are listed per class in
``_sequal_def_fields``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any as _AnyValue

from kiln.ir.base import Span
from kiln.ir.expr import FloatImm, IntImm, PrimExpr, Range
from kiln.ir.type import Any, PointerType, PrimType, Type
from kiln.runtime.dtype import DataType, dtype_str
from kiln.runtime.object import Object, register_object

__all__ = [
    "Any", "IntImm", "FloatImm", "Var", "SizeVar", "IterVar", "IterVarType", "StringImm",
    "Cast", "Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE",
    "LT", "LE", "GT", "GE", "And", "Or", "Not", "Select", "BufferLoad", "ProducerLoad", "Ramp",
    "Broadcast", "Let", "Call", "Shuffle", "Reduce", "CommReducer", "EqualOp", "NotEqualOp",
    "with_lanes", "lanes_of", "element_of",
]


def lanes_of(dtype: _AnyValue) -> int:
    """Number of vector lanes of a dtype (1 for scalars)."""
    return DataType(dtype).lanes


def element_of(dtype: _AnyValue) -> str:
    """The scalar dtype of a (possibly vector) dtype."""
    return dtype_str(DataType(dtype).element_of)


def with_lanes(dtype: _AnyValue, lanes: int) -> str:
    """``dtype`` with ``lanes`` lanes (``with_lanes("float32", 8) == "float32x8"``)."""
    return dtype_str(DataType(dtype).with_lanes(lanes))


def _expr(value: _AnyValue) -> PrimExpr:
    if isinstance(value, PrimExpr) and not isinstance(value, IterVar):
        return value  # the common case, without convert_expr's import
    from kiln.tir.op import convert_expr

    return convert_expr(value)


@register_object("tir.Var")
class Var(PrimExpr):
    """A scalar variable; ``Var("n", "int32")``; a handle var may carry a ``PointerType``."""

    _fields = {"name": str, "type_annotation": Type}
    _sequal_var = True
    _sequal_ignore = ("span", "name")

    def __init__(self, name: str = "v", dtype: _AnyValue = "int32",
                 span: Span | None = None) -> None:
        annotation = None
        if isinstance(dtype, PointerType):
            annotation, dtype = dtype, "handle"
        elif isinstance(dtype, Type) and not isinstance(dtype, PrimType):
            raise TypeError(f"Var {name!r}: unsupported type annotation {dtype!r}")
        elif isinstance(dtype, PrimType):
            dtype = dtype.dtype
        dtype = dtype_str(dtype)
        super().__init__(dtype, span, name, annotation or PrimType(dtype))

    @property
    def name_hint(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.name


@register_object("tir.SizeVar")
class SizeVar(Var):
    """A variable known to be non-negative (a symbolic shape)."""


class IterVarType(IntEnum):
    """TVM's ``IterVarType``."""

    DataPar = 0
    ThreadIndex = 1
    CommReduce = 2
    Ordered = 3
    DimInfo = 4
    Unrolled = 5
    Vectorized = 6
    Parallelized = 7
    Tensorized = 8


@register_object("tir.IterVar")
class IterVar(PrimExpr):
    """An iteration variable: a ``var`` over ``dom`` with a kind (``iter_type``).

    Arithmetic on an IterVar uses its ``var``, as in TVM.
    """

    _fields = {"dom": Range, "var": Var, "iter_type": int, "thread_tag": str}
    DataPar = IterVarType.DataPar
    ThreadIndex = IterVarType.ThreadIndex
    CommReduce = IterVarType.CommReduce
    Ordered = IterVarType.Ordered
    DimInfo = IterVarType.DimInfo
    Unrolled = IterVarType.Unrolled
    Vectorized = IterVarType.Vectorized
    Parallelized = IterVarType.Parallelized
    Tensorized = IterVarType.Tensorized

    def __init__(self, dom: _AnyValue, var: _AnyValue, iter_type: int,
                 thread_tag: str = "", span: Span | None = None) -> None:
        if dom is not None and not isinstance(dom, Range):
            dom = Range(*dom) if isinstance(dom, list | tuple) else Range(dom)
        if isinstance(var, str):
            var = Var(var, "int32")
        super().__init__(var.dtype, span, dom, var, int(iter_type), thread_tag)

    def __repr__(self) -> str:
        return f"iter_var({self.var.name}, {self.dom!r})"


@register_object("tir.StringImm")
class StringImm(PrimExpr):
    """A string constant (``dtype`` handle)."""

    _fields = {"value": str}

    def __init__(self, value: str, span: Span | None = None) -> None:
        super().__init__("handle", span, value)

    def __repr__(self) -> str:
        return repr(self.value)


@register_object("tir.Cast")
class Cast(PrimExpr):
    """Convert ``value`` to ``dtype``."""

    _fields = {"value": PrimExpr}

    def __init__(self, dtype: _AnyValue, value: _AnyValue, span: Span | None = None) -> None:
        super().__init__(dtype_str(dtype), span, _expr(value))


class BinaryOpExpr(PrimExpr):
    """Base of two-operand nodes; the result dtype is the operands' dtype."""

    _fields = {"a": PrimExpr, "b": PrimExpr}

    def __init__(self, a: _AnyValue, b: _AnyValue, span: Span | None = None) -> None:
        a, b = _expr(a), _expr(b)
        super().__init__(self._result_dtype(a), span, a, b)

    @staticmethod
    def _result_dtype(a: PrimExpr) -> str:
        return a.dtype


class CmpExpr(BinaryOpExpr):
    """Base of comparisons; the result is ``bool`` with the operands' lane count."""

    @staticmethod
    def _result_dtype(a: PrimExpr) -> str:
        return with_lanes("bool", lanes_of(a.dtype))


def _binary(type_key: str, base: type, doc: str) -> type:
    name = type_key.split(".")[1]
    cls = type(name, (base,), {"__doc__": doc, "__module__": __name__})
    return register_object(type_key)(cls)


Add = _binary("tir.Add", BinaryOpExpr, "``a + b``.")
Sub = _binary("tir.Sub", BinaryOpExpr, "``a - b``.")
Mul = _binary("tir.Mul", BinaryOpExpr, "``a * b``.")
Div = _binary("tir.Div", BinaryOpExpr, "``a / b`` (truncating for integers).")
Mod = _binary("tir.Mod", BinaryOpExpr, "``a % b`` (truncated remainder, C semantics).")
FloorDiv = _binary("tir.FloorDiv", BinaryOpExpr, "``floor(a / b)``.")
FloorMod = _binary("tir.FloorMod", BinaryOpExpr, "``a - floor(a / b) * b``.")
Min = _binary("tir.Min", BinaryOpExpr, "``min(a, b)``.")
Max = _binary("tir.Max", BinaryOpExpr, "``max(a, b)``.")
EQ = _binary("tir.EQ", CmpExpr, "``a == b``.")
NE = _binary("tir.NE", CmpExpr, "``a != b``.")
LT = _binary("tir.LT", CmpExpr, "``a < b``.")
LE = _binary("tir.LE", CmpExpr, "``a <= b``.")
GT = _binary("tir.GT", CmpExpr, "``a > b``.")
GE = _binary("tir.GE", CmpExpr, "``a >= b``.")
And = _binary("tir.And", CmpExpr, "Logical ``a && b``.")
Or = _binary("tir.Or", CmpExpr, "Logical ``a || b``.")


@register_object("tir.Not")
class Not(PrimExpr):
    """Logical ``!a``."""

    _fields = {"a": PrimExpr}

    def __init__(self, a: _AnyValue, span: Span | None = None) -> None:
        a = _expr(a)
        super().__init__(a.dtype, span, a)


@register_object("tir.Select")
class Select(PrimExpr):
    """``condition ? true_value : false_value`` (both sides are evaluated)."""

    _fields = {"condition": PrimExpr, "true_value": PrimExpr, "false_value": PrimExpr}

    def __init__(self, condition: _AnyValue, true_value: _AnyValue, false_value: _AnyValue,
                 span: Span | None = None) -> None:
        from kiln.tir.op import match_types

        true_value, false_value = match_types(_expr(true_value), _expr(false_value))
        super().__init__(true_value.dtype, span, _expr(condition), true_value, false_value)


@register_object("tir.BufferLoad")
class BufferLoad(PrimExpr):
    """Read ``buffer[indices]``; a Ramp index makes a vector load."""

    _fields = {"buffer": Object, "indices": PrimExpr}

    def __init__(self, buffer, indices, span: Span | None = None) -> None:
        indices = [_expr(i) for i in indices]
        lanes = max((lanes_of(i.dtype) for i in indices), default=1)
        super().__init__(with_lanes(buffer.dtype, lanes), span, buffer, indices)


@register_object("tir.ProducerLoad")
class ProducerLoad(PrimExpr):
    """Read element ``indices`` of a te.Tensor (before lowering binds it to a buffer)."""

    _fields = {"producer": Object, "indices": PrimExpr}

    def __init__(self, producer, indices, span: Span | None = None) -> None:
        super().__init__(producer.dtype, span, producer, [_expr(i) for i in indices])


@register_object("tir.Ramp")
class Ramp(PrimExpr):
    """The vector ``[base, base + stride, ..., base + (lanes-1)*stride]``."""

    _fields = {"base": PrimExpr, "stride": PrimExpr, "lanes": int}

    def __init__(self, base: _AnyValue, stride: _AnyValue, lanes: int,
                 span: Span | None = None) -> None:
        base = _expr(base)
        stride = _expr(stride)
        super().__init__(with_lanes(base.dtype, int(lanes)), span, base, stride, int(lanes))


@register_object("tir.Broadcast")
class Broadcast(PrimExpr):
    """``value`` repeated ``lanes`` times."""

    _fields = {"value": PrimExpr, "lanes": int}

    def __init__(self, value: _AnyValue, lanes: int, span: Span | None = None) -> None:
        value = _expr(value)
        super().__init__(with_lanes(value.dtype, int(lanes)), span, value, int(lanes))


@register_object("tir.Let")
class Let(PrimExpr):
    """``let var = value in body``."""

    _fields = {"var": Var, "value": PrimExpr, "body": PrimExpr}
    _sequal_def_fields = ("var",)

    def __init__(self, var: Var, value: _AnyValue, body: _AnyValue,
                 span: Span | None = None) -> None:
        body = _expr(body)
        super().__init__(body.dtype, span, var, _expr(value), body)


@register_object("tir.Call")
class Call(PrimExpr):
    """Call of an intrinsic or external function; ``op`` is a name such as ``"tir.exp"``."""

    _fields = {"op": str, "args": Object}

    def __init__(self, dtype: _AnyValue, op: _AnyValue, args, span: Span | None = None) -> None:
        name = op if isinstance(op, str) else getattr(op, "name", None)
        if name is None:
            raise TypeError(f"tir.Call: op must be an intrinsic name, got {op!r}")
        if "." not in name:
            name = "tir." + name
        args = [a if isinstance(a, Object) and not isinstance(a, IterVar) else _expr(a)
                for a in args]
        super().__init__(dtype_str(dtype), span, name, args)


@register_object("tir.Shuffle")
class Shuffle(PrimExpr):
    """Concatenate ``vectors`` and pick lanes ``indices``."""

    _fields = {"vectors": PrimExpr, "indices": PrimExpr}

    def __init__(self, vectors, indices, span: Span | None = None) -> None:
        vectors = [_expr(v) for v in vectors]
        indices = [_expr(i) for i in indices]
        dtype = with_lanes(vectors[0].dtype, len(indices))
        super().__init__(dtype, span, vectors, indices)


@register_object("tir.CommReducer")
class CommReducer(Object):
    """A commutative reducer ``result(lhs, rhs)`` with ``identity_element`` per value."""

    _fields = {"lhs": Var, "rhs": Var, "result": PrimExpr, "identity_element": PrimExpr,
               "span": Span}
    _sequal_def_fields = ("lhs", "rhs")

    def __init__(self, lhs, rhs, result, identity_element, span: Span | None = None) -> None:
        super().__init__(list(lhs), list(rhs), list(result), list(identity_element), span)

    def __call__(self, *args):
        from kiln.tir.stmt_functor import substitute

        half = len(args) // 2
        vmap = dict(zip(self.lhs, args[:half]))
        vmap.update(zip(self.rhs, args[half:]))
        return [substitute(r, vmap) for r in self.result]


@register_object("tir.Reduce")
class Reduce(PrimExpr):
    """A reduction of ``source[value_index]`` over ``axis`` with ``combiner``."""

    _fields = {"combiner": CommReducer, "source": PrimExpr, "axis": IterVar,
               "condition": PrimExpr, "value_index": int, "init": PrimExpr}

    def __init__(self, combiner, src, rdom, condition, value_index, init=None,
                 span: Span | None = None) -> None:
        src = [_expr(s) for s in src]
        super().__init__(src[value_index].dtype, span, combiner, src, list(rdom),
                         _expr(condition), int(value_index), list(init or []))


class EqualOp:
    """What ``a == b`` returns: ``bool()`` is identity, ``asobject()`` the ``EQ`` node."""

    __slots__ = ("a", "b")
    node_class = EQ

    def __init__(self, a, b) -> None:
        self.a, self.b = a, b

    def __bool__(self) -> bool:
        return _same(self.a, self.b)

    def __nonzero__(self) -> bool:
        return self.__bool__()

    def asobject(self) -> PrimExpr:
        return self.node_class(self.a, self.b)

    def __repr__(self) -> str:
        return repr(self.asobject())


class NotEqualOp(EqualOp):
    """What ``a != b`` returns: ``bool()`` is non-identity, ``asobject()`` the ``NE`` node."""

    __slots__ = ()
    node_class = NE

    def __bool__(self) -> bool:
        return not _same(self.a, self.b)


def _same(a, b) -> bool:
    if isinstance(a, IntImm | FloatImm | int | float) and isinstance(b, IntImm | FloatImm | int |
                                                                      float):
        return float(a) == float(b)
    return a is b


def _script_repr(self) -> str:
    from kiln.tir.printer import script

    return script(self)


for _cls in (Cast, BinaryOpExpr, Not, Select, BufferLoad, ProducerLoad, Ramp, Broadcast, Let,
             Call, Shuffle, Reduce):
    _cls.__repr__ = _script_repr
