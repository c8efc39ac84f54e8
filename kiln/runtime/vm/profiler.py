"""VM profiler: where a run's time goes, per instruction kind and per kernel.

Entry points: :class:`VirtualMachineProfiler` (``profile``), also reachable as
``VirtualMachine.profile``.

The profiler is a :class:`VirtualMachine` whose prepared instructions are wrapped in a timer
(the ``_wrap`` hook), so the plain VM pays nothing for it. It does not fuse segments (see
:mod:`kiln.runtime.vm.vm`): every instruction and kernel is timed on its own.
``profile()`` runs the function once and returns a :class:`~kiln.runtime.profiling.Report`
with one row per instruction kind (``Op`` = ``"instruction"``) and one per kernel (``Op`` =
``"InvokePacked"``; the InvokePacked time is split by kernel), plus a ``(dispatch)`` row for
the loop's own overhead, so the percentages add up to 100. Columns: count, total µs, percent
of the run.

Example
-------
>>> import kiln
>>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
>>> from kiln.runtime.vm.executable import Executable, VMFunction
>>> exe = Executable([VMFunction("main", [], [LoadConsti(1, 0), Ret(0)], 1)])
>>> report = VirtualMachineProfiler(exe, kiln.cpu(0)).profile()
>>> sorted(row["Name"] for row in report.calls)
['(dispatch)', 'LoadConsti', 'Ret']
"""

from __future__ import annotations

import time
from typing import Any

from kiln.runtime.profiling import Report
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.vm import VirtualMachine

__all__ = ["VirtualMachineProfiler"]


class VirtualMachineProfiler(VirtualMachine):
    """A VirtualMachine that times every instruction; see :meth:`profile`."""

    # Kernels run one by one (no fused segments), so each gets its own time.
    _fuse_segments = False

    def __init__(self, exe: Any, device: Any = None, memory_cfg: Any = None) -> None:
        # (kind, name) -> [count, seconds]; filled by the wrapped handlers.
        self._timings: dict[tuple[str, str], list] = {}
        super().__init__(exe, device, memory_cfg)

    def _wrap(self, handler: Any, operand: Any, instr: bc.Instruction) -> tuple[Any, Any]:
        if isinstance(instr, bc.InvokePacked):
            key = ("InvokePacked", self.exe.primitive_names[instr.packed_index])
        else:
            key = ("instruction", instr.opcode.name)
        timings = self._timings
        clock = time.perf_counter

        def timed(regs: list, op: Any, pc: int) -> int:
            start = clock()
            try:
                return handler(regs, op, pc)
            finally:
                elapsed = clock() - start
                entry = timings.get(key)
                if entry is None:
                    timings[key] = [1, elapsed]
                else:
                    entry[0] += 1
                    entry[1] += elapsed

        return timed, operand

    def profile(self, *args: Any, func_name: str = "main", collectors: Any = None,
                **kwargs: Any) -> Report:
        """Run ``func_name`` once on ``args`` and report its time by instruction and kernel.

        ``collectors`` is accepted for TVM compatibility; kiln measures wall time only.
        """
        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)
        self._timings.clear()
        start = time.perf_counter()
        self.invoke_stateful(func_name)
        total_us = (time.perf_counter() - start) * 1e6
        device = str(self.host_device)
        rows = []
        for (kind, name), (count, seconds) in self._timings.items():
            rows.append(_row(name, kind, count, seconds * 1e6, total_us, device))
        measured = sum(r["Duration (us)"] for r in rows)
        rows.append(_row("(dispatch)", "overhead", 1, max(total_us - measured, 0.0), total_us,
                         device))
        return Report(
            rows,
            {device: {"Duration (us)": total_us}},
            {"Executor": "VM", "Function": func_name},
        )


def _row(name: str, kind: str, count: int, micros: float, total_us: float,
         device: str) -> dict[str, Any]:
    return {
        "Name": name,
        "Op": kind,
        "Duration (us)": micros,
        "Percent": 100.0 * micros / total_us if total_us > 0 else 0.0,
        "Count": count,
        "Device": device,
        "Output Shapes": "",
    }
