"""TVM's ``tvm.runtime.profiler_vm`` path: the VM profiler lives in :mod:`kiln.runtime.vm.profiler`.

Entry points: :class:`VirtualMachineProfiler` (``profile(*args, func_name="main")`` returns a
:class:`~kiln.runtime.profiling.Report`) and :func:`enabled`.
"""

from __future__ import annotations

from kiln.runtime.vm.profiler import VirtualMachineProfiler

__all__ = ["VirtualMachineProfiler", "enabled"]


def enabled() -> bool:
    """Whether the VM profiler is available: always, kiln builds it in (TVM's is optional)."""
    return True
