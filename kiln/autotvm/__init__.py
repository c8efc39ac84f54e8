"""AutoTVM (TVM's ``tvm.autotvm``): search-based tuning of kiln's schedule templates.

Entry points: ``autotvm.template``, ``autotvm.task.create`` / ``extract_from_program``,
``autotvm.register_topi_compute`` / ``register_topi_schedule``, ``autotvm.get_config``,
``autotvm.measure_option`` with ``LocalBuilder``, ``LocalRunner``, ``RPCRunner``,
``RayBuilder``, ``RayRunner``; the tuners in ``autotvm.tuner``; ``autotvm.callback``;
``autotvm.record``; ``autotvm.apply_history_best(log)`` (honoured by ``relay.build`` and
``relay.vm.compile``); the graph tuner ``autotvm.graph_tuner`` (``DPTuner``, ``PBQPTuner``)
and ``autotvm.apply_graph_best``. See ``docs/autotvm.md``.

Importing this package registers kiln's x86 templates (``dense_pack.x86``,
``conv2d_nchw.x86``, ``depthwise_conv2d_nchw.x86``, ``batch_matmul_pack.x86``,
``matmul_pack.x86``) and Cortex-M templates (``conv2d_direct.arm_cpu`` and the
micro-kernels, :mod:`.topi_arm_cpu`; measured on QEMU through ``kiln.micro``'s
``autotvm_build_func`` and ``AutoTvmModuleLoader``) and lets Relay ask the current dispatch
context for tuned configs; untuned, builds are unchanged.
"""

from __future__ import annotations

# topi_arm_cpu and topi_x86_winograd extend topi_x86's tables (KNOBS, RELAY_TASKS)
from kiln.autotvm import (  # noqa: F401
    env,
    measure,
    record,
    task,
    tophub,
    topi_arm_cpu,
    topi_x86,
    topi_x86_winograd,
)
from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.measure import (
    LocalBuilder,
    LocalRunner,
    MeasureErrorNo,
    MeasureInput,
    MeasureResult,
    RPCRunner,
    create_measure_batch,
    measure_option,
)
from kiln.autotvm.task import (
    ApplyConfig,
    ApplyFixedConfig,
    ApplyGraphBest,
    ApplyHistoryBest,
    DispatchContext,
    FallbackContext,
    apply_graph_best,
    apply_history_best,
    get_config,
    register_topi_compute,
    register_topi_schedule,
    template,
)

__all__ = ["env", "measure", "record", "task", "tophub", "tuner", "callback", "GLOBAL_SCOPE",
           "LocalBuilder", "LocalRunner", "RPCRunner", "RayBuilder", "RayRunner",
           "MeasureErrorNo", "MeasureInput", "MeasureResult", "create_measure_batch",
           "measure_option", "ApplyConfig", "ApplyFixedConfig", "ApplyHistoryBest",
           "ApplyGraphBest", "DispatchContext", "FallbackContext", "apply_history_best",
           "apply_graph_best", "graph_tuner", "get_config",
           "register_topi_compute", "register_topi_schedule", "template"]


def __getattr__(name: str):
    # tuners need numpy only; xgboost, tqdm and ray load when a tuner/callback/Ray runner
    # that needs them is used
    import importlib

    if name == "graph_tuner":
        module = importlib.import_module("kiln.autotvm.graph_tuner")
        globals()[name] = module
        return module
    if name in ("tuner", "callback"):
        suffix = ".callback" if name == "callback" else ""
        module = importlib.import_module("kiln.autotvm.tuner" + suffix)
        globals()[name] = module
        return module
    if name in ("RayBuilder", "RayRunner"):
        return getattr(measure, name)
    raise AttributeError(f"module 'kiln.autotvm' has no attribute {name!r}")
