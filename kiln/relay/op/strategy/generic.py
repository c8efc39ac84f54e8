"""Generic strategies: every op with a compute and a schedule gets one (``<op>.generic``).

Entry points: :data:`COMPUTES` (op name → ``compute(attrs, inputs, out_type)``),
:func:`schedule_kind` (``"injective"``, ``"reduce"`` or ``"opaque"``),
:func:`schedule_injective`, :func:`schedule_reduce`, :func:`schedule_opaque`.

Op family modules (``kiln/relay/op/nn/dense.py`` …) register an op's compute and schedule
beside the op (``register_compute``, ``register_injective_schedule`` …). The ops not moved
into a family module yet keep their compute in the :data:`COMPUTES` table below, which
gives them ``FTVMCompute`` and ``FTVMSchedule``; after import :data:`COMPUTES` lists every
op's compute. Faster target-specific implementations live in :mod:`.x86` and
:mod:`.arm_cpu`.

The ``dyn.*`` ops and ``argwhere`` have computes too (:mod:`kiln.topi.dynamic`): their output
extents are run-time values that the VM gets from each op's shape function
(:mod:`kiln.relay.vm.shape_rules`). The reshape family, ``concatenate``, ``split``,
``strided_slice`` and ``nn.batch_matmul`` switch to those computes when a call has ``Any``
dims.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import topi
from kiln.relay.op.op import SCHEDULE_KINDS, schedule_injective, schedule_opaque, schedule_reduce
from kiln.relay.op.rule_util import optional_list as _opt
from kiln.relay.op.rule_util import out_dtype as _dtype
from kiln.relay.op.rule_util import out_shape, static_or_symbolic
from kiln.relay.op.strategy.registry import (
    OpStrategy,
    register_generic_strategy,
    register_implementation,
    register_target_schedule,
)
from kiln.tir import op as _op
from kiln.topi import dynamic, nn

__all__ = ["COMPUTES", "SCHEDULES", "out_shape", "schedule_kind", "schedule_injective",
           "schedule_reduce", "schedule_opaque", "wrap_strategy"]


# ---- computes: fn(attrs, inputs, out_type) -> list of tensors ---------------------------------
COMPUTES: dict[str, Callable] = {}


def _unary(fn: Callable) -> Callable:
    return lambda attrs, inputs, out_type: [fn(inputs[0])]




COMPUTES.update({
    "nn.batch_flatten": lambda a, i, t: [topi.reshape(i[0], out_shape(t))],
    "concatenate": lambda a, i, t: [topi.concatenate(list(i), a.axis)],
    "stack": lambda a, i, t: [topi.stack(list(i), a.axis)],
    "split": lambda a, i, t: topi.split(i[0], a.indices_or_sections
                                        if isinstance(a.indices_or_sections, int)
                                        else list(a.indices_or_sections), a.axis),
    "take": lambda a, i, t: [topi.take(i[0], i[1], a.axis, a.batch_dims, a.mode)],
    "gather": lambda a, i, t: [topi.gather(i[0], a.axis, i[1])],
    "gather_nd": lambda a, i, t: [topi.gather_nd(i[0], i[1], a.batch_dims)],
    "strided_slice": lambda a, i, t: [topi.strided_slice(
        i[0], list(a.begin), _opt(a.end), _opt(a.strides), _opt(a.axes), a.slice_mode)],
    "slice_like": lambda a, i, t: [topi.slice_like(i[0], i[1], _opt(a.axes))],
    "tile": lambda a, i, t: [topi.tile(i[0], list(a.reps))],
    "repeat": lambda a, i, t: [topi.repeat(i[0], a.repeats, a.axis)],
    "reverse": lambda a, i, t: [topi.reverse(i[0], a.axis)],
    "where": lambda a, i, t: [topi.where(i[0], i[1], i[2])],
    "one_hot": lambda a, i, t: [topi.one_hot(i[0], i[1], i[2], a.depth, a.axis,
                                             _dtype(t))],
    "arange": lambda a, i, t: [_arange(i, out_shape(t), _dtype(t))],
    "full": lambda a, i, t: [topi.full(out_shape(t), _dtype(t), i[0])],
    "full_like": lambda a, i, t: [topi.full(out_shape(t), _dtype(t), i[1])],
    "layout_transform": lambda a, i, t: [topi.layout_transform(i[0], a.src_layout,
                                                               a.dst_layout)],
    "broadcast_to": lambda a, i, t: [topi.broadcast_to(i[0], out_shape(t))],
    "broadcast_to_like": lambda a, i, t: [topi.broadcast_to(i[0], out_shape(t))],
    "collapse_sum_like": lambda a, i, t: [topi.collapse_sum(i[0], out_shape(t))],
    "collapse_sum_to": lambda a, i, t: [topi.collapse_sum(i[0], out_shape(t))],
    "cast": lambda a, i, t: [topi.cast(i[0], _dtype(t))],
    "cast_like": lambda a, i, t: [topi.cast(i[0], _dtype(t))],
    "reinterpret": lambda a, i, t: [topi.reinterpret(i[0], _dtype(t))],
    "sequence_mask": lambda a, i, t: [topi.sequence_mask(i[0], i[1], a.mask_value,
                                                         a.axis)],
    "cumsum": lambda a, i, t: [topi.cumsum(i[0], a.axis, _dtype(t), bool(a.exclusive))],
    "cumprod": lambda a, i, t: [topi.cumprod(i[0], a.axis, _dtype(t), bool(a.exclusive))],
    # nn
    "nn.relu": _unary(nn.relu),
    "nn.leaky_relu": lambda a, i, t: [nn.leaky_relu(i[0], a.alpha)],
    "nn.prelu": lambda a, i, t: [nn.prelu(i[0], i[1], a.axis)],
    "nn.bias_add": lambda a, i, t: [nn.bias_add(i[0], i[1], a.axis)],
    "nn.softmax": lambda a, i, t: [nn.softmax(i[0], a.axis)],
    "nn.fast_softmax": lambda a, i, t: [nn.fast_softmax(i[0], a.axis)],
    "nn.log_softmax": lambda a, i, t: [nn.log_softmax(i[0], a.axis)],
    "nn.dropout": lambda a, i, t: [topi.identity(i[0]),
                                   topi.full(out_shape(t, 1), _dtype(t, 1), 1)],
    "nn.batch_norm": lambda a, i, t: nn.batch_norm(*i, a.axis, a.epsilon, a.center,
                                                   a.scale),
    "nn.layer_norm": lambda a, i, t: [nn.layer_norm(*i, a.axis, a.epsilon, a.center,
                                                    a.scale)],
    "nn.instance_norm": lambda a, i, t: [nn.instance_norm(*i, a.axis, a.epsilon, a.center,
                                                          a.scale)],
    "nn.group_norm": lambda a, i, t: [nn.group_norm(*i, a.num_groups, a.axis, a.epsilon,
                                                    a.center, a.scale)],
    "nn.l2_normalize": lambda a, i, t: [nn.l2_normalize(i[0], a.eps, _opt(a.axis))],
    "nn.lrn": lambda a, i, t: [nn.lrn(i[0], a.size, a.axis, a.alpha, a.beta, a.bias)],
    "nn.pad": lambda a, i, t: [nn.pad(i[0], [int(p[0]) for p in a.pad_width],
                                      [int(p[1]) for p in a.pad_width], i[1],
                                      pad_mode=a.pad_mode)],
    "nn.mirror_pad": lambda a, i, t: [nn.mirror_pad(i[0], [int(p[0]) for p in a.pad_width],
                                                    [int(p[1]) for p in a.pad_width],
                                                    a.mode)],
    "nn.upsampling": lambda a, i, t: [nn.upsampling(i[0], a.scale_h, a.scale_w, a.layout,
                                                    a.method, a.align_corners)],
    "nn.depth_to_space": lambda a, i, t: [nn.depth_to_space(i[0], a.block_size, a.layout,
                                                            a.mode)],
    "nn.space_to_depth": lambda a, i, t: [nn.space_to_depth(i[0], a.block_size, a.layout)],
    "argsort": lambda a, i, t: [topi.argsort(i[0], a.axis, a.is_ascend, _dtype(t))],
    "sort": lambda a, i, t: [topi.sort(i[0], a.axis, a.is_ascend)],
    "topk": lambda a, i, t: topi.topk(i[0], a.k, a.axis, a.ret_type, a.is_ascend, a.dtype),
    "scatter_elements": lambda a, i, t: [topi.scatter_elements(i[0], i[1], i[2], a.axis,
                                                               a.reduction)],
    "scatter_nd": lambda a, i, t: [topi.scatter_nd(i[0], i[1], i[2], a.mode)],
    "image.resize1d": lambda a, i, t: [topi.image.resize1d(
        i[0], _opt(a.roi), out_shape(t)[a.layout.index("W"):][:1], a.layout, a.method,
        a.coordinate_transformation_mode, a.rounding_method, a.cubic_alpha,
        a.cubic_exclude, a.extrapolation_value, _dtype(t))],
    "image.resize2d": lambda a, i, t: [topi.image.resize2d(
        i[0], _opt(a.roi), [out_shape(t)[a.layout.index("H")], out_shape(t)[a.layout.index(
            "W")]], a.layout, a.method, a.coordinate_transformation_mode, a.rounding_method,
        a.cubic_alpha, a.cubic_exclude, a.extrapolation_value, _dtype(t))],
})


def _arange(inputs: list, shape: list, dtype: str) -> Any:
    start, step = inputs[0], inputs[2]
    from kiln import te

    return te.compute(shape, lambda i: _op.cast(start(), dtype) + _op.cast(i, dtype) *
                      _op.cast(step(), dtype), name="T_arange", tag=topi.tag.INJECTIVE)



# ---- run-time extents: dyn.* ops, argwhere, and shape ops called with Any dims ---------------
# Their computes size the output from ``out_type`` (the VM passes shape variables for Any
# dims, bound from the buffers it allocates from each op's shape function).


def _slice_with_attrs(a, i, t):
    spec = dynamic.attr_slice_spec(list(i[0].shape), list(a.begin), _opt(a.end), _opt(a.strides),
                                   _opt(a.axes), a.slice_mode)
    return [dynamic.strided_slice(i[0], *spec, out_shape(t))]


def _slice_with_tensors(a, i, t):
    ndim = len(i[0].shape)
    spec = [dynamic.tensor_values(bound, ndim) for bound in i[1:4]]
    return [dynamic.strided_slice(i[0], *spec, out_shape(t))]


def _topk_field(a: Any, t: Any) -> Any:
    return out_shape(t, 0) if a.ret_type == "both" else out_shape(t)


def _spatial(t: Any, layout: str) -> list[Any]:
    shape = out_shape(t)
    return [shape[layout.index("H")], shape[layout.index("W")]]


def _dyn_resize2d(a, i, t):
    roi = dynamic.tensor_values(i[2], 4, "float32")
    return [topi.image.resize2d(i[0], roi, _spatial(t, a.layout), a.layout, a.method,
                                a.coordinate_transformation_mode, a.rounding_method,
                                a.cubic_alpha, a.cubic_exclude, a.extrapolation_value,
                                _dtype(t))]


def _reshape_to_out_type(a, i, t):
    return [dynamic.reshape(i[0], out_shape(t))]


for _name, _symbolic in (
        ("nn.batch_flatten", _reshape_to_out_type),
        ("concatenate", lambda a, i, t: [dynamic.concatenate(list(i), a.axis, out_shape(t))]),
        ("strided_slice", _slice_with_attrs),
        ("split", lambda a, i, t: dynamic.split(
            i[0], [out_shape(t, k) for k in range(len(t.fields))], a.axis))):
    COMPUTES[_name] = static_or_symbolic(COMPUTES[_name], _symbolic)

COMPUTES.update({
    "dyn.reshape": _reshape_to_out_type,
    # adding or dropping extent-1 axes keeps the row-major order
    "dyn.expand_dims": _reshape_to_out_type,
    "dyn.squeeze": _reshape_to_out_type,
    "dyn.broadcast_to": lambda a, i, t: [dynamic.broadcast_to(i[0], out_shape(t))],
    "dyn.zeros": lambda a, i, t: [dynamic.full(out_shape(t), _dtype(t), 0)],
    "dyn.ones": lambda a, i, t: [dynamic.full(out_shape(t), _dtype(t), 1)],
    "dyn.full": lambda a, i, t: [dynamic.full(out_shape(t), _dtype(t), i[0])],
    "dyn.tile": lambda a, i, t: [dynamic.tile(i[0], out_shape(t))],
    "dyn.one_hot": lambda a, i, t: [dynamic.one_hot(i[0], i[1], i[2], out_shape(t),
                                                    int(a.axis), _dtype(t))],
    "dyn.nn.pad": lambda a, i, t: [dynamic.pad(i[0], i[1], i[2], out_shape(t), a.pad_mode)],
    "dyn.strided_slice": _slice_with_tensors,
    "dyn.topk": lambda a, i, t: dynamic.topk(i[0], _topk_field(a, t), a.axis, a.ret_type,
                                             a.is_ascend, a.dtype),
    "dyn.image.resize2d": _dyn_resize2d,
    "dyn.nn.upsampling": lambda a, i, t: [nn.upsampling(
        i[0], None, None, a.layout, a.method, a.align_corners, out_size=_spatial(t, a.layout))],
    "argwhere": lambda a, i, t: [dynamic.argwhere(i[0], out_shape(t), _dtype(t))],
})

# Schedule kinds of the ops still in COMPUTES: "injective" ops fuse and use the injective
# schedule; "reduce" the reduction schedule; everything else the generic default (producers
# inlined, root stages serial). Ops in family modules register their schedule themselves.
_REDUCE = {"collapse_sum_like", "collapse_sum_to"}
_OPAQUE = {"nn.softmax", "nn.fast_softmax", "nn.log_softmax",
           "nn.layer_norm", "nn.instance_norm", "nn.group_norm", "nn.l2_normalize", "nn.lrn",
           "nn.batch_norm", "cumsum", "cumprod", "nn.dropout", "argsort",
           "sort", "topk", "dyn.topk", "argwhere", "scatter_elements", "scatter_nd"}


def _table_kind(op_name: str) -> str:
    if op_name in _REDUCE:
        return "reduce"
    if op_name in _OPAQUE:
        return "opaque"
    return "injective"


def schedule_kind(op_name: str) -> str:
    """``"injective"``, ``"reduce"`` or ``"opaque"``: how ``op_name``'s groups are scheduled."""
    from kiln.ir.op import Op

    kind = SCHEDULE_KINDS.get(Op.get(op_name).get_attr("FTVMSchedule"))
    return kind if kind is not None else _table_kind(op_name)


@register_target_schedule("injective", "generic")
def _generic_injective(outs):
    return topi.generic.schedule_injective(outs)


@register_target_schedule("reduce", "generic")
def _generic_reduce(outs):
    return topi.generic.schedule_reduce(outs)


@register_target_schedule("opaque", "generic")
def _generic_opaque(outs):
    return topi.generic.default_schedule(outs)


SCHEDULES = {kind: schedule for schedule, kind in SCHEDULE_KINDS.items()}


def wrap_strategy(compute: Callable, schedule: Callable, name: str,
                  config: dict | None = None, op_name: str | None = None) -> Callable:
    """A strategy function with one (registered) implementation."""
    impl = register_implementation(compute, schedule, name, config=config, op_name=op_name)

    def fstrategy(attrs, inputs, out_type, target):
        strategy = OpStrategy()
        strategy.add(impl)
        return strategy

    return fstrategy


def _register_all() -> None:
    """Generic strategies for every op with a compute and a schedule.

    Ops still listed in :data:`COMPUTES` get their ``FTVMCompute`` and ``FTVMSchedule`` from
    it first; :data:`COMPUTES` then lists the compute of every op, wherever it is defined, so
    target strategies can reuse an op's generic compute by name.
    """
    from kiln.ir.op import Op

    for op_name, compute in COMPUTES.items():
        op = Op.get(op_name)
        # an op whose family module registers its compute must not be listed here too: the
        # registry refuses a second FTVMCompute at the same level, naming the op
        op.set_attr("FTVMCompute", compute)
        if op.get_attr("FTVMSchedule") is None:
            op.set_attr("FTVMSchedule", SCHEDULES[_table_kind(op_name)])
    for op_name in Op.list_op_names():
        register_generic_strategy(op_name)
        compute = Op.get(op_name).get_attr("FTVMCompute")
        if compute is not None:
            COMPUTES.setdefault(op_name, compute)


_register_all()
