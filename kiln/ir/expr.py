"""Expression base classes shared by Relay and TIR (TVM's ``tvm.ir.expr``).

Entry points: :class:`BaseExpr`, :class:`PrimExpr` (TIR scalar expressions: ``IntImm``,
``FloatImm`` and everything in :mod:`kiln.tir`), :class:`RelayExpr`, :class:`GlobalVar`,
:class:`Range`.

``PrimExpr`` overloads Python operators; the arithmetic itself (type promotion, constant
folding, node construction) lives in :mod:`kiln.tir.op`, which kiln.tir registers as a hook
(:mod:`kiln.ir.hooks`).
"""

from __future__ import annotations

from typing import Any

from kiln.ir.base import Span
from kiln.ir.hooks import get_hook
from kiln.runtime.object import Object, register_object

__all__ = ["BaseExpr", "PrimExpr", "RelayExpr", "GlobalVar", "Range", "IntImm", "FloatImm"]


def _tir_op():
    """The arithmetic module kiln.tir registers (:mod:`kiln.ir.hooks`)."""
    return get_hook("prim_expr_ops")()


@register_object("BaseExpr")
class BaseExpr(Object):
    """Base of all expressions."""


@register_object("PrimExpr")
class PrimExpr(BaseExpr):
    """A scalar (or vector) expression with a ``dtype`` (TIR / shape arithmetic)."""

    _fields = {"dtype": "dtype", "span": Span}

    # Operator overloads: each delegates to the function of the same name in kiln.tir.op.
    def __add__(self, other: Any) -> PrimExpr:
        return _tir_op().add(self, other)

    def __radd__(self, other: Any) -> PrimExpr:
        return _tir_op().add(other, self)

    def __sub__(self, other: Any) -> PrimExpr:
        return _tir_op().subtract(self, other)

    def __rsub__(self, other: Any) -> PrimExpr:
        return _tir_op().subtract(other, self)

    def __mul__(self, other: Any) -> PrimExpr:
        return _tir_op().multiply(self, other)

    def __rmul__(self, other: Any) -> PrimExpr:
        return _tir_op().multiply(other, self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return _tir_op().divide(self, other)

    def __rtruediv__(self, other: Any) -> PrimExpr:
        return _tir_op().divide(other, self)

    def __floordiv__(self, other: Any) -> PrimExpr:
        return _tir_op().floordiv(self, other)

    def __rfloordiv__(self, other: Any) -> PrimExpr:
        return _tir_op().floordiv(other, self)

    def __mod__(self, other: Any) -> PrimExpr:
        return _tir_op().floormod(self, other)

    def __rmod__(self, other: Any) -> PrimExpr:
        return _tir_op().floormod(other, self)

    def __neg__(self) -> PrimExpr:
        return _tir_op().negative(self)

    def __lshift__(self, other: Any) -> PrimExpr:
        return _tir_op().left_shift(self, other)

    def __rshift__(self, other: Any) -> PrimExpr:
        return _tir_op().right_shift(self, other)

    def __and__(self, other: Any) -> PrimExpr:
        return _tir_op().bitwise_and(self, other)

    def __or__(self, other: Any) -> PrimExpr:
        return _tir_op().bitwise_or(self, other)

    def __xor__(self, other: Any) -> PrimExpr:
        return _tir_op().bitwise_xor(self, other)

    def __invert__(self) -> PrimExpr:
        return _tir_op().bitwise_not(self)

    def __lt__(self, other: Any) -> PrimExpr:
        return _tir_op().less(self, other)

    def __le__(self, other: Any) -> PrimExpr:
        return _tir_op().less_equal(self, other)

    def __gt__(self, other: Any) -> PrimExpr:
        return _tir_op().greater(self, other)

    def __ge__(self, other: Any) -> PrimExpr:
        return _tir_op().greater_equal(self, other)

    def __eq__(self, other: Any):
        # TVM returns an EqualOp whose bool() is reference equality; kiln.tir.op.equal_op
        # builds that node.
        return _tir_op().equal_op(self, other)

    def __ne__(self, other: Any):
        return _tir_op().not_equal_op(self, other)

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        raise ValueError(
            "Cannot use a symbolic PrimExpr as a Python bool; use kiln.tir.all/any or "
            "tir.Select for conditions"
        )

    def equal(self, other: Any) -> PrimExpr:
        return _tir_op().equal(self, other)

    def astype(self, dtype: str) -> PrimExpr:
        return _tir_op().cast(self, dtype)


@register_object("IntImm")
class IntImm(PrimExpr):
    """An integer (or bool) constant of a given dtype."""

    _fields = {"value": int}

    def __init__(self, dtype: str, value: int, span: Span | None = None) -> None:
        super().__init__(dtype, span, int(value))

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        return self.value != 0

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: Any):
        if isinstance(other, int | IntImm):
            return self.value == int(other)
        return super().__eq__(other)

    def __ne__(self, other: Any):
        if isinstance(other, int | IntImm):
            return self.value != int(other)
        return super().__ne__(other)

    def __repr__(self) -> str:
        return str(self.value) if str(self.dtype) in ("int32", "int64") else (
            f"IntImm({self.dtype}, {self.value})")


@register_object("FloatImm")
class FloatImm(PrimExpr):
    """A floating point constant of a given dtype."""

    _fields = {"value": float}

    def __init__(self, dtype: str, value: float, span: Span | None = None) -> None:
        super().__init__(dtype, span, float(value))

    def __float__(self) -> float:
        return self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"{self.value}f" if str(self.dtype) == "float32" else f"{self.value}"


@register_object("RelayExpr")
class RelayExpr(BaseExpr):
    """Base of Relay expressions; ``checked_type_`` is filled in by type inference."""

    _fields = {"span": Span}
    _mutable_fields = frozenset({"checked_type_"})
    _extra_slots = ("checked_type_",)

    @property
    def checked_type(self):
        ty = getattr(self, "checked_type_", None)
        if ty is None:
            from kiln.runtime.error import TVMError

            raise TVMError(
                "The type checker has not populated the checked_type for this node; "
                "run relay.transform.InferType() first"
            )
        return ty


@register_object("GlobalVar")
class GlobalVar(RelayExpr):
    """A reference to a global function of an IRModule, by name."""

    _fields = {"name_hint": str}

    def __init__(self, name_hint: str, type_annot=None, span: Span | None = None) -> None:
        super().__init__(span, name_hint)
        object.__setattr__(self, "checked_type_", type_annot)

    def __call__(self, *args):
        return get_hook("make_call")(self, args)  # building a call node is Relay's job

    def __repr__(self) -> str:
        return f"@{self.name_hint}"


@register_object("Range")
class Range(Object):
    """A half-open integer range ``[min, min + extent)``; ``Range(begin, end)`` as in TVM."""

    _fields = {"min": PrimExpr, "extent": PrimExpr, "span": Span}

    def __init__(self, begin, end=None, span: Span | None = None) -> None:
        if end is None:
            begin, end = 0, begin
        begin = IntImm("int32", begin) if isinstance(begin, int) else begin
        end = IntImm("int32", end) if isinstance(end, int) else end
        extent = end - begin if not (isinstance(end, IntImm) and isinstance(begin, IntImm)) \
            else IntImm(str(end.dtype), end.value - begin.value)
        super().__init__(begin, extent, span)

    @staticmethod
    def from_min_extent(min_value, extent, span: Span | None = None) -> Range:
        rng = Range.__new__(Range)
        to_imm = lambda v: IntImm("int32", v) if isinstance(v, int) else v  # noqa: E731
        Object.__init__(rng, to_imm(min_value), to_imm(extent), span)
        return rng

    def __repr__(self) -> str:
        return f"range(min={self.min!r}, ext={self.extent!r})"
