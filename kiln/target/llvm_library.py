"""The ``llvm`` target's build: kernels compiled by LLVM as they come, linked with C glue.

Entry points: :class:`LLVMKernelBuilder` (``add`` each kernel as it is lowered, ``finish``
with the loaded library), :func:`build_llvm` (``target.build.llvm``: every PrimFunc of a
module at once).

:mod:`.codegen_llvm` prints each kernel's LLVM; :mod:`.llvm_toolchain` optimizes and emits it
on kiln's LLVM thread and caches the object; the packed-ABI wrappers are the C target's,
compiled by the toolchain driver (argument checking is written once) and linked with the
kernels' objects.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from kiln.runtime import config
from kiln.runtime.registry import register_func
from kiln.target import c_abi, codegen_c
from kiln.target.codegen_llvm import CodeGenLLVM
from kiln.target.llvm_toolchain import (
    compile_in_background,
    host_target_machine,
    initialized_llvm,
    link_ir,
    llvm_thread_seconds,
)
from kiln.tir.transform.codegen_prep import prepare_for_codegen

__all__ = ["LLVMKernelBuilder", "build_llvm"]


class LLVMKernelBuilder:
    """The ``llvm`` target's library, built kernel by kernel as the kernels are lowered.

    Each PrimFunc :meth:`add`-ed becomes its own LLVM module (and object file, cached on its
    own), optimized and emitted on kiln's LLVM thread while the caller lowers the next kernel:
    Python's lowering and LLVM's optimization, the two halves of a cold build, run on two
    cores. :meth:`finish` compiles the C glue of the packed wrappers and links everything
    into one loaded shared library. Code for another machine (``-mtriple``) stays one module
    and one object, which ``save("k.o")`` writes as it is.

    Example
    -------
    >>> from kiln import tir
    >>> from kiln.target import Target
    >>> A = tir.decl_buffer((4,), "float32", name="A")
    >>> builder = LLVMKernelBuilder(Target("llvm"))
    >>> builder.add("one", tir.PrimFunc([A], tir.BufferStore(A, tir.const(1.0, "float32"), [0])))
    >>> builder.finish().function_names
    ['one']
    """

    def __init__(self, target: Any) -> None:
        llvm = initialized_llvm()[1]
        self.target = target
        self.tm = host_target_machine(target)
        self.triple, self.data_layout = self.tm.triple, str(self.tm.target_data)
        same = _same_machine(self.triple, llvm.get_process_triple())
        self.foreign = None if same else self.triple
        # a cross build stays one module: its object is what save("k.o") writes
        self.whole = CodeGenLLVM() if self.foreign else None
        self.signatures: list[tuple[str, c_abi.FunctionSignature, list[str]]] = []
        self.packed_names: list[str] = []
        self.imported_c: list[str] = []
        self.externs: dict[str, tuple[str, list[str]]] = {}
        self.uses_module_ctx = False
        self.objects: dict[str, Any] = {}  # object file name -> (object, optimized IR) when done
        self.llvm_seconds_at_start = llvm_thread_seconds()

    def add(self, symbol: str, func: Any) -> None:
        """Generate ``symbol``'s LLVM and start compiling it."""
        cg = self.whole or CodeGenLLVM(symbol)
        cg.add_function(prepare_for_codegen(func), symbol)
        if self.whole is None:
            self._start(cg, f"{symbol}.o")

    def _start(self, cg: CodeGenLLVM, object_name: str) -> None:
        cg.module.triple, cg.module.data_layout = self.triple, self.data_layout
        self.signatures += cg.signatures
        self.packed_names += cg.packed_names
        self.imported_c += [c for c in cg.imported_c if c not in self.imported_c]
        self.externs.update(cg.externs)
        self.uses_module_ctx |= cg.uses_module_ctx
        self.objects[object_name] = compile_in_background(str(cg.module), self.tm, self.target)

    def finish(self) -> Any:
        """The loaded library of every kernel added (a NativeModule)."""
        from kiln.runtime import cc
        from kiln.target.build import NativeModule

        if self.whole is not None or not self.objects:  # one module (an empty one too)
            self._start(self.whole or CodeGenLLVM(), "kernels.o")
        system_lib = bool(getattr(self.target, "attrs", {}).get("system-lib", False))
        glue = c_abi.packed_glue(self.signatures, self.imported_c, "llvm", system_lib,
                                 packed_names=self.packed_names,
                                 module_ctx=self.uses_module_ctx)
        glue += "".join(_extern_trampoline(name, *types) for name, types in self.externs.items())
        options = codegen_c.compile_options(self.target)
        if not self.imported_c:
            # The glue only checks arguments and calls the kernels: -O1 compiles it in under
            # half the time of -O3 (ResNet-18: 4.0 s vs 9.5 s on a loaded machine).
            options = ["-O1" if flag == "-O3" else flag for flag in options]
        # gcc compiles the glue while LLVM finishes the kernels (a cross build keeps the glue
        # as source for its cross compiler)
        glue_object = None if self.foreign else cc.compile_in_background(glue, options)
        objects = {name: result() for name, result in self.objects.items()}
        # the LLVM thread links the kernels' IR into one module for get_source while gcc
        # links the library
        linked = link_ir([ir_text for _, ir_text in objects.values()])
        names = [name for name, _, _ in self.signatures] + self.packed_names
        files = {name: obj for name, (obj, _) in objects.items()}
        if glue_object is None:
            sources = {"glue.c": glue}
        else:
            sources, files["glue.o"] = {}, glue_object()
        text: dict[str, Any] = {"c": glue}
        module = NativeModule("llvm", sources, files, names, options, text,
                              foreign_triple=self.foreign)
        ir_text = linked()
        # LLVM's CPU seconds for this library, spent on its thread while kernels lowered
        module.llvm_seconds = llvm_thread_seconds() - self.llvm_seconds_at_start
        tm, llvm = self.tm, initialized_llvm()[1]
        module.text.update({"ll": ir_text, "": ir_text,
                            "asm": lambda: tm.emit_assembly(llvm.parse_assembly(ir_text))})
        if config.debug_level() >= 4:  # the library printed its C glue; the kernels' LLVM
            print(f"[kiln codegen] generated ll:\n{ir_text}", file=sys.stderr)
        return module


@register_func("target.build.llvm", override=True)
def build_llvm(mod: Any, target: Any = None) -> Any:
    """``target.build.llvm``: LLVM objects + C packed wrappers -> one loaded shared library."""
    builder = LLVMKernelBuilder(target)
    for symbol, func in c_abi.primfuncs_of(mod):
        builder.add(symbol, func)
    return builder.finish()


def _same_machine(triple: str, host: str) -> bool:
    """Whether code for ``triple`` runs here (same architecture and OS as the host)."""
    arch, _, rest = triple.partition("-")
    host_arch, _, host_rest = host.partition("-")
    return arch == host_arch and ("linux" in rest) == ("linux" in host_rest)


def _extern_trampoline(name: str, c_ret: str, c_args: Sequence[str]) -> str:
    """An exported C function forwarding to ``name`` (which may be static in import_c)."""
    params = ", ".join(f"{t} a{i}" for i, t in enumerate(c_args)) or "void"
    call = f"{name}({', '.join(f'a{i}' for i in range(len(c_args)))})"
    body = f"{call};" if c_ret == "void" else f"return {call};"
    return f"\n{c_ret} __kiln_extern_{name}({params}) {{ {body} }}\n"
