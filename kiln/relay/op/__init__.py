"""``relay.op``: the Relay operator library and its registry.

Entry points: every op constructor under TVM's name (``relay.op.add``, ``relay.op.reshape``,
``relay.op.sum``, ``relay.op.topk`` …, and ``relay.nn.*``, ``relay.image.*``), the registry
(:func:`get`, :func:`register_op_attr`, :class:`OpPattern`, ``register_compute`` …) and the
attrs nodes (:mod:`.op_attrs`).

Importing this package registers every operator. ``kiln.relay`` resolves names it does not
define itself here, so ``relay.add`` and ``relay.nn.conv2d`` work as in TVM.

Example
-------
>>> from kiln.relay import op
>>> op.get("nn.conv2d").get_attr("TOpPattern") == op.OpPattern.OUT_ELEMWISE_FUSABLE
True
"""

from __future__ import annotations

from kiln.relay.op import annotation, dyn, image, nn, op_attrs
from kiln.relay.op.algorithm import *  # noqa: F403
from kiln.relay.op.algorithm import __all__ as _algorithm_all
from kiln.relay.op.annotation import (
    alloc_storage,
    alloc_tensor,
    call_lowered,
    debug,
    device_copy,
    invoke_tvm_op,
    kill,
    on_device,
    reshape_tensor,
    stop_fusion,
)
from kiln.relay.op.fixed_point import *  # noqa: F403
from kiln.relay.op.fixed_point import __all__ as _fixed_point_all
from kiln.relay.op.op import (
    Op,
    OpPattern,
    StrategyFunction,
    define_op,
    get,
    list_op_names,
    register,
    register_alter_op_layout,
    register_arg_types,
    register_broadcast_schedule,
    register_compute,
    register_convert_op_layout,
    register_fold_scale_axis,
    register_gradient,
    register_infer_correct_layout,
    register_injective_schedule,
    register_legalize,
    register_mac_count,
    register_op_attr,
    register_opaque_schedule,
    register_pattern,
    register_reduce_schedule,
    register_reference,
    register_scale_axis_role,
    register_schedule,
    register_shape_func,
    register_shape_requirement,
    register_stateful,
    register_strategy,
    register_type_rel,
)
from kiln.relay.op.reduce import *  # noqa: F403
from kiln.relay.op.reduce import __all__ as _reduce_all
from kiln.relay.op.tensor import *  # noqa: F403
from kiln.relay.op.tensor import __all__ as _tensor_all
from kiln.relay.op.transform import *  # noqa: F403
from kiln.relay.op.transform import __all__ as _transform_all

# TVM's relay.op.memory / relay.op.vm namespaces.
memory = annotation.annotation
vm = annotation.annotation

__all__ = [
    *_tensor_all, *_transform_all, *_reduce_all, *_algorithm_all, *_fixed_point_all,
    "nn", "image", "dyn", "annotation", "op_attrs", "memory", "vm",
    "Op", "OpPattern", "get", "list_op_names", "register", "define_op", "register_op_attr",
    "register_pattern", "register_type_rel", "register_compute", "register_strategy",
    "register_shape_func", "register_gradient", "register_stateful",
    "register_injective_schedule", "register_broadcast_schedule", "register_reduce_schedule",
    "register_schedule", "register_alter_op_layout", "register_convert_op_layout",
    "register_infer_correct_layout",
    "register_legalize", "register_opaque_schedule", "register_reference",
    "register_mac_count", "register_fold_scale_axis", "register_scale_axis_role",
    "register_shape_requirement", "register_arg_types", "StrategyFunction", "on_device",
    "stop_fusion", "device_copy",
    "alloc_storage", "alloc_tensor", "kill", "invoke_tvm_op", "reshape_tensor",
    "call_lowered", "debug",
]
