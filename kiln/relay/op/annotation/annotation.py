"""Internal operators of the compiler: annotations, device placement, memory and VM ops.

Entry points (constructors under TVM's names): :func:`on_device`, :func:`stop_fusion`,
:func:`checkpoint`, :func:`compiler_begin`, :func:`compiler_end`, :func:`cast_hint`,
:func:`device_copy`, :func:`alloc_storage`, :func:`alloc_tensor`, :func:`kill`,
:func:`invoke_tvm_op`, :func:`shape_of` (``vm.shape_of``), :func:`reshape_tensor`,
:func:`call_lowered`, :func:`debug`.

These ops appear in IR produced by passes (ManifestAlloc, device planning, LowerTE …) rather
than in user models. All are ``OPAQUE``; annotations are ``TNonComputational`` (they compute
nothing and vanish at code generation; their reference rule returns the argument) and the
memory ops are stateful.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.type import FuncType, GlobalTypeVar, TypeCall
from kiln.relay.op import op_attrs as A
from kiln.relay.op.op import (
    OPAQUE,
    as_expr,
    call,
    define_op,
    register_op_attr,
    register_reference,
)
from kiln.relay.op.type_relations import Any as DynDim
from kiln.relay.op.type_relations import TupleType, dims, fail, is_static, tensor_arg, tensor_type

STORAGE_TYPE = TypeCall(GlobalTypeVar("Storage"), [])
"""The type of a ``memory.alloc_storage`` result (an opaque storage block handle)."""


def _identity_any_rel(types, attrs, op_name):
    if not types:
        fail(f"{op_name}: expects an argument")
    return types[0]


def _unit_rel(types, attrs, op_name):
    return TupleType([])


def _alloc_storage_rel(types, attrs, op_name):
    tensor_arg(types, 1, op_name)  # the (constant) shape the storage is sized for
    for index, what in ((0, "size"), (2, "alignment")):
        arg = tensor_arg(types, index, op_name)
        if arg.shape or str(arg.dtype) != "int64":
            fail(f"{op_name}: {what} must be an int64 scalar, got {arg}")
    return STORAGE_TYPE


def _alloc_tensor_rel(types, attrs, op_name):
    shape = dims(tensor_arg(types, 2, op_name))
    if attrs.const_shape is not None:
        return tensor_type(list(attrs.const_shape), attrs.dtype)
    if attrs.assert_shape is not None:
        return tensor_type(list(attrs.assert_shape), attrs.dtype)
    if len(shape) != 1 or not is_static(shape[0]):
        fail(f"{op_name}: shape must be a 1-D tensor of static length")
    return tensor_type([DynDim() for _ in range(shape[0])], attrs.dtype)


def _vm_shape_of_rel(types, attrs, op_name):
    dtype = getattr(attrs, "dtype", None) or "int64"
    return tensor_type([len(tensor_arg(types, 0, op_name).shape)], dtype)


def _reshape_tensor_rel(types, attrs, op_name):
    data = tensor_arg(types, 0, op_name)
    return tensor_type(list(attrs.newshape), data.dtype)


def _call_lowered_rel(types, attrs, op_name):
    if not types or not isinstance(types[0], FuncType):
        fail(f"{op_name}: the first argument must be a function")
    return types[0].ret_type


_NON_COMPUTATIONAL = (
    ("on_device", A.OnDeviceAttrs, "pin an expression to a virtual device"),
    ("annotation.stop_fusion", None, "fusion boundary"),
    ("annotation.checkpoint", None, "recompute boundary for gradients"),
    ("annotation.compiler_begin", A.CompilerAttrs, "start of an external-compiler region"),
    ("annotation.compiler_end", A.CompilerAttrs, "end of an external-compiler region"),
    ("annotation.cast_hint", A.CastHintAttrs, "dtype hint"),
    ("annotation.bitpack_start", None, "start of a bitpacked region"),
    ("annotation.bitpack_end", None, "end of a bitpacked region"),
    ("device_copy", A.DeviceCopyAttrs, "copy between devices"),
)
for _name, _attrs, _doc in _NON_COMPUTATIONAL:
    define_op(_name, _identity_any_rel, OPAQUE, 1, _attrs, _doc)
    register_op_attr(_name, "TNonComputational", True)

_INTERNAL = (
    ("memory.alloc_storage", _alloc_storage_rel, 3, A.AllocStorageAttrs, True),
    ("memory.alloc_tensor", _alloc_tensor_rel, 3, A.AllocTensorAttrs, True),
    ("memory.kill", _unit_rel, 1, None, True),
    ("vm.invoke_tvm_op", _unit_rel, 3, None, True),
    ("vm.shape_of", _vm_shape_of_rel, 1, A.ShapeOfAttrs, False),
    ("vm.reshape_tensor", _reshape_tensor_rel, 2, A.ReshapeTensorAttrs, False),
    ("call_lowered", _call_lowered_rel, 2, A.CallLoweredAttrs, False),
    ("debug", _identity_any_rel, 1, A.DebugAttrs, True),
)
for _name, _rel, _arity, _attrs, _stateful in _INTERNAL:
    define_op(_name, _rel, OPAQUE, _arity, _attrs, _name)
    register_op_attr(_name, "TOpIsStateful", _stateful)


def reference_identity(attrs, args, out_type):
    """An annotation (or ``debug``, whose callback the interpreter runs) evaluates to its
    argument."""
    return args[0]


for _name, *_ in _NON_COMPUTATIONAL:
    register_reference(_name, reference_identity)
register_reference("debug", reference_identity)


def on_device(body: Any, virtual_device: Any, constrain_result: bool = False,
              constrain_body: bool = True) -> Any:
    """Annotate ``body`` as computed on ``virtual_device`` (a Device or VirtualDevice)."""
    return call("on_device", [body], A.OnDeviceAttrs(
        virtual_device=virtual_device, constrain_result=bool(constrain_result),
        constrain_body=bool(constrain_body)))


def stop_fusion(data: Any) -> Any:
    """Keep FuseOps from fusing across this point."""
    return call("annotation.stop_fusion", [data])


def checkpoint(data: Any) -> Any:
    """Mark ``data`` for recomputation in the backward pass."""
    return call("annotation.checkpoint", [data])


def compiler_begin(data: Any, compiler: str) -> Any:
    """Start of a region handed to external ``compiler``."""
    return call("annotation.compiler_begin", [data], A.CompilerAttrs(compiler=compiler))


def compiler_end(data: Any, compiler: str) -> Any:
    """End of a region handed to external ``compiler``."""
    return call("annotation.compiler_end", [data], A.CompilerAttrs(compiler=compiler))


def cast_hint(data: Any, dtype: str) -> Any:
    """Hint that ``data`` may be computed in ``dtype``."""
    return call("annotation.cast_hint", [data], A.CastHintAttrs(dtype=dtype))


def device_copy(data: Any, src_device: Any, dst_device: Any) -> Any:
    """Copy ``data`` from ``src_device`` to ``dst_device``."""
    return call("device_copy", [data], A.DeviceCopyAttrs(src_virtual_device=src_device,
                                                         dst_virtual_device=dst_device))


def alloc_storage(size: Any, shape: Any, alignment: Any, virtual_device: Any,
                  dtype_hint: str = "float32") -> Any:
    """Allocate a storage block of ``size`` bytes for a tensor of ``shape``
    (``memory.alloc_storage``; TVM v0.16's operator arguments: size, shape, alignment)."""
    shape = as_expr(list(shape), "int64") if isinstance(shape, list | tuple) else shape
    return call("memory.alloc_storage",
                [as_expr(size, "int64"), shape, as_expr(alignment, "int64")],
                A.AllocStorageAttrs(dtype=dtype_hint, virtual_device=virtual_device))


def alloc_tensor(storage: Any, offset: Any, shape: Any, dtype: str = "float32",
                 assert_shape: Any = None) -> Any:
    """A tensor view of ``shape`` at ``offset`` in ``storage`` (``memory.alloc_tensor``)."""
    from kiln.relay.op.op import constant_value

    if isinstance(shape, list | tuple):
        const_shape = tuple(int(d) for d in shape)
        shape = as_expr(list(const_shape), "int64")
    else:
        value = constant_value(shape)
        const_shape = None if value is None else tuple(int(d) for d in value.reshape(-1))
    return call("memory.alloc_tensor", [storage, as_expr(offset, "int64"), shape],
                A.AllocTensorAttrs(dtype=dtype, const_shape=const_shape,
                                   assert_shape=None if assert_shape is None
                                   else tuple(assert_shape)))


def kill(tensor: Any) -> Any:
    """End the lifetime of ``tensor`` (``memory.kill``)."""
    return call("memory.kill", [tensor])


def invoke_tvm_op(func: Any, inputs: Any, outputs: Any) -> Any:
    """Call the lowered primitive ``func`` on the ``inputs``/``outputs`` tuples."""
    return call("vm.invoke_tvm_op", [func, inputs, outputs])


def shape_of(expr: Any) -> Any:
    """The shape of a tensor as an int64 tensor (``vm.shape_of``)."""
    return call("vm.shape_of", [expr], A.ShapeOfAttrs(dtype="int64"))


def reshape_tensor(data: Any, shape: Any, newshape: Any) -> Any:
    """Reinterpret ``data`` with ``newshape`` without copying (``vm.reshape_tensor``)."""
    return call("vm.reshape_tensor", [data, shape],
                A.ReshapeTensorAttrs(newshape=tuple(newshape)))


def call_lowered(func: Any, inputs: Any, attrs: Any = None) -> Any:
    """Call a lowered function ``func`` on the tuple ``inputs`` (``call_lowered``)."""
    return call("call_lowered", [func, inputs], attrs or A.CallLoweredAttrs(metadata={}))


def debug(expr: Any, debug_func: Any = None) -> Any:
    """Pass ``expr`` through, calling ``debug_func`` on its value when evaluated."""
    return call("debug", [expr], A.DebugAttrs(debug_func=debug_func))


__all__ = [
    "STORAGE_TYPE", "on_device", "stop_fusion", "checkpoint", "compiler_begin",
    "compiler_end", "cast_hint", "device_copy", "alloc_storage", "alloc_tensor", "kill",
    "invoke_tvm_op", "shape_of", "reshape_tensor", "call_lowered", "debug",
]
