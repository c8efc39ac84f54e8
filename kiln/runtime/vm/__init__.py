"""The Relay virtual machine runtime (TVM's ``tvm.runtime.vm``).

Entry points: :class:`VirtualMachine`, :class:`Executable`, :class:`VMFunction`,
:class:`VirtualMachineProfiler`, :class:`VMClosure`, the instruction set in
:mod:`kiln.runtime.vm.bytecode`, allocators in :mod:`kiln.runtime.vm.memory`.

Importing this package registers ``runtime.module.loadbinary_VMExecutable``.
"""

from __future__ import annotations

from kiln.runtime.vm import bytecode
from kiln.runtime.vm.bytecode import Opcode
from kiln.runtime.vm.executable import Executable, VMFunction
from kiln.runtime.vm.memory import NaiveAllocator, PooledAllocator, Storage
from kiln.runtime.vm.module import VMExecutableModule
from kiln.runtime.vm.profiler import VirtualMachineProfiler
from kiln.runtime.vm.values import VMClosure
from kiln.runtime.vm.vm import VirtualMachine

__all__ = [
    "bytecode",
    "Opcode",
    "Executable",
    "VMFunction",
    "VirtualMachine",
    "VirtualMachineProfiler",
    "VMClosure",
    "VMExecutableModule",
    "Storage",
    "NaiveAllocator",
    "PooledAllocator",
]
