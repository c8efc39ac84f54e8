"""kiln.contrib: TVM's ``tvm.contrib`` paths (toolchain driver, executor front-ends).

Submodules load on first use: ``cc`` (the C toolchain driver), ``graph_executor``,
``debugger``, ``utils`` (temporary directories).
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "cc": "kiln.contrib.cc",
    "graph_executor": "kiln.contrib.graph_executor",
    "debugger": "kiln.contrib.debugger",
    "utils": "kiln.contrib.utils",
    "cuda_graph": "kiln.contrib.cuda_graph",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
