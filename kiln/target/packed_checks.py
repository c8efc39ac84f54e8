"""The packed-ABI wrapper of a kernel, described once and printed as C or as LLVM IR.

Entry point: :func:`describe_wrapper` (a kernel's
:class:`~kiln.target.c_abi.FunctionSignature` -> :class:`WrapperSpec`). Two printers read
it: :func:`kiln.target.c_abi.packed_wrapper` writes C (the ``c`` target), and
:mod:`kiln.target.llvm_packed` writes LLVM IR (the ``llvm`` target), so both targets check
the same things and say the same thing when a check fails.

A spec is a list of steps over a small expression language that mirrors the C the wrapper
is: ``Check`` (a condition that fails the call, the message, and the values appended to it),
``Let`` (a named local), ``Return`` (the call of ``<name>_unpacked``). Conditions use C's
short-circuit ``&&``/``||`` and a lazy ``Select``: a check may read ``strides[d]`` only
after testing ``strides != NULL``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError

__all__ = ["TYPE_CODE_INT", "TYPE_CODE_FLOAT", "TYPE_CODE_TENSORS", "ARG_ERROR_MESSAGE_LIMIT",
           "Const", "NumArgs", "TypeCode", "ArgValue", "Local", "Field", "ShapeAt",
           "StrideAt", "Binary", "Select", "Cast", "DataPointer", "Check", "Let", "Return",
           "WrapperSpec", "describe_wrapper", "DLTENSOR_MEMBERS"]

TYPE_CODE_INT, TYPE_CODE_FLOAT = 0, 2
TYPE_CODE_TENSORS = (7, 13)  # kTVMDLTensorHandle, kTVMNDArrayHandle
# The error text keeps at most this many bytes of the message before the values (the C
# helper's buffer; the LLVM wrapper truncates the same way).
ARG_ERROR_MESSAGE_LIMIT = 400

# Arithmetic that may appear in a buffer's shape expressions.
_SHAPE_OPS = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "Mod": "%"}


# -- expressions --------------------------------------------------------------------------------

class _Node:
    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(repr(getattr(self, f)) for f in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Const(_Node):
    """An integer constant."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = int(value)


class NumArgs(_Node):
    """The call's ``num_args``."""

    __slots__ = ()


class TypeCode(_Node):
    """``type_codes[index]``."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class ArgValue(_Node):
    """``args[index].<member>``: ``v_int64``, ``v_float64`` or ``v_handle``."""

    __slots__ = ("index", "member")

    def __init__(self, index: int, member: str) -> None:
        self.index, self.member = index, member


class Local(_Node):
    """A local bound by an earlier :class:`Let`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


# DLTensor members a check reads: C spelling -> (C type of the value, signed)
DLTENSOR_MEMBERS = {"ndim": ("int32_t", True), "dtype.code": ("uint8_t", False),
                    "dtype.bits": ("uint8_t", False), "dtype.lanes": ("uint16_t", False),
                    "device.device_type": ("int32_t", True), "byte_offset": ("uint64_t", False),
                    "strides": ("int64_t*", False), "data": ("void*", False)}


class Field(_Node):
    """``tensor->member`` of the DLTensor local ``tensor`` (see :data:`DLTENSOR_MEMBERS`)."""

    __slots__ = ("tensor", "member")

    def __init__(self, tensor: str, member: str) -> None:
        self.tensor, self.member = tensor, member


class ShapeAt(_Node):
    """``tensor->shape[dim]``."""

    __slots__ = ("tensor", "dim")

    def __init__(self, tensor: str, dim: int) -> None:
        self.tensor, self.dim = tensor, dim


class StrideAt(_Node):
    """``tensor->strides[dim]``."""

    __slots__ = ("tensor", "dim")

    def __init__(self, tensor: str, dim: int) -> None:
        self.tensor, self.dim = tensor, dim


class Binary(_Node):
    """``a op b`` with C's meaning; ``op`` is one of ``+ - * / % == != < > && ||``."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op: str, a: _Node, b: _Node) -> None:
        self.op, self.a, self.b = op, a, b


class Select(_Node):
    """``cond ? a : b``, evaluating only the arm it takes."""

    __slots__ = ("cond", "a", "b")

    def __init__(self, cond: _Node, a: _Node, b: _Node) -> None:
        self.cond, self.a, self.b = cond, a, b


class Cast(_Node):
    """``(T)value`` where ``T`` is the C type of kiln dtype ``dtype``."""

    __slots__ = ("dtype", "value")

    def __init__(self, dtype: str, value: _Node) -> None:
        self.dtype, self.value = dtype, value


class DataPointer(_Node):
    """A tensor's data as ``dtype*``, moved by ``byte_offset`` when ``with_offset``."""

    __slots__ = ("tensor", "dtype", "with_offset")

    def __init__(self, tensor: str, dtype: str, with_offset: bool) -> None:
        self.tensor, self.dtype, self.with_offset = tensor, dtype, with_offset


def _and(*terms: _Node) -> _Node:
    out = terms[0]
    for term in terms[1:]:
        out = Binary("&&", out, term)
    return out


def _or(*terms: _Node) -> _Node:
    out = terms[0]
    for term in terms[1:]:
        out = Binary("||", out, term)
    return out


def _null(value: _Node) -> _Node:
    return Binary("==", value, Const(0))


def _not_null(value: _Node) -> _Node:
    return Binary("!=", value, Const(0))


# -- steps --------------------------------------------------------------------------------------

class Check(_Node):
    """Fail the call with ``message`` + the values (as decimal integers) when ``cond`` holds."""

    __slots__ = ("cond", "message", "values")

    def __init__(self, cond: _Node, message: str, values: Sequence[_Node] = ()) -> None:
        self.cond, self.message, self.values = cond, message, tuple(values)


class Let(_Node):
    """A local ``name`` of C type ``ctype`` (``"DLTensor*"`` or a kiln dtype) = ``value``."""

    __slots__ = ("name", "ctype", "value")

    def __init__(self, name: str, ctype: str, value: _Node) -> None:
        self.name, self.ctype, self.value = name, ctype, value


class Return(_Node):
    """``return <callee>(args...)``: the call of the unpacked kernel."""

    __slots__ = ("callee", "args")

    def __init__(self, callee: str, args: Sequence[_Node]) -> None:
        self.callee, self.args = callee, tuple(args)


class WrapperSpec:
    """The packed function ``name``: its steps, and the kiln dtypes ``<name>_unpacked`` takes
    (``(dtype, is_pointer)`` per parameter)."""

    __slots__ = ("name", "steps", "params")

    def __init__(self, name: str, steps: list, params: list[tuple[str, bool]]) -> None:
        self.name, self.steps, self.params = name, steps, params


# -- the description ----------------------------------------------------------------------------

def describe_wrapper(name: str, signature: Any) -> WrapperSpec:
    """The checks and the call of the packed function ``name`` of a kernel whose unpacked
    twin takes ``signature`` (:func:`kiln.target.c_abi.function_signature`).

    Example
    -------
    >>> from kiln import tir
    >>> from kiln.target.c_abi import function_signature
    >>> A = tir.decl_buffer((4,), "float32", name="A")
    >>> spec = describe_wrapper("f", function_signature(tir.PrimFunc([A], tir.Evaluate(0))))
    >>> spec.steps[0].message
    'f: expected 1 arguments (A), got '
    """
    return _Describer(name, signature).describe()


class _Describer:
    def __init__(self, name: str, signature: Any) -> None:
        self.name, self.sig = name, signature
        self.steps: list = []
        self.bound: dict[int, _Node] = {}  # id(shape var) -> expression holding its value
        self.arg_names: dict[int, str] = {}  # id(buffer or var) -> unique identifier

    def arg_name(self, item: Any) -> str:
        """An identifier for an argument, unique even when two arguments share a name."""
        name = self.arg_names.get(id(item))
        if name is None:
            base = "arg_" + re.sub(r"\W", "_", item.name)
            name, k = base, 1
            while name in self.arg_names.values():
                name, k = f"{base}_{k}", k + 1
            self.arg_names[id(item)] = name
        return name

    def fail(self, cond: _Node, message: str, values: Sequence[_Node] = ()) -> None:
        self.steps.append(Check(cond, f"{self.name}: {message}", values))

    def shape_value(self, expr: Any) -> _Node:
        """A shape expression over already bound vars (for equality checks)."""
        kind = type(expr).__name__
        if kind == "IntImm":
            return Const(int(expr.value))
        if kind in ("Var", "SizeVar"):
            return self.bound[id(expr)]
        op = _SHAPE_OPS.get(kind)
        if op is not None:
            return Binary(op, self.shape_value(expr.a), self.shape_value(expr.b))
        raise TVMError(f"C codegen: unsupported shape expression {kind} in {self.name}")

    def describe(self) -> WrapperSpec:
        sig = self.sig
        arg_names = ", ".join(item.name for _, item in sig.param_kinds)
        count = len(sig.param_kinds)
        self.fail(Binary("!=", NumArgs(), Const(count)),
                  f"expected {count} arguments ({arg_names}), got ", [NumArgs()])
        deferred: list[tuple[_Node, Any, str]] = []
        for index, (kind, item) in enumerate(sig.param_kinds):
            if kind == "tensor":
                deferred.extend(self.tensor(index, item))
            else:
                self.scalar(index, item)
        for actual, expected, message in deferred:
            value = self.shape_value(expected)
            self.fail(Binary("!=", actual, value), message, [actual, value])
        call_args: list[_Node] = [Local(f"{self.arg_name(b)}_data") for b in sig.buffers]
        params = [(str(DataType(b.dtype)), True) for b in sig.buffers]
        for var in sig.scalars:
            if id(var) not in self.bound:
                raise TVMError(
                    f"C codegen: {self.name}: shape variable {var.name!r} is not determined by "
                    "any argument; pass it as a parameter")
            call_args.append(Cast(str(var.dtype), self.bound[id(var)]))
            params.append((str(var.dtype), False))
        self.steps.append(Return(f"{self.name}_unpacked", call_args))
        return WrapperSpec(self.name, self.steps, params)

    def scalar(self, index: int, var: Any) -> None:
        t = DataType(var.dtype)
        codes = (TYPE_CODE_INT,) if not t.is_float else (TYPE_CODE_FLOAT, TYPE_CODE_INT)
        self.fail(_and(*(Binary("!=", TypeCode(index), Const(c)) for c in codes)),
                  f"argument {var.name} (#{index}): expected "
                  f"{'a float' if t.is_float else 'an int'}, got type code ", [TypeCode(index)])
        if t.is_float:
            value: _Node = Select(Binary("==", TypeCode(index), Const(TYPE_CODE_FLOAT)),
                                  ArgValue(index, "v_float64"),
                                  Cast("float64", ArgValue(index, "v_int64")))
        else:
            value = ArgValue(index, "v_int64")
        local = f"{self.arg_name(var)}_value"
        self.steps.append(Let(local, str(t), Cast(str(t), value)))
        self.bound[id(var)] = Local(local)

    def tensor(self, index: int, buffer: Any) -> list[tuple[_Node, Any, str]]:
        arg = self.arg_name(buffer)
        t = DataType(buffer.dtype)
        what = f"argument {buffer.name} (#{index})"
        self.fail(_and(*(Binary("!=", TypeCode(index), Const(c)) for c in TYPE_CODE_TENSORS)),
                  f"{what}: expected a tensor (DLTensor), got type code ", [TypeCode(index)])
        tensor = f"{arg}_tensor"
        self.steps.append(Let(tensor, "DLTensor*", ArgValue(index, "v_handle")))
        self.fail(_null(Local(tensor)), f"{what}: got a NULL tensor")
        ndim = len(buffer.shape)
        self.fail(Binary("!=", Field(tensor, "ndim"), Const(ndim)),
                  f"{what}: expected ndim {ndim}, got ", [Field(tensor, "ndim")])
        code, bits, lanes = t.as_tuple()
        members = [Field(tensor, f"dtype.{m}") for m in ("code", "bits", "lanes")]
        self.fail(_or(*(Binary("!=", m, Const(v)) for m, v in zip(members, (code, bits, lanes)))),
                  f"{what}: expected dtype {t} (code {code}, bits {bits}, lanes {lanes}), "
                  "got code, bits, lanes = ", members)
        device = Field(tensor, "device.device_type")
        self.fail(Binary("!=", device, Const(1)),
                  f"{what}: expected a CPU tensor (device type 1), got device type ", [device])
        deferred = []
        for dim, extent in enumerate(buffer.shape):
            actual = ShapeAt(tensor, dim)
            kind = type(extent).__name__
            if kind == "IntImm":
                self.fail(Binary("!=", actual, Const(int(extent.value))),
                          f"{what}: expected shape[{dim}] == {int(extent.value)}, got ", [actual])
            elif kind in ("Var", "SizeVar") and id(extent) not in self.bound:
                self.bound[id(extent)] = actual
                self.fail(Binary("<", actual, Const(0)), f"{what}: negative shape[{dim}] ",
                          [actual])
            else:
                deferred.append((actual, extent,
                                 f"{what}: shape[{dim}] must equal {extent!r}; got, expected = "))
        self.strides(tensor, what, buffer)
        offset = buffer.elem_offset
        if type(offset).__name__ in ("Var", "SizeVar") and id(offset) not in self.bound:
            # The kernel indexes from elem_offset: it takes byte_offset, the pointer does not.
            itemsize = max(t.itemsize, 1)
            byte_offset = Field(tensor, "byte_offset")
            self.fail(Binary("!=", Binary("%", byte_offset, Const(itemsize)), Const(0)),
                      f"{what}: byte_offset is not a multiple of the element size, got ",
                      [byte_offset])
            self.bound[id(offset)] = Binary("/", byte_offset, Const(itemsize))
            pointer = DataPointer(tensor, str(t), with_offset=False)
        else:
            pointer = DataPointer(tensor, str(t), with_offset=True)
        self.steps.append(Let(f"{arg}_data", f"{t}*", pointer))
        return deferred

    def strides(self, tensor: str, what: str, buffer: Any) -> None:
        strides = Field(tensor, "strides")
        if buffer.strides:
            for dim, stride in enumerate(buffer.strides):
                if type(stride).__name__ in ("Var", "SizeVar") and id(stride) not in self.bound:
                    compact: _Node = Const(1)
                    for d in range(dim + 1, len(buffer.shape)):
                        compact = ShapeAt(tensor, d) if d == dim + 1 else Binary(
                            "*", compact, ShapeAt(tensor, d))
                    self.bound[id(stride)] = Select(_not_null(strides), StrideAt(tensor, dim),
                                                    compact)
            return
        if len(buffer.shape) <= 1:
            self.fail(_and(_not_null(strides), Binary("==", Field(tensor, "ndim"), Const(1)),
                           Binary(">", ShapeAt(tensor, 0), Const(1)),
                           Binary("!=", StrideAt(tensor, 0), Const(1))),
                      f"{what}: expected a compact tensor, got stride ", [StrideAt(tensor, 0)])
            return
        checks = []
        expected: _Node = Const(1)
        for dim in reversed(range(len(buffer.shape))):
            checks.append(_and(Binary(">", ShapeAt(tensor, dim), Const(1)),
                               Binary("!=", StrideAt(tensor, dim), expected)))
            expected = Binary("*", expected, ShapeAt(tensor, dim))
        self.fail(_and(_not_null(strides), _or(*checks)),
                  f"{what}: expected a compact row-major tensor (strides must be NULL or "
                  "compact)")
