"""MakePackedAPI: give a lowered PrimFunc TVM's packed calling convention.

Entry points: :func:`MakePackedAPI` (the pass), :func:`make_packed_api`.

The input is a lowered PrimFunc (params: buffer handles with a ``buffer_map`` entry, or scalar
vars). The output has exactly these params, in order::

    args: handle            # TVMValue* (one per argument)
    arg_type_ids: handle    # int32* type codes
    num_args: int32
    out_ret_value: handle   # TVMValue*
    out_ret_tcode: handle   # int32*
    resource_handle: handle

``buffer_map`` is empty, ``attrs["calling_conv"] == 1`` (CallingConv.C_PACKED_FUNC) and
``attrs["global_symbol"]`` is kept. The body is a chain of ``LetStmt`` and ``AssertStmt`` in
front of the original body (statement order as listed):

1. ``assert num_args == N, "<f>: num_args should be N"``.
2. per argument ``i``: ``let arg_i_code: int32 = arg_type_ids_buf[i]`` (a BufferLoad on a
   1-D int32 buffer over ``arg_type_ids``); the argument value
   ``let <param> = tir.tvm_struct_get(args, i, kTVMValueContent)`` with dtype ``handle`` for
   buffers, ``int64`` (then cast to the var's dtype) for integer scalars, ``float64`` for float
   scalars; and ``assert <type code ok>, "<f>: Expect arg[i] to be pointer|int|float"``
   (pointer codes: kTVMOpaqueHandle=3, kTVMNullptr=4, kTVMDLTensorHandle=7,
   kTVMNDArrayHandle=13; int: kDLInt=0; float: kDLFloat=2).
3. per buffer argument ``A`` (handle var ``h``):
   ``assert !isnullptr(h), "<f>.A is expected to have non-NULL DLTensor* pointer"``;
   ``assert struct_get(h, 0, kArrNDim):int32 == ndim, "<f>.A.ndim is expected to equal <n>"``;
   ``assert type code (uint8) == c && bits (uint8) == b && lanes (uint16) == l,
   "<f>.A.dtype is expected to be <dtype>"``;
   ``let A.shape: handle = struct_get(h, 0, kArrShape)``; per dimension ``d`` the value is
   ``cast(int32, A.shape_buf[d])`` (``A.shape_buf``: a 1-D int64 buffer over that handle): a
   symbolic dimension seen first is bound with ``let n: int32 = ...``, otherwise
   ``assert <dim> == value, "Argument <f>.A.shape[d] has an unsatisfied constraint: ..."``;
   ``let A.strides: handle = struct_get(h, 0, kArrStrides)`` and, when it is not NULL
   (``IfThenElse(!isnullptr(A.strides), AssertStmt(...))``), every stride must be compact
   row-major: ``"<f>.A.strides: expected to be compact array"`` — unless the buffer declares
   symbolic strides, which are then bound (``let s1: int32 = if_then_else(isnullptr(A.strides),
   <compact stride>, A.strides_buf[d])``);
   ``assert struct_get(h, 0, kArrByteOffset):uint64 == 0, "Argument <f>.A.byte_offset has an
   unsatisfied constraint"``, or, for a buffer whose ``elem_offset`` is a Var,
   ``let elem_offset = byte_offset / itemsize``;
   device: ``assert struct_get(h, 0, kArrDeviceType):int32 == device_type, "Argument
   <f>.A.device_type has an unsatisfied constraint"``; the first buffer binds
   ``let dev_id: int32 = struct_get(h, 0, kArrDeviceId)``, later ones assert equality;
   ``let <A.data> = struct_get(h, 0, kArrData):handle`` binds the buffer's data var the body
   uses.
4. the original body; the function returns 0 after it.

Code generators turn ``AssertStmt(cond, StringImm(msg), body)`` into
``if (!(cond)) { TVMAPISetLastError("msg"); return -1; } body``.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import IntImm, PrimExpr
from kiln.ir.type import PointerType, PrimType
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir import stmt as _s
from kiln.tir.buffer import Buffer
from kiln.tir.function import PrimFunc
from kiln.tir.op import (
    kArrByteOffset,
    kArrData,
    kArrDeviceId,
    kArrDeviceType,
    kArrNDim,
    kArrShape,
    kArrStrides,
    kArrTypeBits,
    kArrTypeCode,
    kArrTypeLanes,
    kTVMValueContent,
)
from kiln.tir.transform.base import prim_func_pass

__all__ = ["MakePackedAPI", "make_packed_api", "TYPE_CODES"]

# TVM's argument type codes (c_runtime_api.h)
TYPE_CODES = {"kDLInt": 0, "kDLUInt": 1, "kDLFloat": 2, "kTVMOpaqueHandle": 3,
              "kTVMNullptr": 4, "kTVMDataType": 5, "kDLDevice": 6, "kTVMDLTensorHandle": 7,
              "kTVMObjectHandle": 8, "kTVMModuleHandle": 9, "kTVMPackedFuncHandle": 10,
              "kTVMStr": 11, "kTVMBytes": 12, "kTVMNDArrayHandle": 13}
_POINTER_CODES = (3, 4, 7, 13)


def _struct_get(handle: PrimExpr, index: int, kind: int, dtype: str) -> PrimExpr:
    return _op.tvm_struct_get(handle, index, kind, dtype)


def _isnull(handle: PrimExpr) -> PrimExpr:
    return _e.Call("bool", "tir.isnullptr", [handle])


class _Builder:
    """Collects let/assert steps, then nests them around the body."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Any, Any, Any]] = []

    def let(self, var: _e.Var, value: PrimExpr) -> None:
        self.steps.append(("let", var, value, None))

    def check(self, cond: PrimExpr, message: str) -> None:
        if isinstance(cond, IntImm) and cond.value:
            return
        self.steps.append(("assert", cond, _e.StringImm(message), None))

    def check_if(self, guard: PrimExpr, cond: PrimExpr, message: str) -> None:
        self.steps.append(("if_assert", guard, cond, _e.StringImm(message)))

    def wrap(self, body: _s.Stmt) -> _s.Stmt:
        for kind, a, b, c in reversed(self.steps):
            if kind == "let":
                body = _s.LetStmt(a, b, body)
            elif kind == "assert":
                body = _s.AssertStmt(a, b, body)
            else:
                body = _s.stmt_seq(_s.IfThenElse(a, _s.AssertStmt(b, c, _s.Evaluate(0))),
                                   body)
        return body


def _type_ok(code: PrimExpr, dtype: str) -> tuple[PrimExpr, str]:
    dt = DataType(dtype)
    if dt.is_handle:
        return _op.any(*[_op.equal(code, c) for c in _POINTER_CODES]), "pointer"
    if dt.is_float:
        return _op.equal(code, TYPE_CODES["kDLFloat"]), "float"
    return _op.any(_op.equal(code, 0), _op.equal(code, 1)), "int"


def _bind_buffer(b: _Builder, fname: str, buf: Buffer, handle: _e.Var, defined: dict,
                 device_type: int, first: bool) -> None:
    label = f"{fname}.{buf.name}"
    b.check(_op.logical_not(_isnull(handle)),
            f"{label} is expected to have non-NULL DLTensor* pointer")
    ndim = len(buf.shape)
    b.check(_op.equal(_struct_get(handle, 0, kArrNDim, "int32"), ndim),
            f"{label}.ndim is expected to equal {ndim}")
    dt = DataType(buf.dtype)
    code = int(dt.type_code) if not dt.is_bool else 1
    bits = dt.bits if not dt.is_bool else 8
    dtype_ok = _op.all(
        _op.equal(_struct_get(handle, 0, kArrTypeCode, "uint8"), _op.const(code, "uint8")),
        _op.equal(_struct_get(handle, 0, kArrTypeBits, "uint8"), _op.const(bits, "uint8")),
        _op.equal(_struct_get(handle, 0, kArrTypeLanes, "uint16"),
                  _op.const(dt.lanes, "uint16")))
    b.check(dtype_ok, f"{label}.dtype is expected to be {buf.dtype}")
    shape_var = _e.Var(f"{buf.name}.shape", PointerType(PrimType("int64")))
    b.let(shape_var, _struct_get(handle, 0, kArrShape, "handle"))
    shape_buf = Buffer(shape_var, "int64", [ndim], [], 0, f"{buf.name}.shape")
    for d, dim in enumerate(buf.shape):
        value = _op.cast(_e.BufferLoad(shape_buf, [d]), dim.dtype)
        if isinstance(dim, _e.Var) and id(dim) not in defined:
            defined[id(dim)] = dim
            b.let(dim, value)
            continue
        b.check(_op.equal(dim, value),
                f"Argument {label}.shape[{d}] has an unsatisfied constraint: "
                f"{_op_text(dim)} == {label}.shape[{d}]")
    strides_var = _e.Var(f"{buf.name}.strides", PointerType(PrimType("int64")))
    b.let(strides_var, _struct_get(handle, 0, kArrStrides, "handle"))
    strides_buf = Buffer(strides_var, "int64", [ndim], [], 0, f"{buf.name}.strides")
    symbolic_strides = [st for st in buf.strides if isinstance(st, _e.Var)]
    if buf.strides and symbolic_strides:
        # strided buffer (binds with strides=[te.var(...), 1]): read each stride variable,
        # falling back to the compact stride when the tensor has no strides array
        compact: PrimExpr = _op.const(1, "int64")
        compact_strides = []
        for d in reversed(range(ndim)):
            compact_strides.append(compact)
            compact = _op.multiply(compact, _op.cast(buf.shape[d], "int64"))
        compact_strides.reverse()
        for d, stride in enumerate(buf.strides):
            value = _op.cast(_op.if_then_else(_isnull(strides_var), compact_strides[d],
                                              _e.BufferLoad(strides_buf, [d])), stride.dtype)
            if isinstance(stride, _e.Var) and id(stride) not in defined:
                defined[id(stride)] = stride
                b.let(stride, value)
            else:
                b.check(_op.equal(stride, value),
                        f"Argument {label}.strides[{d}] has an unsatisfied constraint")
    elif ndim:
        expected: PrimExpr = _op.const(1, "int64")
        conds = []
        for d in reversed(range(ndim)):
            conds.append(_op.equal(_e.BufferLoad(strides_buf, [d]), expected))
            expected = _op.multiply(expected, _op.cast(buf.shape[d], "int64"))
        b.check_if(_op.logical_not(_isnull(strides_var)), _op.all(*conds),
                   f"{label}.strides: expected to be compact array")
    byte_offset = _struct_get(handle, 0, kArrByteOffset, "uint64")
    if isinstance(buf.elem_offset, _e.Var):
        itemsize = DataType(buf.dtype).itemsize
        b.let(buf.elem_offset, _op.cast(_op.floordiv(byte_offset, _op.const(itemsize, "uint64")),
                                        buf.elem_offset.dtype))
    else:
        b.check(_op.equal(byte_offset, _op.const(0, "uint64")),
                f"Argument {label}.byte_offset has an unsatisfied constraint: "
                f"0 == {label}.byte_offset")
    b.check(_op.equal(_struct_get(handle, 0, kArrDeviceType, "int32"), device_type),
            f"Argument {label}.device_type has an unsatisfied constraint: "
            f"{device_type} == {label}.device_type")
    dev_id = defined.setdefault("dev_id", _e.Var("dev_id", "int32"))
    if first:
        b.let(dev_id, _struct_get(handle, 0, kArrDeviceId, "int32"))
    else:
        b.check(_op.equal(dev_id, _struct_get(handle, 0, kArrDeviceId, "int32")),
                f"Argument {label}.device_id has an unsatisfied constraint: "
                f"dev_id == {label}.device_id")
    b.let(buf.data, _struct_get(handle, 0, kArrData, "handle"))


def _op_text(e: PrimExpr) -> str:
    from kiln.tir.printer import script

    return script(e)


def make_packed_api(func: PrimFunc, device_type: int = 1) -> PrimFunc:
    """Rewrite ``func`` to the packed calling convention (see module docstring).

    Example
    -------
    >>> import kiln as tvm
    >>> from kiln import te, tir
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> f = tvm.lower(te.create_schedule(B.op), [A, B], name="add1")["add1"]
    >>> [p.name for p in tir.transform.make_packed_api(f).params][:3]
    ['args', 'arg_type_ids', 'num_args']
    """
    fname = func.attrs.get("global_symbol", "default_function") if func.attrs else \
        "default_function"
    args = _e.Var("args", "handle")
    type_ids = _e.Var("arg_type_ids", PointerType(PrimType("int32")))
    num_args = _e.Var("num_args", "int32")
    out_value = _e.Var("out_ret_value", "handle")
    out_code = _e.Var("out_ret_tcode", PointerType(PrimType("int32")))
    resource = _e.Var("resource_handle", "handle")
    type_buf = Buffer(type_ids, "int32", [len(func.params)], [], 0, "arg_type_ids")
    b = _Builder()
    n = len(func.params)
    b.check(_op.equal(num_args, n), f"{fname}: num_args should be {n}")
    defined: dict = {}
    handles: list[tuple[Buffer, _e.Var]] = []
    for i, param in enumerate(func.params):
        code = _e.Var(f"arg{i}.code", "int32")
        b.let(code, _e.BufferLoad(type_buf, [i]))
        buf = func.buffer_map.get(param)
        if buf is not None:
            handle = _e.Var(f"arg.{buf.name}", "handle")
            b.let(handle, _struct_get(args, i, kTVMValueContent, "handle"))
            handles.append((buf, handle))
            ok, kind = _type_ok(code, "handle")
        else:
            dt = DataType(param.dtype)
            if dt.is_handle:
                raw = _struct_get(args, i, kTVMValueContent, "handle")
            elif dt.is_float:
                raw = _op.cast(_struct_get(args, i, kTVMValueContent, "float64"), param.dtype)
            else:
                raw = _op.cast(_struct_get(args, i, kTVMValueContent, "int64"), param.dtype)
            b.let(param, raw)
            defined[id(param)] = param
            ok, kind = _type_ok(code, param.dtype)
        b.check(ok, f"{fname}: Expect arg[{i}] to be {kind}")
    for k, (buf, handle) in enumerate(handles):
        _bind_buffer(b, fname, buf, handle, defined, device_type, first=(k == 0))
    body = b.wrap(func.body)
    attrs = dict(func.attrs.items()) if func.attrs else {}
    attrs["calling_conv"] = 1
    return PrimFunc([args, type_ids, num_args, out_value, out_code, resource], body,
                    func.ret_type, {}, attrs)


def MakePackedAPI(device_type: int = 1):  # noqa: N802 - TVM's pass name
    """The MakePackedAPI pass (see module docstring)."""
    def run(func: PrimFunc) -> PrimFunc:
        if func.attrs and func.attrs.get("calling_conv", 0) == 1:
            return func
        return make_packed_api(func, device_type)
    return prim_func_pass(run, "tir.MakePackedAPI")


