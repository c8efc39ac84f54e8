"""kiln.te: tensor expressions and schedules (TVM's ``tvm.te``).

Build tensors with :func:`placeholder` and :func:`compute` (reductions with
:func:`reduce_axis` and :data:`sum` / :data:`max` / :data:`min` / :func:`comm_reducer`),
schedule them with :func:`create_schedule`, and lower with :func:`kiln.lower`. Math
intrinsics (``te.exp`` ...) are re-exported from :mod:`kiln.tir.op`.
"""

from __future__ import annotations

from kiln._lazy import attach

_OPERATION = ("placeholder compute reduce_axis thread_axis var size_var extern scan sum max min "
              "comm_reducer")
_TIR_OP = ("const if_then_else exp exp2 exp10 log log2 log10 log1p expm1 tanh sigmoid erf sqrt "
           "rsqrt floor ceil round trunc nearbyint fabs abs sin cos tan asin acos atan sinh "
           "cosh asinh acosh atanh popcount clz power pow atan2 fmod hypot copysign isnan isinf "
           "isfinite min_value max_value floordiv floormod indexdiv indexmod truncdiv truncmod "
           "all any call_extern call_packed call_intrin call_pure_extern div")

_LAZY: dict = {
    "Tensor": ("kiln.te.tensor", "Tensor"),
    "Operation": ("kiln.te.tensor", "Operation"),
    "PlaceholderOp": ("kiln.te.tensor", "PlaceholderOp"),
    "ComputeOp": ("kiln.te.tensor", "ComputeOp"),
    "ExternOp": ("kiln.te.tensor", "ExternOp"),
    "ScanOp": ("kiln.te.tensor", "ScanOp"),
    "Schedule": ("kiln.te.schedule", "Schedule"),
    "Stage": ("kiln.te.schedule", "Stage"),
    "create_schedule": ("kiln.te.schedule", "create_schedule"),
    "TensorIntrin": ("kiln.te.tensor_intrin", "TensorIntrin"),
    "decl_tensor_intrin": ("kiln.te.tensor_intrin", "decl_tensor_intrin"),
    "lower": ("kiln.te.lowering", "lower"),
    "schedule": "kiln.te.schedule",
    "tensor": "kiln.te.tensor",
    "lowering": "kiln.te.lowering",
}
for _module, _names in (("kiln.te.operation", _OPERATION), ("kiln.tir.op", _TIR_OP)):
    _LAZY.update({name: (_module, name) for name in _names.split()})

__getattr__, __dir__ = attach(__name__, _LAZY)
