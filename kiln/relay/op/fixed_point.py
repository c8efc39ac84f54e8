"""Fixed-point multiplication ops (TVM's ``fixed_point_multiply`` and
``fixed_point_multiply_per_axis``): int32 times a Q31 multiplier and a power of two, rounded
half up, the product in int64 and the result int32 — what ``qnn.requantize`` with UPWARD
rounding lowers to (``kiln/relay/qnn/canonicalize.py``), so a requantize epilogue costs one
32x32->64 multiply and a shift per output instead of int64 arithmetic throughout.

Entry points: :func:`fixed_point_multiply`, :func:`fixed_point_multiply_per_axis`.

Example
-------
>>> import numpy as np
>>> from kiln import relay
>>> x = relay.const(np.array([10, -10, 7], "int32"))
>>> y = relay.fixed_point_multiply(x, 1 << 30, 0)  # times 0.5, halves rounded up
>>> relay.create_executor("debug").evaluate(y).numpy().tolist()
[5, -5, 4]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.relay.op.op import (
    OpPattern,
    call,
    define_op,
    register_broadcast_schedule,
    register_compute,
    register_injective_schedule,
    register_reference,
)
from kiln.relay.op.op_attrs import declare_attrs
from kiln.relay.op.type_relations import fail, tensor_arg

__all__ = ["fixed_point_multiply", "fixed_point_multiply_per_axis"]

FixedPointMultiplyAttrs = declare_attrs(
    "FixedPointMultiplyAttrs", "fixed_point_multiply.", multiplier=0, shift=0)
FixedPointMultiplyPerAxisAttrs = declare_attrs(
    "FixedPointMultiplyPerAxisAttrs", "fixed_point_multiply_per_axis.",
    is_lshift_required=False, is_rshift_required=False, axes=())


def _int32_rel(types, attrs, op_name="op"):
    """Output type = the int32 data's; per-axis parameters must be int32 too."""
    for k in range(len(types)):
        if str(tensor_arg(types, k, op_name).dtype) != "int32":
            fail(f"{op_name}: argument {k} must be int32, got {tensor_arg(types, k, op_name)}")
    return tensor_arg(types, 0, op_name)


define_op("fixed_point_multiply", _int32_rel, OpPattern.ELEMWISE, 1, FixedPointMultiplyAttrs,
          "int32 times a Q31 multiplier * 2^shift, rounded half up", 10)
define_op("fixed_point_multiply_per_axis", _int32_rel, OpPattern.BROADCAST, 4,
          FixedPointMultiplyPerAxisAttrs,
          "int32 times per-axis Q31 multipliers * 2^(lshift - rshift), rounded half up", 10)


def fixed_point_multiply(data: Any, multiplier: int, shift: int) -> Any:
    """``data`` (int32) times ``multiplier * 2**(shift - 31)``, rounded half up."""
    return call("fixed_point_multiply", [data],
                FixedPointMultiplyAttrs(multiplier=int(multiplier), shift=int(shift)))


def fixed_point_multiply_per_axis(x: Any, y: Any, lshift: Any, rshift: Any,
                                  is_lshift_required: bool, is_rshift_required: bool,
                                  axes: Any) -> Any:
    """``x`` (int32) times ``y * 2**(lshift - rshift - 31)`` where the int32 tensors ``y``,
    ``lshift``, ``rshift`` run along ``x``'s ``axes``; rounded half up. Every value is
    defined: a negative shift counts as 0 and a left shift above 63 as 63."""
    return call("fixed_point_multiply_per_axis", [x, y, lshift, rshift],
                FixedPointMultiplyPerAxisAttrs(is_lshift_required=bool(is_lshift_required),
                                               is_rshift_required=bool(is_rshift_required),
                                               axes=tuple(int(a) for a in axes)))


@register_compute("fixed_point_multiply")
def compute_fixed_point_multiply(attrs, inputs, out_type):
    """``topi.fixed_point_multiply``."""
    from kiln import topi

    return [topi.fixed_point_multiply(inputs[0], attrs.multiplier, attrs.shift)]


@register_compute("fixed_point_multiply_per_axis")
def compute_fixed_point_multiply_per_axis(attrs, inputs, out_type):
    """``topi.fixed_point_multiply_per_axis``."""
    from kiln import topi

    return [topi.fixed_point_multiply_per_axis(*inputs, attrs.is_lshift_required,
                                               attrs.is_rshift_required, attrs.axes)]


register_injective_schedule("fixed_point_multiply")
register_broadcast_schedule("fixed_point_multiply_per_axis")


def _wrap(value: int, bits: int) -> int:
    """``value`` wrapped to a signed ``bits``-bit integer (two's complement)."""
    return (value + 2**(bits - 1)) % 2**bits - 2**(bits - 1)


def _multiply_exact(x, multiplier, left, right):
    """The definition in Python integers: round((x << left) * multiplier / 2**(31 + right))
    half up, the product wrapped to int64 as the kernel's (a left shift can overflow it),
    the result wrapped to int32 as the int64 -> int32 cast does."""
    # the product fits int64, so a right shift past 64 rounds as 64 does (to 0); Python
    # would build 2**(2**31) for the largest
    total = 31 + min(right, 64)
    product = _wrap((int(x) << left) * int(multiplier), 64)
    return np.int32(_wrap((product + (1 << (total - 1))) >> total, 32))


@register_reference("fixed_point_multiply")
def reference_fixed_point_multiply(attrs, args, out_type):
    """Elementwise, in Python integers."""
    left, right = min(max(attrs.shift, 0), 63), max(-attrs.shift, 0)  # the kernel's clamp
    flat = [_multiply_exact(v, attrs.multiplier, left, right) for v in args[0].ravel()]
    return np.asarray(flat, "int32").reshape(args[0].shape)


@register_reference("fixed_point_multiply_per_axis")
def reference_fixed_point_multiply_per_axis(attrs, args, out_type):
    """Elementwise, in Python integers, the parameters taken at the element's ``axes``."""
    x, y, lshift, rshift = args
    out = np.empty(x.shape, "int32")
    for idx in np.ndindex(x.shape):
        at = tuple(idx[a] for a in attrs.axes)
        # the kernel's clamps: a negative shift counts as 0, a left shift above 63 as 63
        left = min(max(int(lshift[at]), 0), 63) if attrs.is_lshift_required else 0
        out[idx] = _multiply_exact(x[idx], y[at], left, max(int(rshift[at]), 0))
    return out
