"""The Executable as a runtime Module (type key ``VMExecutable``), so it exports and loads.

Entry points: :class:`VMExecutableModule`, the global loader
``runtime.module.loadbinary_VMExecutable``.

``save_to_binary()`` writes ``string(code)`` where ``code`` is :meth:`Executable.save`'s bytes.
The kernel library is the module's single import: ``exe.mod.export_library("x.so")`` links
the kernels into ``x.so`` and stores the bytecode in its module blob, and
``kiln.runtime.load_module("x.so")`` gives back a VMExecutable module whose import is the
loaded library — ready for ``VirtualMachine(mod, dev)``.

Example
-------
>>> from kiln.runtime.vm.bytecode import LoadConsti, Ret
>>> from kiln.runtime.vm.executable import Executable, VMFunction
>>> exe = Executable([VMFunction("main", [], [LoadConsti(1, 0), Ret(0)], 1)])
>>> mod = exe.mod
>>> mod.type_key, load_vm_executable(mod.save_to_binary()).executable.globals
('VMExecutable', ['main'])
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module, ModuleProperty
from kiln.runtime.registry import register_func
from kiln.runtime.vm.executable import Executable

__all__ = ["VMExecutableModule", "load_vm_executable"]


class VMExecutableModule(Module):
    """Module view of an :class:`Executable`; its one import is the kernel library."""

    type_key = "VMExecutable"
    _property_mask = ModuleProperty.BINARY_SERIALIZABLE | ModuleProperty.RUNNABLE

    def __init__(self, executable: Executable) -> None:
        super().__init__()
        self.executable = executable
        if executable.lib is not None:
            super().import_module(executable.lib)

    def import_module(self, module: Module) -> None:
        """Attach the kernel library (an executable has exactly one import)."""
        if self.imports:
            raise TVMError("a VMExecutable module has exactly one import: its kernel library")
        super().import_module(module)
        self.executable.lib = module

    def save_to_binary(self) -> bytes:
        code, _ = self.executable.save()
        writer = BinaryWriter()
        writer.string(code)
        return writer.getvalue()

    def _get_function(self, name: str) -> Any:
        exe = self.executable
        table = {
            "get_lib": lambda: exe.lib,
            "get_bytecode": lambda: exe.bytecode,
            "get_stats": lambda: exe.stats,
            "save": lambda: exe.save()[0],
            "get_num_globals": lambda: len(exe.functions),
            "get_global_fields": lambda i: exe.globals[i],
            "get_function_arity": exe.get_function_arity,
            "get_function_param_name": exe.get_function_param_name,
            "move_late_bound_consts": exe.move_late_bound_consts,
            "load_late_bound_consts": exe.load_late_bound_consts,
        }
        return table.get(name)


def load_vm_executable(data: bytes) -> VMExecutableModule:
    """``runtime.module.loadbinary_VMExecutable``: rebuild the module from save_to_binary bytes."""
    reader = BinaryReader(bytes(data), what="VMExecutable module")
    code = reader.string_bytes("VM executable code")
    reader.expect_end()
    return VMExecutableModule(Executable.load_exec(code))


register_func("runtime.module.loadbinary_VMExecutable", load_vm_executable, override=True)
