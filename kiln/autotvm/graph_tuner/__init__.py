"""The graph tuner (TVM's ``tvm.autotvm.graph_tuner``): per-operator tuning records
combined into a network-wide choice that also counts the layout transforms between them.

Entry points: :class:`DPTuner` (exact), :class:`PBQPTuner` (any graph),
:class:`BaseGraphTuner`, :func:`register_infer_layout`; apply the written records with
``autotvm.apply_graph_best``.

Example
-------
>>> tuner = DPTuner(mod["main"], {"data": (1, 3, 32, 32)}, "conv.log",
...                 [relay.op.get("nn.conv2d")], "llvm")                    # doctest: +SKIP
>>> tuner.benchmark_layout_transform(min_exec_num=100)                      # doctest: +SKIP
>>> tuner.run()                                                             # doctest: +SKIP
>>> tuner.write_opt_sch2record_file("graph_opt.log")                        # doctest: +SKIP
"""

from __future__ import annotations

from kiln.autotvm.graph_tuner.base_graph_tuner import (
    INFER_LAYOUT,
    BaseGraphTuner,
    layout_shape,
    register_infer_layout,
)
from kiln.autotvm.graph_tuner.dynamic_programming_tuner import DPTuner, min_sum
from kiln.autotvm.graph_tuner.pbqp_tuner import PBQPTuner, pbqp

__all__ = ["BaseGraphTuner", "DPTuner", "PBQPTuner", "INFER_LAYOUT", "register_infer_layout",
           "layout_shape", "min_sum", "pbqp"]
