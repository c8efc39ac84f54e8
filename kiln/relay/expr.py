"""Relay expressions (TVM's ``tvm.relay.expr``) and the builders users call.

Entry points: the nodes :class:`Var`, :class:`Constant`, :class:`Tuple`, :class:`TupleGetItem`,
:class:`Call`, :class:`Let`, :class:`If`, :class:`Function`, :class:`RefCreate`,
:class:`RefRead`, :class:`RefWrite`; the builders :func:`var`, :func:`const`, :func:`bind`;
and :class:`ExprWithOp`, whose Python operators (``+ - * / < > <= >= neg``, ``[i]``,
``astype``) build operator calls through :mod:`kiln.relay.op`.

Nodes are immutable; ``checked_type_`` is a cache filled by type inference. ``==`` compares
identity (as TVM's ``ObjectRef``), so expressions can key dictionaries; comparisons that build
``equal``/``not_equal`` calls are spelled ``relay.equal(a, b)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.ir.attrs import Attrs, DictAttrs
from kiln.ir.base import Span
from kiln.ir.expr import GlobalVar, RelayExpr
from kiln.ir.function import BaseFunc
from kiln.ir.type import TensorType, Type, TypeVar
from kiln.relay.base import Id
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = [
    "Expr", "ExprWithOp", "Var", "Constant", "Tuple", "TupleGetItem", "Call", "Let", "If",
    "Function", "RefCreate", "RefRead", "RefWrite", "GlobalVar", "TupleWrapper",
    "var", "const", "bind",
]

Expr = RelayExpr


def _tensor_ops():
    from kiln.relay.op import tensor  # operators live a layer above the node classes

    return tensor


def _short_text(expr: Any) -> str:
    from kiln.relay.base import expr_to_text

    return expr_to_text(expr)


class _CallableText:
    """Calling builds a Relay call; ``str``/``astext`` print the Relay text format (shared by
    expressions and functions)."""

    __slots__ = ()

    def __call__(self, *args: Any) -> Call:
        return Call(self, list(args))

    def astext(self, show_meta_data: bool = True, annotate: Any = None) -> str:
        """The expression in the Relay text format."""
        from kiln.relay.base import astext

        return astext(self, show_meta_data)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        return _short_text(self)


class ExprWithOp(_CallableText, RelayExpr):
    """Relay expressions that support Python operators (all but functions)."""

    def astype(self, dtype: str) -> Call:
        """Cast to ``dtype`` (``relay.cast``)."""
        from kiln.relay.op.transform import cast

        return cast(self, dtype)

    def __neg__(self) -> Call:
        return _tensor_ops().negative(self)

    def __add__(self, other: Any) -> Call:
        return _tensor_ops().add(self, other)

    def __radd__(self, other: Any) -> Call:
        return _tensor_ops().add(other, self)

    def __sub__(self, other: Any) -> Call:
        return _tensor_ops().subtract(self, other)

    def __rsub__(self, other: Any) -> Call:
        return _tensor_ops().subtract(other, self)

    def __mul__(self, other: Any) -> Call:
        return _tensor_ops().multiply(self, other)

    def __rmul__(self, other: Any) -> Call:
        return _tensor_ops().multiply(other, self)

    def __truediv__(self, other: Any) -> Call:
        return _tensor_ops().divide(self, other)

    def __rtruediv__(self, other: Any) -> Call:
        return _tensor_ops().divide(other, self)

    def __lt__(self, other: Any) -> Call:
        return _tensor_ops().less(self, other)

    def __gt__(self, other: Any) -> Call:
        return _tensor_ops().greater(self, other)

    def __le__(self, other: Any) -> Call:
        return _tensor_ops().less_equal(self, other)

    def __ge__(self, other: Any) -> Call:
        return _tensor_ops().greater_equal(self, other)

    def __getitem__(self, index: int) -> TupleGetItem:
        if not isinstance(index, int | np.integer):
            raise TypeError(f"a Relay tuple is indexed by an int, got {index!r}")
        ty = getattr(self, "checked_type_", None)
        if ty is not None and hasattr(ty, "fields") and not 0 <= index < len(ty.fields):
            raise IndexError(f"tuple index {index} out of range for {ty!r}")
        return TupleGetItem(self, int(index))

    def __iter__(self):
        raise TypeError("a Relay expression is not iterable; index a tuple with expr[i]")



@register_object("relay.Var")
class Var(ExprWithOp):
    """A local variable; ``name_hint`` is for printing, identity is the ``vid`` object.

    Example
    -------
    >>> x = Var("x", TensorType((2,), "float32"))
    >>> x.name_hint, x.type_annotation
    ('x', Tensor[(2,), float32])
    """

    _fields = {"vid": Id, "type_annotation": Type}
    _sequal_var = True
    _sequal_ignore = ("span", "vid")

    def __init__(self, name_hint: str, type_annotation: Type | None = None,
                 span: Span | None = None) -> None:
        super().__init__(span, Id(name_hint), type_annotation)
        self.checked_type_ = None

    @property
    def name_hint(self) -> str:
        return self.vid.name_hint


@register_object("relay.Constant")
class Constant(ExprWithOp):
    """A constant tensor holding an NDArray."""

    _fields = {"data": "ndarray"}

    def __init__(self, data: Any, span: Span | None = None) -> None:
        from kiln.runtime import ndarray

        if not isinstance(data, ndarray.NDArray):
            if isinstance(data, Object):
                raise TypeError(f"Constant holds an NDArray, got {type(data).__name__}")
            data = ndarray.array(np.asarray(data))
        super().__init__(span, data)
        self.checked_type_ = None


@register_object("relay.Tuple")
class Tuple(ExprWithOp):
    """A tuple of expressions; ``len`` and ``[i]`` give its fields."""

    _fields = {"fields": RelayExpr}

    def __init__(self, fields: Sequence[RelayExpr], span: Span | None = None) -> None:
        super().__init__(span, tuple(fields))
        self.checked_type_ = None

    def __getitem__(self, index: int) -> RelayExpr:
        if not -len(self.fields) <= index < len(self.fields):
            raise IndexError("Tuple index out of range")
        return self.fields[index]

    def __len__(self) -> int:
        return len(self.fields)

    def astuple(self) -> Tuple:
        return self


@register_object("relay.TupleGetItem")
class TupleGetItem(ExprWithOp):
    """Field ``index`` of a tuple-valued expression."""

    _fields = {"tuple_value": RelayExpr, "index": int}

    def __init__(self, tuple_value: RelayExpr, index: int, span: Span | None = None) -> None:
        super().__init__(span, tuple_value, int(index))
        self.checked_type_ = None


@register_object("relay.Call")
class Call(ExprWithOp):
    """A call of an operator, function, global function or constructor.

    Example
    -------
    >>> from kiln.ir.op import Op
    >>> x = Var("x")
    >>> Call(Op.get("negative"), [x]).op.name
    'negative'
    """

    _fields = {"op": RelayExpr, "args": RelayExpr, "attrs": Attrs, "type_args": Type}

    def __init__(self, op: RelayExpr, args: Sequence[RelayExpr], attrs: Attrs | None = None,
                 type_args: Sequence[Type] | None = None, span: Span | None = None) -> None:
        args = tuple(args)
        for arg in args:
            if not isinstance(arg, RelayExpr):
                raise TypeError(
                    f"Call arguments must be Relay expressions, got {type(arg).__name__} "
                    f"{arg!r}; wrap Python values with relay.const")
        super().__init__(span, op, args, attrs, tuple(type_args or ()))
        self.checked_type_ = None


@register_object("relay.Let")
class Let(ExprWithOp):
    """``let var = value; body``."""

    _fields = {"var": Var, "value": RelayExpr, "body": RelayExpr}
    _sequal_def_fields = ("var",)

    def __init__(self, var: Var, value: RelayExpr, body: RelayExpr,
                 span: Span | None = None) -> None:
        super().__init__(span, var, value, body)
        self.checked_type_ = None


@register_object("relay.If")
class If(ExprWithOp):
    """``if (cond) { true_branch } else { false_branch }``; cond is a scalar bool tensor."""

    _fields = {"cond": RelayExpr, "true_branch": RelayExpr, "false_branch": RelayExpr}

    def __init__(self, cond: RelayExpr, true_branch: RelayExpr, false_branch: RelayExpr,
                 span: Span | None = None) -> None:
        super().__init__(span, cond, true_branch, false_branch)
        self.checked_type_ = None


@register_object("relay.Function")
class Function(_CallableText, BaseFunc):
    """A function: ``fn (params) -> ret_type { body }``.

    Function attributes (``Primitive``, ``Closure``, ``Inline``, ``global_symbol``,
    ``Compiler``, ``hash``) live in ``attrs`` and are set with :meth:`with_attr`.

    Example
    -------
    >>> x = Var("x", TensorType((2,)))
    >>> f = Function([x], x).with_attr("Primitive", 1)
    >>> f.attrs["Primitive"], len(f.params)
    (1, 1)
    """

    _fields = {"params": Var, "body": RelayExpr, "ret_type": Type, "type_params": TypeVar}
    _sequal_def_fields = ("type_params", "params")

    def __init__(self, params: Sequence[Var], body: RelayExpr, ret_type: Type | None = None,
                 type_params: Sequence[TypeVar] | None = None, attrs: Any = None,
                 span: Span | None = None) -> None:
        if isinstance(attrs, dict):
            attrs = DictAttrs(attrs)
        params = tuple(params)
        for param in params:
            if not isinstance(param, Var):
                raise TypeError(f"Function params must be relay.Var, got {param!r}")
        if not isinstance(body, RelayExpr):
            raise TypeError(f"Function body must be a Relay expression, got {body!r}")
        Object.__init__(self, span, attrs, params, body, ret_type, tuple(type_params or ()))
        self.checked_type_ = None



@register_object("relay.RefCreate")
class RefCreate(ExprWithOp):
    """Allocate a mutable reference cell holding ``value``."""

    _fields = {"value": RelayExpr}

    def __init__(self, value: RelayExpr, span: Span | None = None) -> None:
        super().__init__(span, value)
        self.checked_type_ = None


@register_object("relay.RefRead")
class RefRead(ExprWithOp):
    """The value held by reference ``ref``."""

    _fields = {"ref": RelayExpr}

    def __init__(self, ref: RelayExpr, span: Span | None = None) -> None:
        super().__init__(span, ref)
        self.checked_type_ = None


@register_object("relay.RefWrite")
class RefWrite(ExprWithOp):
    """Store ``value`` into reference ``ref``; evaluates to the empty tuple."""

    _fields = {"ref": RelayExpr, "value": RelayExpr}

    def __init__(self, ref: RelayExpr, value: RelayExpr, span: Span | None = None) -> None:
        super().__init__(span, ref, value)
        self.checked_type_ = None


class TupleWrapper:
    """A Python view of a tuple-valued expression: ``len`` and ``[i]`` without a Tuple node.

    Ops returning several outputs (``split``) return one; ``astuple()`` gives the expression.
    """

    def __init__(self, tuple_value: RelayExpr, size: int) -> None:
        self.tuple_value = tuple_value
        self.size = size

    def astuple(self) -> RelayExpr:
        return self.tuple_value

    def astext(self) -> str:
        return str(self.tuple_value)

    def __getitem__(self, index: int) -> TupleGetItem:
        if not 0 <= index < self.size:
            raise IndexError("Tuple index out of range")
        return TupleGetItem(self.tuple_value, index)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"TupleWrapper({self.tuple_value!r}, {self.size})"


def var(name_hint: str, type_annotation: Type | str | None = None, shape: Any = None,
        dtype: str = "float32", span: Span | None = None) -> Var:
    """A new variable; ``shape``/``dtype`` build a TensorType annotation.

    ``type_annotation`` may also be a dtype string (a scalar tensor of that dtype).

    Example
    -------
    >>> var("x", shape=(1, 10)).type_annotation
    Tensor[(1, 10), float32]
    """
    if not isinstance(name_hint, str):
        raise TypeError(f"a variable name must be a str, got {name_hint!r}")
    if type_annotation is not None and shape is not None:
        raise ValueError("give either type_annotation or shape, not both")
    if shape is not None:
        type_annotation = TensorType(shape, dtype)
    elif isinstance(type_annotation, str):
        type_annotation = TensorType((), type_annotation)
    if type_annotation is not None and not isinstance(type_annotation, Type):
        raise TypeError(f"type_annotation must be a relay Type, got {type_annotation!r}")
    return Var(name_hint, type_annotation, span)


def const(value: Any, dtype: str | None = None, span: Span | None = None) -> Constant:
    """A constant tensor from a Python scalar, list, NumPy array or NDArray.

    As TVM: a Python float becomes float32 and a Python int int32 unless ``dtype`` is given.

    Example
    -------
    >>> const(1.5).data.dtype, const([1, 2]).data.dtype
    ('float32', 'int32')
    """
    from kiln.runtime import ndarray

    if isinstance(value, ndarray.NDArray):
        if dtype is not None and dtype != value.dtype:
            value = ndarray.array(value.numpy().astype(dtype))
        return Constant(value, span)
    if isinstance(value, Object):
        raise TypeError(f"relay.const takes data, not {type(value).__name__}")
    array = np.asarray(value)
    if dtype is None and not isinstance(value, np.ndarray | np.generic):
        if array.dtype == np.float64:
            array = array.astype("float32")
        elif array.dtype == np.int64:
            array = array.astype("int32")
    if array.dtype == object:
        raise TypeError(f"relay.const cannot make a tensor from {value!r}")
    if dtype is not None:
        array = array.astype(dtype)
    return Constant(ndarray.array(array), span)


def bind(expr: RelayExpr, binds: dict) -> RelayExpr:
    """Replace variables (keys: Var, or a Function parameter's name) by expressions.

    Binding a Function's parameter removes it from the parameter list.

    Example
    -------
    >>> x, y = var("x"), var("y")
    >>> bind(Tuple([x]), {x: y}).fields[0] is y
    True
    """
    from kiln.relay.expr_functor import ExprMutator

    if isinstance(expr, Function):
        by_name = {p.name_hint: p for p in expr.params}
        mapping = {}
        for key, value in binds.items():
            if isinstance(key, str):
                if key not in by_name:
                    raise TVMError(f"bind: the function has no parameter named {key!r}")
                key = by_name[key]
            mapping[key] = value if isinstance(value, RelayExpr) else const(value)
    else:
        mapping = dict(binds)

    class Binder(ExprMutator):
        def visit_var(self, node: Var) -> RelayExpr:
            return mapping.get(node, node)

    body = Binder().visit(expr.body if isinstance(expr, Function) else expr)
    if not isinstance(expr, Function):
        return body
    params = [p for p in expr.params if p not in mapping]
    if body is expr.body and len(params) == len(expr.params):
        return expr
    return Function(params, body, expr.ret_type, expr.type_params, expr.attrs)
