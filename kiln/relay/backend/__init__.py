"""Relay backends: the reference interpreter, the TE compiler, graph codegen and memory
planning, and the Executor/Runtime descriptions used by ``relay.build``."""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "Executor": ("kiln.relay.backend.executor_config", "Executor"),
    "Runtime": ("kiln.relay.backend.executor_config", "Runtime"),
    "interpreter": "kiln.relay.backend.interpreter",
    "te_compiler": "kiln.relay.backend.te_compiler",
    "graph_executor_codegen": "kiln.relay.backend.graph_executor_codegen",
    "graph_plan_memory": "kiln.relay.backend.graph_plan_memory",
    "vm": "kiln.relay.vm",
    "aot": "kiln.relay.backend.aot",
    "executor_factory": "kiln.relay.backend.executor_factory",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
