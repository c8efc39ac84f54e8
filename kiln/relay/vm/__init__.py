"""The Relay VM compiler and executor (TVM's ``tvm.relay.vm`` / ``relay.backend.vm``).

Entry points: :func:`compile`, :class:`VMCompiler`, :class:`VMExecutor`; :class:`Executable`
and :class:`VirtualMachine` are re-exported from :mod:`kiln.runtime.vm`.

Modules: ``compiler`` (bytecode emission after the one compile pipeline,
:mod:`kiln.relay.backend.pipeline`), ``memory_alloc`` (ManifestAlloc: the per-function arena
and per-tensor storage), ``shape_func`` (the
bytecode calling a shape-function kernel; the kernels are lowered by the TE compiler),
``executor`` (``create_executor("vm")``). The liveness pass is
:func:`kiln.relay.transform.ManifestLifetimes`.

Example
-------
>>> import numpy as np, kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(2,))
>>> exe = relay.vm.compile(kiln.IRModule.from_expr(relay.Function([x], x * x)), "c")
>>> VirtualMachine(exe, kiln.cpu(0)).run(np.array([1, 2], "float32")).numpy()
array([1., 4.], dtype=float32)
"""

from __future__ import annotations

from kiln.relay.vm.compiler import VMCompiler, compile
from kiln.relay.vm.executor import VMExecutor
from kiln.runtime.vm import Executable, VirtualMachine

__all__ = ["compile", "VMCompiler", "VMExecutor", "Executable", "VirtualMachine"]
