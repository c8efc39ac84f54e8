"""``relay.transform.FakeQuantizationToInteger``: float regions between ``qnn.dequantize`` and
``qnn.quantize`` become integer QNN ops (TVM's ``fake_quantization_to_integer.cc``), which
is what a QDQ model (ONNX Runtime's ``quantize_static`` output) needs to run on integers.

Entry points: :func:`FakeQuantizationToInteger`, :func:`fake_quantization_to_integer`.

Each rewritten value is an *affine* integer tensor: ``real = scale * (q - zero_point)`` with
constant scale/zero point (per-tensor, or per-channel along one axis). ``qnn.dequantize``
starts one; layout ops (reshape, transpose, max pooling, ...) carry it through; ``nn.conv2d``,
``nn.dense``, ``nn.matmul`` and ``nn.batch_matmul`` of two affine tensors become the QNN op
(an int32 accumulator with scale ``s_a * s_b``, zero point 0), and ``bias_add``/``add`` of an
accumulator and an int32 bias with that scale stays in int32. At a ``qnn.quantize`` the value
is requantized to the output's parameters; ops that need those parameters (add, subtract,
multiply, concatenate, average pools, relu/clip, the unary functions) are rewritten there.
Anything else keeps its float form, so the pass never changes what it does not understand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.relay import op as _op
from kiln.relay.expr import Call, Tuple, const
from kiln.relay.expr_functor import ExprMutator
from kiln.relay.op.nn.dense import batch_matmul_op, dense_op, matmul_op
from kiln.relay.op.op import constant_value
from kiln.relay.qnn import op as qnn
from kiln.relay.transform.pass_util import is_op_call, relay_function_pass

__all__ = ["FakeQuantizationToInteger", "fake_quantization_to_integer"]

# ops that move or select elements: the affine parameters pass through unchanged
_LAYOUT_OPS = ("reshape", "squeeze", "expand_dims", "nn.batch_flatten", "nn.max_pool2d",
               "nn.global_max_pool2d", "strided_slice", "nn.pad", "transpose",
               "nn.depth_to_space", "nn.space_to_depth", "take", "broadcast_to")
_UNARY = {"sigmoid": qnn.sigmoid, "tanh": qnn.tanh, "exp": qnn.exp, "sqrt": qnn.sqrt,
          "rsqrt": qnn.rsqrt, "erf": qnn.erf, "log": qnn.log, "abs": qnn.abs}


@dataclass(frozen=True)
class Affine:
    """An integer tensor ``q`` standing for ``scale * (q - zero_point)``."""

    q: Any
    scale: np.ndarray  # float32, 0-D or 1-D
    zero_point: np.ndarray  # int32, 0-D or 1-D
    axis: int  # the per-channel axis (normalized), -1 when per-tensor
    dtype: str

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def scale_expr(self) -> Any:
        return const(self.scale.reshape(()) if self.scale.size == 1 else self.scale)

    def zero_point_expr(self) -> Any:
        zp = self.zero_point
        return const((zp.reshape(()) if zp.size == 1 else zp).astype("int32"))


def _shape(node: Any) -> list[int]:
    return [int(d) for d in node.checked_type.shape]


class _FakeQuantRewriter(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        self.affine: dict[int, Affine] = {}
        self.keep: list[Any] = []  # the keys of ``affine`` stay alive while it is used

    def info(self, expr: Any) -> Affine | None:
        return self.affine.get(id(expr))

    def mark(self, expr: Any, info: Affine) -> Any:
        self.affine[id(expr)] = info
        self.keep.append(expr)
        return expr

    def visit_call(self, node: Call) -> Any:
        new = super().visit_call(node)
        if not is_op_call(new):
            return new
        name = new.op.name
        if name == "qnn.dequantize":
            self._dequantize(new, node)
        elif name == "qnn.quantize":
            return self._quantize(new, node)
        elif name in _LAYOUT_OPS:
            self._layout(new, node)
        elif name == "nn.conv2d" or new.op in (dense_op, matmul_op, batch_matmul_op):
            self._product(new, node)
        elif name in ("nn.bias_add", "add"):
            self._bias(new, node)
        return new

    # -- where affine values start and flow ----------------------------------------------
    def _dequantize(self, new: Call, node: Call) -> None:
        scale, zp = constant_value(new.args[1]), constant_value(new.args[2])
        if scale is None or zp is None or str(node.checked_type.dtype) != "float32":
            return
        ndim = len(_shape(node))
        axis = int(new.attrs.axis)
        axis = axis + ndim if axis < 0 else axis
        per_channel = scale.size > 1 or zp.size > 1
        self.mark(new, Affine(new.args[0], np.asarray(scale, "float32"),
                              np.asarray(zp, "int64").astype("int32"),
                              axis if per_channel else -1,
                              str(node.args[0].checked_type.dtype)))

    def _layout(self, new: Call, node: Call) -> None:
        a = self.info(new.args[0])
        if a is None:
            return
        axis = a.axis
        if not a.per_tensor:
            if new.op.name != "transpose":
                return
            ndim = len(_shape(node))
            axes = new.attrs.axes
            perm = list(range(ndim))[::-1] if axes is None else [int(x) % ndim for x in axes]
            axis = perm.index(a.axis)
        args = [a.q, *new.args[1:]]
        if new.op.name == "nn.pad":  # pad with the zero point: the padded reals are 0
            pad_value = constant_value(new.args[1])
            if pad_value is None or np.any(pad_value != 0):
                return
            args[1] = const(a.zero_point.reshape(()).astype(a.dtype))
        self.mark(new, Affine(Call(new.op, args, new.attrs), a.scale, a.zero_point, axis,
                              a.dtype))

    def _product(self, new: Call, node: Call) -> None:
        a, b = self.info(new.args[0]), self.info(new.args[1])
        if a is None or b is None or not a.per_tensor or \
                a.dtype not in ("int8", "uint8") or b.dtype not in ("int8", "uint8"):
            return
        name, attrs = new.op.name, new.attrs
        out_ndim = len(_shape(node))
        if name == "nn.conv2d":
            if b.axis not in (-1, str(attrs.kernel_layout).index("O")):
                return
            q = qnn.conv2d(a.q, b.q, a.zero_point_expr(), b.zero_point_expr(), a.scale_expr(),
                           b.scale_expr(), attrs.kernel_size, attrs.channels,
                           strides=attrs.strides, padding=attrs.padding,
                           dilation=attrs.dilation, groups=attrs.groups,
                           data_layout=attrs.data_layout, kernel_layout=attrs.kernel_layout,
                           out_layout=attrs.out_layout)
            axis = str(attrs.out_layout or attrs.data_layout).index("C")
        elif new.op in (dense_op, matmul_op):
            kernel, kaxis = b.q, b.axis
            if new.op is matmul_op and attrs.transpose_a:
                return
            if new.op is matmul_op and not attrs.transpose_b:
                kernel = _op.transpose(kernel, (1, 0))
                kaxis = {-1: -1, 0: 1, 1: 0}[kaxis]
            if kaxis not in (-1, 0):
                return
            q = qnn.dense(a.q, kernel, a.zero_point_expr(), b.zero_point_expr(),
                          a.scale_expr(), b.scale_expr(), None)
            axis = out_ndim - 1
        else:  # nn.batch_matmul
            if not b.per_tensor or attrs.transpose_a:
                return
            y = b.q if attrs.transpose_b else _op.transpose(b.q, (0, 2, 1))
            q = qnn.batch_matmul(a.q, y, a.zero_point_expr(), b.zero_point_expr(),
                                 a.scale_expr(), b.scale_expr())
            axis = -1
        scale = (a.scale.astype("float32") * b.scale.astype("float32")).reshape(-1)
        scale = scale.reshape(()) if scale.size == 1 else scale
        self.mark(new, Affine(q, scale, np.zeros((), "int32"), -1 if scale.size == 1 else axis,
                              "int32"))

    def _bias(self, new: Call, node: Call) -> None:
        acc, bias = self.info(new.args[0]), self.info(new.args[1])
        if acc is not None and bias is None and acc.dtype == "int32":
            bias = _quantized_bias(new.args[1], acc, new.op.name == "nn.bias_add")
        if acc is None or bias is None or acc.dtype != "int32" or bias.dtype != "int32":
            return
        if np.any(acc.zero_point != 0) or np.any(bias.zero_point != 0):
            return
        acc_scale, bias_scale = acc.scale.reshape(-1), bias.scale.reshape(-1)
        if bias_scale.size not in (1, acc_scale.size) or acc_scale.size not in (1, bias_scale.size):
            return
        # ONNX Runtime writes the bias with scale s_x * s_w (computed in float32); a constant
        # bias at another scale (a shared initializer) is rounded again to the accumulator's
        if not np.allclose(bias_scale, acc_scale, rtol=1e-5, atol=0):
            q = constant_value(bias.q)
            if q is None:
                return
            real = ((q.astype("int64") - bias.zero_point) * bias.scale).astype("float32")
            bias = _quantized_bias(const(real), acc, new.op.name == "nn.bias_add")
            if bias is None:
                return
        q = Call(new.op, [acc.q, bias.q], new.attrs)
        self.mark(new, Affine(q, acc.scale, acc.zero_point, acc.axis, "int32"))

    # -- where affine values end -----------------------------------------------------------
    def _quantize(self, new: Call, node: Call) -> Any:
        scale, zp = constant_value(new.args[1]), constant_value(new.args[2])
        if scale is None or zp is None or scale.size != 1 or zp.size != 1:
            return new
        out_dtype = str(new.attrs.out_dtype)
        out = (np.float32(scale.reshape(-1)[0]), int(zp.reshape(-1)[0]))
        value = new.args[0]
        a = self.info(value)
        if a is not None:
            return _requantize(a, out, out_dtype)
        rewritten = self._at_quantize(value, node.args[0], out, out_dtype)
        return new if rewritten is None else rewritten

    def _at_quantize(self, value: Any, typed: Any, out: tuple, out_dtype: str) -> Any:
        """The QNN form of ``value`` (``typed`` is its type-checked original) quantized to
        ``out``, or None."""
        if not is_op_call(value):
            return None
        name = value.op.name
        if name == "concatenate" and isinstance(value.args[0], Tuple):
            infos = [self.info(f) for f in value.args[0].fields]
            if any(i is None or not i.per_tensor or i.dtype != out_dtype for i in infos):
                return None
            return qnn.concatenate([i.q for i in infos], [i.scale_expr() for i in infos],
                                   [i.zero_point_expr() for i in infos], const(out[0]),
                                   const(np.int32(out[1])), int(value.attrs.axis))
        args = [self.info(a) for a in value.args]
        if not args or any(a is None for a in args):
            return None
        a = args[0]
        o_scale, o_zp = const(out[0]), const(np.int32(out[1]))
        if name in ("nn.relu", "clip"):
            lo, hi = (0.0, np.inf) if name == "nn.relu" else (
                float(value.attrs.a_min), float(value.attrs.a_max))
            return _clip_in_output(_requantize(a, out, out_dtype), lo, hi, out, out_dtype)
        if any(not x.per_tensor for x in args):
            return None
        if name in ("add", "subtract", "multiply") and len(args) == 2 and \
                a.dtype == args[1].dtype == out_dtype:
            make = {"add": qnn.add, "subtract": qnn.subtract, "multiply": qnn.mul}[name]
            b = args[1]
            return make(a.q, b.q, a.scale_expr(), a.zero_point_expr(), b.scale_expr(),
                        b.zero_point_expr(), o_scale, o_zp)
        if a.dtype != out_dtype:
            return None
        if name in _UNARY:
            return _UNARY[name](a.q, a.scale_expr(), a.zero_point_expr(), o_scale, o_zp)
        if name == "nn.leaky_relu":
            return qnn.leaky_relu(a.q, float(value.attrs.alpha), a.scale_expr(),
                                  a.zero_point_expr(), o_scale, o_zp)
        if name == "nn.avg_pool2d":
            at = value.attrs
            return qnn.avg_pool2d(a.q, a.scale_expr(), a.zero_point_expr(), o_scale, o_zp,
                                  at.pool_size, at.strides, at.padding, at.dilation,
                                  at.ceil_mode, at.count_include_pad, at.layout, at.out_layout)
        if name in ("nn.global_avg_pool2d", "mean"):
            return _mean_to_output(value, typed, a, out, out_dtype)
        return None


def _quantized_bias(bias: Any, acc: Affine, is_bias_add: bool) -> Affine | None:
    """A float constant bias of an int32 accumulator, rounded to the accumulator's scale (the
    error, half an accumulator step, is far below one output step); quantize_static leaves
    some biases (depthwise convs) float."""
    value = constant_value(bias)
    if value is None or value.dtype != np.float32 or np.any(acc.zero_point != 0):
        return None
    scale = acc.scale.reshape(-1)
    if scale.size > 1 and not (is_bias_add and value.shape == scale.shape):
        return None
    with np.errstate(all="ignore"):
        q = np.round(value.astype("float64") / (scale if scale.size > 1 else scale[0]))
    if not np.all(np.isfinite(q)) or np.any(np.abs(q) >= 2**31):
        return None
    return Affine(const(q.astype("int32")), acc.scale, acc.zero_point, acc.axis, "int32")


def _mean_to_output(value: Call, typed: Call, a: Affine, out: tuple, out_dtype: str) -> Any:
    """A spatial mean: the int32 sum of ``q - zp`` over the window, requantized with scale
    ``scale / count`` (one rounding, as an integer average pool with a float multiplier)."""
    shape = [int(d) for d in typed.args[0].checked_type.shape]
    if value.op.name == "mean":
        if value.attrs.exclude or value.attrs.axis is None:
            return None
        axes = [int(x) % len(shape) for x in value.attrs.axis]
        keepdims = bool(value.attrs.keepdims)
    else:
        layout = str(value.attrs.layout)
        if value.attrs.out_layout and str(value.attrs.out_layout) != layout:
            return None
        axes, keepdims = [layout.index("H"), layout.index("W")], True
    count = int(np.prod([shape[x] for x in axes]))
    centered = _op.subtract(_op.cast(a.q, "int32"), a.zero_point_expr())
    total = _op.sum(centered, axis=axes, keepdims=keepdims)
    scale = np.float32(a.scale.reshape(-1)[0] / np.float32(count))
    return qnn.requantize(total, const(scale), const(np.int32(0)), const(out[0]),
                          const(np.int32(out[1])), out_dtype=out_dtype)


def _requantize(a: Affine, out: tuple, out_dtype: str) -> Any:
    """``a`` as an ``out_dtype`` tensor with the output's (scale, zero point)."""
    if a.per_tensor and float(a.scale.reshape(-1)[0]) == float(out[0]) and \
            int(a.zero_point.reshape(-1)[0]) == out[1] and a.dtype == out_dtype:
        return a.q
    return qnn.requantize(a.q, a.scale_expr(), a.zero_point_expr(), const(out[0]),
                          const(np.int32(out[1])), axis=a.axis, out_dtype=out_dtype)


def _clip_in_output(q: Any, lo: float, hi: float, out: tuple, out_dtype: str) -> Any:
    """Clip an output-domain tensor to the quantized images of the reals ``[lo, hi]``."""
    info = np.iinfo(out_dtype)
    qlo = info.min if lo == -np.inf else max(info.min, int(np.round(lo / out[0])) + out[1])
    qhi = info.max if hi == np.inf else min(info.max, int(np.round(hi / out[0])) + out[1])
    clipped = _op.clip(q, float(qlo), float(qhi))
    return clipped if str(out_dtype) == "int32" else _op.cast(clipped, out_dtype)


def fake_quantization_to_integer(expr: Any) -> Any:
    """Rewrite the dequantize -> float ops -> quantize regions of a typed expression."""
    return _FakeQuantRewriter().visit(expr)


def FakeQuantizationToInteger(hard_fail: bool = False, use_qat: bool = False,  # noqa: N802
                              optional_qnn_ops: Any = None):
    """TVM's pass: float regions between ``qnn.dequantize`` and ``qnn.quantize`` become QNN
    integer ops (``hard_fail``, ``use_qat`` and ``optional_qnn_ops`` are accepted for TVM
    compatibility; regions kiln cannot rewrite stay float)."""

    def rewrite(func: Any, mod: Any, ctx: Any) -> Any:
        return fake_quantization_to_integer(func)

    return relay_function_pass("FakeQuantizationToInteger", 0, rewrite,
                               required=("InferType",), needs_types=True)
