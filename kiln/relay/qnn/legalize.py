"""Target-specific QNN legalizations (TVM's ``qnn/op/legalizations.py``), run by
``relay.qnn.transform.Legalize`` before canonicalization.

Entry points: :data:`QNN_LEGALIZATIONS` (op name -> rule(call, typed call, target) returning a
replacement or None), :func:`is_fast_int8_on_intel`, and the helpers TVM names:
:func:`helper_change_dtypes_to_uint8_int8`, :func:`helper_change_dtypes_to_be_same`,
:func:`helper_no_fast_int8_hw_legalization`.

- qnn.conv2d / qnn.dense on an x86 CPU with SSE4.2 (every x86-64 CPU kiln builds for unless
  the target says otherwise) become uint8 data x int8 weight: int8 data + 128 with its zero
  point + 128, uint8 weights - 128 likewise (the zero-point terms absorb the shift), which is
  what the ``vpmaddubsw`` micro-kernels take. Without SSE4.2: the zero points are subtracted in
  int16 and plain ``nn.conv2d``/``nn.dense`` run. On ``arm_cpu``: equal dtypes.
- 8-bit unary ops become a 256-entry table lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, const
from kiln.relay.op import nn as _nn
from kiln.relay.op.op import constant_value
from kiln.relay.qnn.canonicalize import check_zero_point_range
from kiln.relay.qnn.common import is_vector
from kiln.relay.qnn.op import dtype_range
from kiln.relay.transform.pass_util import type_of
from kiln.target.x86 import host_features

__all__ = ["QNN_LEGALIZATIONS", "is_fast_int8_on_intel", "helper_change_dtypes_to_uint8_int8",
           "helper_change_dtypes_to_be_same", "helper_no_fast_int8_hw_legalization"]

# x86 CPUs LLVM knows without SSE4.2 (a named -mcpu outside this set has it)
_NO_SSE42_CPUS = {"generic", "x86-64", "i386", "i486", "i586", "i686", "pentium4", "prescott",
                  "nocona", "core2", "penryn", "k8", "athlon64", "opteron", "athlon-fx"}


def is_fast_int8_on_intel(target: Any) -> bool:
    """Whether ``target`` (an x86 CPU) has SSE4.2: from ``-mattr`` when it names it, else from
    ``-mcpu``, else the host CPU (kiln builds CPU code for the host by default)."""
    mattr = list(getattr(target, "mattr", []) or [])
    if "-sse4.2" in mattr:
        return False
    if any(f"+{feature}" in mattr for feature in ("sse4.2", "avx", "avx2", "avx512f")):
        return True
    mcpu = getattr(target, "mcpu", "") or ""
    if mcpu and mcpu != "native":
        return mcpu not in _NO_SSE42_CPUS
    return _host_has_sse42()


def _host_has_sse42() -> bool:
    return "sse4.2" in host_features()


def _shift(data: Any, zero_point: Any, out_dtype: str) -> tuple[Any, Any]:
    """``data`` moved by +-128 into ``out_dtype``, and its zero point moved with it."""
    shift = 128 if out_dtype == "uint8" else -128
    moved = _op.cast(_op.add(_op.cast(data, "int32"), const(np.int32(shift))), out_dtype)
    value = constant_value(zero_point)
    if value is not None:
        return moved, const((np.asarray(value, "int64") + shift).astype("int32"))
    return moved, _op.add(zero_point, const(np.int32(shift)))


def _remake(call_: Call, args: list) -> Call:
    return Call(call_.op, args, call_.attrs)


def helper_change_dtypes_to_uint8_int8(call_: Call, node: Call) -> Any:
    """uint8 data x int8 kernel (the x86 int8 instructions' operand types), or None."""
    data_dtype, kernel_dtype = (str(type_of(a).dtype) for a in node.args[:2])
    if (data_dtype, kernel_dtype) == ("uint8", "int8") or \
            data_dtype not in ("int8", "uint8") or kernel_dtype not in ("int8", "uint8"):
        return None
    data, kernel, zp_a, zp_w, s_a, s_w = call_.args
    if data_dtype == "int8":
        data, zp_a = _shift(data, zp_a, "uint8")
    if kernel_dtype == "uint8":
        kernel, zp_w = _shift(kernel, zp_w, "int8")
    return _remake(call_, [data, kernel, zp_a, zp_w, s_a, s_w])


def helper_change_dtypes_to_be_same(call_: Call, node: Call) -> Any:
    """The data moved into the kernel's dtype when the two differ (8-bit only), or None."""
    data_dtype, kernel_dtype = (str(type_of(a).dtype) for a in node.args[:2])
    if data_dtype == kernel_dtype or {data_dtype, kernel_dtype} != {"int8", "uint8"}:
        return None
    data, kernel, zp_a, zp_w, s_a, s_w = call_.args
    data, zp_a = _shift(data, zp_a, kernel_dtype)
    return _remake(call_, [data, kernel, zp_a, zp_w, s_a, s_w])


def helper_no_fast_int8_hw_legalization(call_: Call, node: Call) -> Any:
    """Zero points subtracted in int16, then the plain ``nn`` op (for CPUs without fast int8
    instructions, where int16 multiplies vectorize better)."""
    data, kernel, zp_a, zp_w = call_.args[:4]
    attrs = call_.attrs
    shift_data = _op.subtract(_op.cast(data, "int16"), _op.cast(zp_a, "int16"))
    zp_w16 = _op.cast(zp_w, "int16")
    if node.op.name == "qnn.dense":
        if is_vector(node.args[3]):
            zp_w16 = _op.expand_dims(zp_w16, 1)
        shift_kernel = _op.subtract(_op.cast(kernel, "int16"), zp_w16)
        return _nn.dense(shift_data, shift_kernel, units=attrs.units, out_dtype=attrs.out_dtype)
    layout = str(attrs.kernel_layout)
    if is_vector(node.args[3]):
        shape = [1] * len(layout)
        shape[layout.index("O")] = -1
        zp_w16 = _op.reshape(zp_w16, shape)
    shift_kernel = _op.subtract(_op.cast(kernel, "int16"), zp_w16)
    return _nn.conv2d(shift_data, shift_kernel, strides=attrs.strides, padding=attrs.padding,
                      dilation=attrs.dilation, groups=attrs.groups, channels=attrs.channels,
                      kernel_size=attrs.kernel_size, data_layout=attrs.data_layout,
                      kernel_layout=attrs.kernel_layout, out_layout=attrs.out_layout,
                      out_dtype=attrs.out_dtype)


def _legalize_conv_dense(call_: Call, node: Call, target: Any) -> Any:
    if target is None:
        return None
    # checked before the shift moves them, so the message names the user's values
    check_zero_point_range(call_.args[2], node.args[0], node.op.name, "input_zero_point")
    check_zero_point_range(call_.args[3], node.args[1], node.op.name, "kernel_zero_point")
    keys = list(target.keys)
    if "arm_cpu" in keys:
        return helper_change_dtypes_to_be_same(call_, node)
    if "cpu" in keys and target.kind.name in ("llvm", "c"):
        if _is_x86(target) and is_fast_int8_on_intel(target):
            return helper_change_dtypes_to_uint8_int8(call_, node)
        if _is_x86(target) and str(type_of(node.args[1]).dtype) in ("int8", "uint8"):
            return helper_no_fast_int8_hw_legalization(call_, node)
    return None


def _is_x86(target: Any) -> bool:
    triple = str(target.attrs.get("mtriple", "")) if hasattr(target, "attrs") else ""
    if triple:
        return triple.startswith(("x86_64", "i386", "i686"))
    import platform

    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _legalize_unary(name: str) -> Callable[[Call, Call, Any], Any]:
    """An 8-bit unary op with constant parameters becomes ``take(table, x - min)``."""

    def rule(call_: Call, node: Call, target: Any) -> Any:
        from kiln.relay.qnn.unary import lookup_table

        dtype = str(type_of(node.args[0]).dtype)
        params = call_.args[1:]
        if dtype not in ("int8", "uint8") or any(constant_value(p) is None for p in params):
            return None
        table = lookup_table(name, *params, dtype)
        lo, _ = dtype_range(dtype)
        index = _op.subtract(_op.cast(call_.args[0], "int32"), const(np.int32(lo)))
        return _op.take(const(table), index, axis=0, mode="clip")

    rule.__name__ = f"legalize_{name}"
    return rule


def _unary_rules() -> dict:
    from kiln.relay.qnn.unary import UNARY_OPS

    return {f"qnn.{n}": _legalize_unary(n) for n in UNARY_OPS}


# op name -> rule(rewritten call, typed call, target or None) -> replacement or None
QNN_LEGALIZATIONS: dict[str, Callable[[Call, Call, Any], Any]] = {
    "qnn.conv2d": _legalize_conv_dense,
    "qnn.dense": _legalize_conv_dense,
    **_unary_rules(),
}
