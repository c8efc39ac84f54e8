"""What ``relay.build`` returns (TVM's ``relay.backend.executor_factory``).

Entry points: :class:`AOTExecutorFactoryModule`, :class:`GraphExecutorFactoryModule` (defined
in :mod:`kiln.relay.build_module`, re-exported here under TVM's module path).

An ``AOTExecutorFactoryModule`` holds the AOT build: ``lib`` (for the C++ runtime a loaded
library whose ``tvmgen_<mod>___tvm_main__`` runs the model; for the C runtime the C source
modules ``<mod>_lib0.c`` (AOT main, pools, entry point) importing ``<mod>_lib1.c``
(kernels)), the interface header text, the memory plan and build stats. ``lib["default"](dev)``
(C++ runtime) creates a :class:`~kiln.runtime.aot_executor.AotExecutor`; wrap it in
``tvm.runtime.executor.AotModule``.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.build_module import GraphExecutorFactoryModule
from kiln.runtime.error import TVMError

__all__ = ["AOTExecutorFactoryModule", "GraphExecutorFactoryModule", "ExecutorFactoryModule"]


class ExecutorFactoryModule:
    """Common base of the build results (TVM's class of the same name)."""


class AOTExecutorFactoryModule(ExecutorFactoryModule):
    """An AOT build (TVM's ``AOTExecutorFactoryModule``).

    Attributes follow TVM: ``ir_mod``, ``target``, ``runtime``, ``executor``, ``libmod_name``,
    ``lib``, ``params`` (constants not linked into the code), plus kiln's ``plan`` (the call
    list and pools), ``aot`` (the generated source), ``header`` (``tvmgen_<mod>.h`` for
    ``interface-api=c``), ``lowered`` (kernel name -> LoweredFunc) and ``stats``.
    """

    def __init__(self, ir_mod: Any, target: Any, runtime: Any, executor: Any, mod_name: str,
                 lib: Any, params: dict[str, Any], plan: Any, aot: Any, compiler: Any,
                 stats: dict[str, Any]) -> None:
        self.ir_mod = ir_mod
        self.target = target
        self.runtime = runtime
        self.executor = executor
        self.libmod_name = mod_name
        self.lib = lib
        self.params = params
        self.plan = plan
        self.aot = aot
        self.header = aot.header
        self.lowered = {lowered.name: lowered for lowered in compiler.lowered}
        self.stats = stats

    def __getitem__(self, name: str) -> Any:
        if name != self.libmod_name:
            raise TVMError(f"this AOT build is module {self.libmod_name!r}; use "
                           f"lib[{self.libmod_name!r}](dev)")
        if self.runtime.name == "crt":
            raise TVMError("this AOT build is C source for the C runtime (Runtime('crt')); "
                           "export it with tvm.micro.export_model_library_format and build "
                           "it with the CRT, or build with Runtime('cpp') to run it here")
        from kiln.runtime.aot_executor import AotExecutor

        def create(*devices: Any) -> AotExecutor:
            return AotExecutor(self.lib, list(devices), self.params)

        return create

    def get_lib(self) -> Any:
        return self.lib

    def get_params(self) -> dict[str, Any]:
        return dict(self.params)

    def get_executor_config(self) -> None:
        return None  # AOT has no executor config (the graph executor's is its JSON)

    def get_devices(self) -> list[str]:
        return []

    def export_library(self, file_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.lib.export_library(file_name, *args, **kwargs)
