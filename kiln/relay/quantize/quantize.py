"""``relay.quantize.quantize``: post-training quantization of a float Relay model to integer ops.

Entry points: :func:`quantize`, :func:`prerequisite_optimize`, :func:`annotate`,
:func:`realize`.

The pipeline is TVM's: prerequisite passes (bind params, SimplifyInference, FoldConstant,
FoldScaleAxis, FoldConstant), *annotate* (choose the quantized layers: every ``nn.conv2d``
except those listed in ``skip_conv_layers``, every ``nn.dense`` unless ``skip_dense_layer``;
their data inputs are the calibration points), *calibrate* (:mod:`.calibrate`) and *realize*.

Realize rewrites the graph with each value either float or integer with a scale. A quantized
layer takes int8 data (``clip(round(x / step))``, or ``qnn.requantize`` from the int32 value of
the layer before), int8 weights quantized at conversion time, and accumulates in int32 at scale
``step_in * step_w``. Bias adds, ReLU/clip, max pooling and the shape ops (reshape, flatten,
transpose, squeeze, expand_dims) stay integer; average pools (``avg_pool2d``,
``global_avg_pool2d``, ``adaptive_avg_pool2d``) sum in int32 at the input's scale; adds of two
integer values and concatenations of integer values requantize them to the finest scale (int32
unless they already share scale and dtype); anything else is computed in float from the
dequantized value, as are the outputs. ``qnn.requantize`` lowers to TVM's fixed-point multiply.

Example
-------
>>> import numpy as np
>>> from kiln import relay
>>> import kiln
>>> x = relay.var("x", shape=(1, 8))
>>> w = relay.const(np.ones((4, 8), "float32"))
>>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, w))))
>>> with relay.quantize.qconfig(skip_dense_layer=False):
...     qmod = relay.quantize.quantize(mod, params={})
>>> "int8" in qmod.astext()
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.ir.module import IRModule
from kiln.relay import expr as rx
from kiln.relay.op.nn.dense import dense_op
from kiln.relay.quantize.calibrate import activation_scale, collect_stats, weight_scale
from kiln.relay.quantize.qconfig import current_qconfig
from kiln.runtime.error import TVMError

__all__ = ["quantize", "prerequisite_optimize", "annotate", "realize", "QuantizedLayer"]

# integer-preserving ops: the result has the input's scale
SAME_SCALE_OPS = ("nn.relu", "nn.max_pool2d", "reshape", "nn.batch_flatten", "transpose",
                  "squeeze", "expand_dims", "nn.pad")
# averages: summed in int32 at the input's scale, divided with truncation (TVM's
# AvgPoolRealize casts to the activation dtype, int32)
AVERAGE_OPS = ("nn.avg_pool2d", "nn.global_avg_pool2d", "nn.adaptive_avg_pool2d")


@dataclass
class QuantizedLayer:
    """One conv2d/dense chosen by annotate: its call and its calibrated scales (S)."""

    call: rx.Call
    input_scale: float = 0.0
    weight_scale: float = 0.0


def prerequisite_optimize(mod: IRModule, params: dict | None = None) -> IRModule:
    """Bind params and fold: the float graph annotate works on (TVM's prerequisite passes)."""
    import kiln
    from kiln.relay import transform
    from kiln.relay.build_module import bind_params_by_name

    if params:
        mod = IRModule.from_expr(bind_params_by_name(mod["main"], params))
    seq = kiln.transform.Sequential([transform.InferType(), transform.SimplifyInference(),
                                     transform.FoldConstant(), transform.FoldScaleAxis(),
                                     transform.FoldConstant(), transform.InferType()])
    with kiln.transform.PassContext(opt_level=3):
        return seq(mod)


def _post_order(expr: rx.Expr) -> list[rx.Expr]:
    """The dataflow nodes of ``expr``, children first; control flow is refused."""
    from kiln.ir.op import Op
    from kiln.relay.expr_functor import post_order_visit

    order: list[rx.Expr] = []

    def visit(node: Any) -> None:
        if isinstance(node, Op):
            return
        if not isinstance(node, (rx.Call, rx.Tuple, rx.TupleGetItem, rx.Var, rx.Constant)):
            raise TVMError(f"relay.quantize works on dataflow graphs; found a "
                           f"{type(node).__name__} (run ToGraphNormalForm first)")
        order.append(node)

    post_order_visit(expr, visit)
    return order


def _op_name(node: Any) -> str:
    return str(node.op.name) if isinstance(node, rx.Call) and hasattr(node.op, "name") else ""


def annotate(func: rx.Function, cfg: Any = None) -> list[QuantizedLayer]:
    """The conv2d/dense calls to quantize, in program order, honouring the skip options and
    ``debug_enabled_ops`` (when set, only the op names it lists)."""
    cfg = cfg or current_qconfig()
    layers, conv_index = [], 0
    for node in _post_order(func.body):
        name = _op_name(node)
        if name == "nn.conv2d":
            index, conv_index = conv_index, conv_index + 1
            if index in cfg.skip_conv_layers:
                continue
        elif getattr(node, "op", None) is not dense_op or cfg.skip_dense_layer:
            continue
        if cfg.debug_enabled_ops is not None and name not in cfg.debug_enabled_ops:
            continue
        if isinstance(node.args[1], rx.Constant):
            layers.append(QuantizedLayer(node))
    return layers


def _const(value: Any, dtype: str) -> rx.Constant:
    return rx.const(np.asarray(value, dtype), dtype)


class _Realizer:
    """Rewrites a float graph; each node's value is ``(expr, step)``, step None for float."""

    def __init__(self, layers: list[QuantizedLayer], cfg: Any) -> None:
        self.layers = {id(layer.call): layer for layer in layers}
        self.cfg = cfg
        self.values: dict[int, tuple[rx.Expr, float | None]] = {}
        self.tuples: dict[int, list[tuple[rx.Expr, float | None]]] = {}

    def float_of(self, value):
        from kiln import relay

        expr, step = value
        if step is None:
            return expr
        return relay.multiply(relay.cast(expr, "float32"), _const(step, "float32"))

    def to_int8(self, value, step: float, nbit: int):
        """``value`` as int8 with step ``step`` (clipped to +-(2**(nbit-1) - 1))."""
        from kiln import relay

        expr, have = value
        limit = float(2 ** (nbit - 1) - 1)
        if have is None:
            scaled = relay.divide(expr, _const(step, "float32"))
            if self.cfg.rounding == "UPWARD":
                rounded = relay.floor(relay.add(scaled, _const(0.5, "float32")))
            else:
                rounded = relay.round(scaled)
            return relay.cast(relay.clip(rounded, -limit, limit), "int8")
        out = relay.qnn.op.requantize(expr, _const(have, "float32"), _const(0, "int32"),
                                      _const(step, "float32"), _const(0, "int32"),
                                      rounding=self.cfg.rounding, out_dtype="int8")
        return relay.clip(out, -limit, limit) if limit < 127 else out

    def to_int32(self, value, step: float):
        from kiln import relay

        expr, have = value
        if have == step:
            return _as_int32(expr)
        return relay.qnn.op.requantize(expr, _const(have, "float32"), _const(0, "int32"),
                                       _const(step, "float32"), _const(0, "int32"),
                                       rounding=self.cfg.rounding, out_dtype="int32")

    def layer(self, node: rx.Call, layer: QuantizedLayer):
        from kiln import relay

        cfg = self.cfg
        step_in = layer.input_scale / 2 ** (cfg.nbit_input - 1)
        step_w = layer.weight_scale / 2 ** (cfg.nbit_weight - 1)
        data = self.to_int8(self.values[id(node.args[0])], step_in, cfg.nbit_input)
        limit = 2 ** (cfg.nbit_weight - 1) - 1
        w = node.args[1].data.numpy()
        wq = np.clip(np.floor(w / step_w + 0.5), -limit, limit).astype("int8")
        attrs = {k: getattr(node.attrs, k) for k in node.attrs.keys()}
        attrs["out_dtype"] = "int32"
        maker = relay.nn.conv2d if _op_name(node) == "nn.conv2d" else relay.nn.dense
        return maker(data, _const(wq, "int8"), **attrs), step_in * step_w

    def call(self, node: rx.Call):
        from kiln import relay

        name = _op_name(node)
        if id(node) in self.layers:
            return self.layer(node, self.layers[id(node)])
        args = [self.values[id(a)] for a in node.args]
        steps = [s for _, s in args]
        if name in SAME_SCALE_OPS and steps[0] is not None and \
                all(isinstance(a, rx.Constant) for a in node.args[1:]):
            if name == "nn.pad":
                attrs = {k: getattr(node.attrs, k) for k in node.attrs.keys()}
                return relay.nn.pad(args[0][0], attrs["pad_width"], _const(0, str(
                    _dtype_of(args[0][0])))), steps[0]
            return rx.Call(node.op, [args[0][0]] + list(node.args[1:]), node.attrs), steps[0]
        if name in AVERAGE_OPS and steps[0] is not None:
            return rx.Call(node.op, [_as_int32(args[0][0])], node.attrs), steps[0]
        if name == "concatenate" and id(node.args[0]) in self.tuples:
            return self.concatenate(node)
        if name == "clip" and steps[0] is not None:
            step = steps[0]
            lo = np.ceil(node.attrs.a_min / step) if np.isfinite(node.attrs.a_min) else -2**31
            hi = np.floor(node.attrs.a_max / step) if np.isfinite(node.attrs.a_max) else 2**31 - 1
            return relay.clip(args[0][0], max(lo, -2**31), min(hi, 2**31 - 1)), step
        if name in ("nn.bias_add", "add") and len(args) == 2 and any(s is not None for s in steps):
            if steps[0] is not None and steps[1] is not None:
                step = min(steps)
                return relay.add(self.to_int32(args[0], step), self.to_int32(args[1], step)), step
            qi = 0 if steps[0] is not None else 1
            other = node.args[1 - qi]
            if isinstance(other, rx.Constant) and str(other.data.dtype) == "float32":
                step = steps[qi]
                bias = np.floor(other.data.numpy() / step + 0.5)
                bias = _const(np.clip(bias, -2**31, 2**31 - 1), "int32")
                lhs = self.to_int32(args[qi], step)
                out = relay.nn.bias_add(lhs, bias, axis=node.attrs.axis) \
                    if name == "nn.bias_add" else relay.add(lhs, bias)
                return out, step
        floats = [self.float_of(a) for a in args]
        return rx.Call(node.op, floats, node.attrs, node.type_args), None

    def concatenate(self, node: rx.Call):
        """Integer fields at the finest of their scales (int32 unless all already share the
        scale and dtype); float when any field is float."""
        from kiln import relay

        fields = self.tuples[id(node.args[0])]
        steps = [s for _, s in fields]
        if any(s is None for s in steps):
            return relay.concatenate([self.float_of(f) for f in fields], node.attrs.axis), None
        if len(set(steps)) == 1 and len({_dtype_of(e) for e, _ in fields}) == 1:
            return relay.concatenate([e for e, _ in fields], node.attrs.axis), steps[0]
        step = min(steps)
        return relay.concatenate([self.to_int32(f, step) for f in fields],
                                 node.attrs.axis), step

    def run(self, func: rx.Function) -> rx.Function:
        for node in _post_order(func.body):
            if isinstance(node, rx.Call):
                value = self.call(node)
            elif isinstance(node, rx.Tuple):
                # kept per field for concatenate; float for any other consumer
                self.tuples[id(node)] = [self.values[id(f)] for f in node.fields]
                value = rx.Tuple([self.float_of(self.values[id(f)]) for f in node.fields]), None
            elif isinstance(node, rx.TupleGetItem):
                value = rx.TupleGetItem(self.float_of(self.values[id(node.tuple_value)]),
                                        node.index), None
            else:
                value = node, None
            self.values[id(node)] = value
        body = self.float_of(self.values[id(func.body)])
        return rx.Function(func.params, body)


def _dtype_of(expr: rx.Expr) -> str:
    from kiln.relay.frontend.common import infer_dtype

    return infer_dtype(expr)


def _as_int32(expr: rx.Expr) -> rx.Expr:
    from kiln import relay

    return expr if _dtype_of(expr) == "int32" else relay.cast(expr, "int32")


def realize(func: rx.Function, layers: list[QuantizedLayer], cfg: Any = None) -> rx.Function:
    """Rewrite ``func`` with ``layers`` (calibrated) on integers; outputs stay float32."""
    return _Realizer(layers, cfg or current_qconfig()).run(func)


def quantize(mod: IRModule, params: dict | None = None, dataset: Any = None) -> IRModule:
    """Quantize ``mod`` under the current :func:`~kiln.relay.quantize.qconfig` (TVM's API).

    Parameters
    ----------
    mod : IRModule
        A float32 model (``main`` a dataflow function).
    params : dict of str to array, optional
        Weights to bind first (by parameter name).
    dataset : iterable of dict, optional
        Calibration samples ``{input name: array}``; needed by ``kl_divergence`` and
        ``percentile``.

    Returns
    -------
    IRModule
        The quantized module: int8 layers accumulating in int32, float32 inputs and outputs.
    """
    cfg = current_qconfig()
    if not isinstance(mod, IRModule):
        raise TVMError(f"relay.quantize.quantize expects an IRModule, got {type(mod).__name__}")
    mod = prerequisite_optimize(mod, params)
    func = mod["main"]
    layers = annotate(func, cfg)
    needs_data = cfg.calibrate_mode != "global_scale"
    stats = collect_stats(func, [layer.call.args[0] for layer in layers], dataset) \
        if needs_data else [None] * len(layers)
    for layer, values in zip(layers, stats):
        layer.input_scale = activation_scale(values, cfg)
        layer.weight_scale = weight_scale(layer.call.args[1].data.numpy(), cfg.weight_scale)
    out = IRModule.from_expr(realize(func, layers, cfg))
    from kiln.relay import transform

    return transform.InferType()(out)
