"""CUDA graph executor entry points (``tvm.contrib.cuda_graph.cuda_graph_executor``).

kiln generates CPU (and OpenCL) code only, so these behave as in a TVM built without
``USE_GRAPH_EXECUTOR_CUGRAPH``: :func:`create` raises ``ValueError`` saying so, and
:class:`GraphModuleCudaGraph` accepts only a CUDA graph executor module, which kiln never makes.
Code that imports them, or tests guarded by ``tvm.testing.requires_cudagraph``, still load.
"""

from __future__ import annotations

from typing import Any

from kiln.contrib.graph_executor import GraphModule
from kiln.runtime.error import TVMError

__all__ = ["create", "GraphModuleCudaGraph"]

_UNSUPPORTED = ("CUDA graph support is not available: kiln has no CUDA backend (TVM needs "
                "'(USE_GRAPH_EXECUTOR_CUGRAPH ON)'); use tvm.contrib.graph_executor instead")


def create(graph_json_str: str, libmod: Any, device: Any) -> GraphModuleCudaGraph:
    """Create a CUDA graph executor; always raises ``ValueError`` on kiln (no CUDA)."""
    if not isinstance(graph_json_str, str):
        raise TypeError(f"graph_json_str must be a JSON string, got {type(graph_json_str)}")
    raise ValueError(_UNSUPPORTED)


class GraphModuleCudaGraph(GraphModule):
    """TVM's CUDA-graph wrapper; kiln has no module it can wrap, so construction fails."""

    def __init__(self, module: Any) -> None:
        raise TVMError(f"GraphModuleCudaGraph needs a CUDA graph executor module, got "
                       f"{type(module).__name__}. {_UNSUPPORTED}")
