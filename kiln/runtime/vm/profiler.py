"""VM profiler: where a run's time goes, per instruction kind and per kernel.

Entry points: :class:`VirtualMachineProfiler` (``profile``), also reachable as
``VirtualMachine.profile``.

The profiler is a :class:`VirtualMachine` whose prepared instructions are wrapped in a timer
(the ``_wrap`` hook), so the plain VM pays nothing for it. It runs the program as the VM does
— fused segments included (see :mod:`kiln.runtime.vm.segment`) — except that a function is
never invoked *directly*, so its segment is timed like any other: each kernel of a fused
segment is timed in C as the call list runs, and the Python around them (storage, views,
registers) is the ``FusedSegment`` row. A kernel writing device memory (e.g. OpenCL) is timed
up to a sync of that device, and its row names that device.

``profile()`` runs the function once untimed (first-use work: call lists, constant copies)
and once timed, and returns a :class:`~kiln.runtime.profiling.Report`
with one row per instruction kind (``Op`` = ``"instruction"``) and one per kernel (``Op`` =
``"InvokePacked"``; the InvokePacked time is split by kernel), plus a ``(dispatch)`` row for
the loop's own overhead, so the percentages add up to 100. Columns: count, total µs, percent
of the run, device, and the output shapes of the kernel's last call.

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

import ctypes
import time
from typing import Any

from kiln.runtime.container import ADT
from kiln.runtime.device_api import DeviceNDArray
from kiln.runtime.ndarray import NDArray
from kiln.runtime.profiling import Report
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.segment import SegmentError
from kiln.runtime.vm.vm import VirtualMachine

__all__ = ["VirtualMachineProfiler"]


class VirtualMachineProfiler(VirtualMachine):
    """A VirtualMachine that times every instruction and kernel; see :meth:`profile`."""

    def __init__(self, exe: Any, device: Any = None, memory_cfg: Any = None) -> None:
        # (kind, name) -> [count, seconds, device, output shapes]; filled as the program runs.
        self._timings: dict[tuple[str, str], list] = {}
        super().__init__(exe, device, memory_cfg)

    def _direct_form(self, func: Any, code: list) -> None:
        return None  # run every function through its (timed) instructions

    def _plan_cache(self, func: Any) -> None:
        return None  # per-shape plans would skip the timed instructions too

    def _record(self, key: tuple[str, str], seconds: float, device: Any = None,
                shapes: Any = "") -> None:
        entry = self._timings.get(key)
        if entry is None:
            self._timings[key] = [1, seconds, device or self.host_device, shapes]
        else:
            entry[0] += 1
            entry[1] += seconds
            entry[3] = shapes

    def _wrap(self, handler: Any, operand: Any, instr: bc.Instruction) -> tuple[Any, Any]:
        clock = time.perf_counter
        if isinstance(instr, bc.InvokePacked):
            key = ("InvokePacked", self.exe.primitive_names[instr.packed_index])
            outputs = instr.args[len(instr.args) - instr.output_size:]

            def timed_kernel(regs: list, op: Any, pc: int) -> int:
                start = clock()
                try:
                    return handler(regs, op, pc)
                finally:
                    tensors = _tensors([regs[reg] for reg in outputs])
                    devices = {t.device for t in tensors if isinstance(t, DeviceNDArray)}
                    for dev in devices:
                        dev.sync()  # device kernels run asynchronously
                    self._record(key, clock() - start, next(iter(devices), None),
                                 _shapes(t.shape for t in tensors))

            return timed_kernel, operand
        key = ("instruction", instr.opcode.name)

        def timed(regs: list, op: Any, pc: int) -> int:
            start = clock()
            try:
                return handler(regs, op, pc)
            finally:
                self._record(key, clock() - start)

        return timed, operand

    def _op_fused(self, regs: list, operand: tuple[Any, list], pc: int) -> int:
        """A fused segment with each kernel timed in C; its Python is the FusedSegment row."""
        segment = operand[0]
        seconds = (ctypes.c_double * max(len(segment.kernels), 1))()
        start = time.perf_counter()
        try:
            if not segment.run(regs, self.allocators, seconds):
                return self._run_unfused(regs, operand)  # its steps are timed one by one
        except SegmentError as err:
            self._fault_pc = err.pc
            raise
        elapsed = time.perf_counter() - start
        for k, (site, _) in enumerate(segment.kernels):
            self._record(("InvokePacked", site.name), seconds[k],
                         shapes=_shapes(segment.output_shapes(k)))
        self._record(("instruction", "FusedSegment"), max(elapsed - sum(seconds), 0.0))
        return segment.end

    def profile(self, *args: Any, func_name: str = "main", collectors: Any = None,
                **kwargs: Any) -> Report:
        """Run ``func_name`` on ``args`` (once to warm up, once timed) and report the timed
        run's time by instruction and kernel.

        ``collectors`` is accepted for TVM compatibility; kiln measures wall time only.
        """
        if args or kwargs:
            self.set_input(func_name, *args, **kwargs)
        self.invoke_stateful(func_name)  # warm-up: first-use work (call lists, constants)
        self._timings.clear()
        start = time.perf_counter()
        self.invoke_stateful(func_name)
        for dev in set(self.devices):
            dev.sync()
        total_us = (time.perf_counter() - start) * 1e6
        rows = [_row(name, kind, count, seconds * 1e6, total_us, str(device), shapes)
                for (kind, name), (count, seconds, device, shapes) in self._timings.items()]
        measured = sum(r["Duration (us)"] for r in rows)
        rows.append(_row("(dispatch)", "overhead", 1, max(total_us - measured, 0.0), total_us,
                         str(self.host_device)))
        return Report(
            rows,
            {str(self.host_device): {"Duration (us)": total_us}},
            {"Executor": "VM", "Function": func_name},
        )


def _tensors(values: list[Any]) -> list[Any]:
    """The tensors among ``values``, tuples flattened one level (kernel outputs)."""
    flat = []
    for value in values:
        flat.extend(value.fields if isinstance(value, ADT) else [value])
    return [t for t in flat if isinstance(t, NDArray)]


def _shapes(shapes: Any) -> str:
    return str([tuple(shape) for shape in shapes])


def _row(name: str, kind: str, count: int, micros: float, total_us: float,
         device: str, shapes: str = "") -> dict[str, Any]:
    return {
        "Name": name,
        "Op": kind,
        "Duration (us)": micros,
        "Percent": 100.0 * micros / total_us if total_us > 0 else 0.0,
        "Count": count,
        "Device": device,
        "Output Shapes": shapes,
    }
