"""The Relay VM compiler and executor (TVM's ``tvm.relay.vm`` / ``relay.backend.vm``).

Entry points: :func:`compile`, :class:`VMCompiler`, :class:`VMExecutor`; :class:`Executable`
and :class:`VirtualMachine` are re-exported from :mod:`kiln.runtime.vm`.

Modules: ``compiler`` (pipeline + bytecode emission), ``memory_alloc`` (ManifestAlloc: the
per-function arena and per-tensor storage), ``manifest_lifetimes`` (liveness → memory.kill),
``shape_rules`` (per-op ``FShapeFunc`` rules), ``shape_func`` (shape-function kernels for
``Any`` dimensions, dynamic-shape lowering through the ops' strategies), ``executor``
(``create_executor("vm")``).

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
