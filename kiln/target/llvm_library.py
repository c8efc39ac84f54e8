"""The ``llvm`` target's build: kernels compiled by LLVM as they come, then linked with their
packed wrappers and glue into one library.

Entry points: :class:`LLVMKernelBuilder` (``add`` each kernel as it is lowered, ``finish``
with the loaded library), :func:`build_llvm` (``target.build.llvm``: every PrimFunc of a
module at once).

:mod:`.codegen_llvm` prints each kernel's LLVM; :mod:`.llvm_toolchain` optimizes and emits it
on kiln's LLVM thread and caches the object. The packed-ABI wrappers are printed by
:mod:`.llvm_packed` from the description the C target prints too (argument checking is
written once) into the library's glue module (with the entry name, module context,
system-lib registration and ``call_extern`` trampolines), compiled without optimization. A C
compiler runs only for ``pragma_import_c`` sources (in the background, while LLVM works);
the system linker links the objects.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from kiln.runtime import config
from kiln.runtime.error import TVMError
from kiln.runtime.registry import register_func
from kiln.target import c_abi, codegen_c
from kiln.target.codegen_llvm import CodeGenLLVM
from kiln.target.llvm_packed import module_glue_ir
from kiln.target.llvm_toolchain import (
    LinkedIR,
    compile_in_background,
    host_target_machine,
    initialized_llvm,
    llvm_thread_seconds,
)
from kiln.target.packed_checks import describe_wrapper
from kiln.tir.transform.codegen_prep import prepare_for_codegen

__all__ = ["LLVMKernelBuilder", "build_llvm", "C_OBJECT"]

# The object file of a library's C (import_c sources, narrow-type helpers), compiled by gcc
C_OBJECT = "imported_c.o"
# A kernel module whose IR is shorter than this (an elementwise kernel, a small reduction)
# waits to be linked with the next small ones into one module: each module costs LLVM ~2 ms
# of its own (pass pipeline, object emission, cache files, the link), a lot beside such a
# kernel's 5-8 ms. Big kernels still go alone, as they come, to both LLVM threads.
SMALL_MODULE_CHARS = 4000
# Small modules are compiled once their texts add up to this much (or at finish)
SMALL_BATCH_CHARS = 12000


class LLVMKernelBuilder:
    """The ``llvm`` target's library, built kernel by kernel as the kernels are lowered.

    Each PrimFunc :meth:`add`-ed becomes its own LLVM module (and object file, cached on its
    own; small ones are linked a few to a module first, see :data:`SMALL_MODULE_CHARS`),
    optimized and emitted on kiln's LLVM thread while the caller lowers the next kernel:
    Python's lowering and LLVM's optimization, the two halves of a cold build, run on two
    cores. :meth:`finish` adds the glue module (the packed wrappers among it) and
    links everything into one loaded shared library. Code for another machine
    (``-mtriple``) stays one module and one object, which ``save("k.o")`` writes as it is.

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
        from kiln.target import Target

        llvm = initialized_llvm()[1]
        self.target = target
        self.tm = host_target_machine(target)
        self.triple, self.data_layout = self.tm.triple, str(self.tm.target_data)
        same = _same_machine(self.triple, llvm.get_process_triple())
        self.foreign = None if same else self.triple
        # a cross build stays one module: its object is what save("k.o") writes
        self.whole = CodeGenLLVM() if self.foreign else None
        # The glue (every packed wrapper among it) is compiled without optimization: the
        # wrappers' checks gain ~2 ns a call from O3 and cost LLVM 3x the time (a 5-tensor
        # wrapper: 12 ms at O3, 4 ms at O0)
        self.glue_target = target if self.foreign else Target(f"{target} -opt-level=0")
        self.glue_tm = self.tm if self.foreign else host_target_machine(self.glue_target)
        self.signatures: list[tuple[str, c_abi.FunctionSignature, list[str]]] = []
        self.packed_names: list[str] = []
        self.imported_c: list[str] = []
        self.externs: dict[str, tuple[str, list[str], str, dict[int, int]]] = {}
        self.extern_types: dict[str, tuple[Any, list]] = {}
        self.uses_module_ctx = False
        self.wrappers: list[Any] = []  # the packed wrappers' descriptions, printed in the glue
        self.objects: dict[str, Any] = {}  # object file name -> (object, optimized IR) when done
        self.small: list[tuple[str, str]] = []  # (symbol, IR text) of small modules not started
        self.llvm_seconds_at_start = llvm_thread_seconds()

    def add(self, symbol: str, func: Any) -> None:
        """Generate ``symbol``'s LLVM and start compiling it; describe its packed wrapper."""
        cg = self.whole or CodeGenLLVM(symbol)
        cg.module.triple, cg.module.data_layout = self.triple, self.data_layout
        known = len(cg.signatures)
        cg.add_function(prepare_for_codegen(func), symbol)
        self.wrappers += [describe_wrapper(name, signature)
                          for name, signature, _ in cg.signatures[known:]]
        if self.whole is None:
            self._collect(cg)
            self._start(cg, _object_name(symbol))

    def _start(self, cg: CodeGenLLVM, object_name: str) -> None:
        """Start compiling one kernel's module on an LLVM thread (a small one with the next
        small ones, see :data:`SMALL_MODULE_CHARS`)."""
        text = str(cg.module)
        if len(text) >= SMALL_MODULE_CHARS:
            self.objects[object_name] = compile_in_background(text, self.tm, self.target)
            return
        self.small.append((object_name, text))
        if sum(len(t) for _, t in self.small) >= SMALL_BATCH_CHARS:
            self._start_small()

    def _start_small(self) -> None:
        """Start compiling the small modules waiting, linked into one module and object."""
        if len(self.small) == 1:
            name, text = self.small[0]
            self.objects[name] = compile_in_background(text, self.tm, self.target)
        elif self.small:
            texts = tuple(text for _, text in self.small)
            name = _object_name("+".join(name[:-2] for name, _ in self.small))
            self.objects[name] = compile_in_background(texts, self.tm, self.target)
        self.small = []

    def finish(self) -> Any:
        """The loaded library of every kernel added (a NativeModule)."""
        from kiln.runtime import cc
        from kiln.target.build import NativeModule

        glue = self.whole or CodeGenLLVM("glue")
        glue.module.triple, glue.module.data_layout = self.triple, self.data_layout
        if self.whole is not None:  # its kernels' signatures, imports and externs
            self._collect(self.whole)
        names = [name for name, _, _ in self.signatures] + self.packed_names
        for spec in self.wrappers:
            if spec.name in glue.module.globals:
                raise TVMError(f"LLVM codegen: kernel name {spec.name!r} is also a function "
                               "the library calls; choose another name")
        system_lib = bool(getattr(self.target, "attrs", {}).get("system-lib", False))
        # call_extern trampolines must sit beside import_c's static functions: C then
        c_source = self._imported_c_source()
        self._start_small()
        ir_text = module_glue_ir(glue, names, system_lib, self.uses_module_ctx,
                                 {} if c_source else self.extern_types, self.wrappers)
        self.objects["kernels.o" if self.whole is not None else "glue.o"] = \
            compile_in_background(ir_text, self.glue_tm, self.glue_target)
        options = codegen_c.compile_options(self.target)
        # gcc compiles the import_c sources while LLVM finishes the kernels (a cross build
        # keeps them as source for its cross compiler)
        c_object = cc.compile_in_background(c_source, options) \
            if c_source and not self.foreign else None
        objects = {name: result() for name, result in self.objects.items()}
        files = {name: obj for name, (obj, _) in objects.items()}
        sources: dict[str, str] = {}
        if c_object is not None:
            files[C_OBJECT] = c_object()
        elif c_source:
            sources["imported_c.c"] = c_source
        text: dict[str, Any] = {"c": c_source} if c_source else {}
        module = NativeModule("llvm", sources, files, names, options, text,
                              foreign_triple=self.foreign)
        # LLVM's CPU seconds for this library, spent on its thread while kernels lowered
        module.llvm_seconds = llvm_thread_seconds() - self.llvm_seconds_at_start
        tm, llvm = self.tm, initialized_llvm()[1]
        # the kernels' IR linked into one module when get_source asks, not before
        ir_text = LinkedIR([ir_text for _, ir_text in objects.values()])
        module.text.update({"ll": ir_text, "": ir_text,
                            "asm": lambda: tm.emit_assembly(llvm.parse_assembly(ir_text()))})
        if config.debug_level() >= 4:  # the library printed its C; the kernels' LLVM
            print(f"[kiln codegen] generated ll:\n{ir_text()}", file=sys.stderr)
        return module

    def _collect(self, cg: CodeGenLLVM) -> None:
        """Take in a module's kernel signatures, import_c sources and externs."""
        self.signatures += cg.signatures
        self.packed_names += cg.packed_names
        self.imported_c += [c for c in cg.imported_c if c not in self.imported_c]
        self.externs.update(cg.externs)
        self.extern_types.update(cg.extern_types)
        self.uses_module_ctx |= cg.uses_module_ctx

    def _imported_c_source(self) -> str:
        """The C translation unit of the ``pragma_import_c`` sources and the trampolines
        ``call_extern`` reaches them through (the narrow-type conversions of the C prelude
        are C too); empty when no kernel needs C."""
        helpers = [callee for _, _, callee, _ in self.externs.values()
                   if _is_prelude_helper(callee)]
        if not self.imported_c and not helpers:
            return ""
        parts = [c_abi.preamble("llvm"), c_abi.PRELUDE_HELPERS.strip()]
        parts += ["/* imported by pragma import_c */\n" + src.strip() for src in self.imported_c]
        parts += [_extern_trampoline(symbol, *call) for symbol, call in self.externs.items()]
        return "\n\n".join(parts) + "\n"


@register_func("target.build.llvm", override=True)
def build_llvm(mod: Any, target: Any = None) -> Any:
    """``target.build.llvm``: LLVM objects (kernels, wrappers, glue) -> one loaded library."""
    builder = LLVMKernelBuilder(target)
    for symbol, func in c_abi.primfuncs_of(mod):
        builder.add(symbol, func)
    return builder.finish()


def _same_machine(triple: str, host: str) -> bool:
    """Whether code for ``triple`` runs here (same architecture and OS as the host)."""
    arch, _, rest = triple.partition("-")
    host_arch, _, host_rest = host.partition("-")
    return arch == host_arch and ("linux" in rest) == ("linux" in host_rest)


def _object_name(symbol: str) -> str:
    """The object file name of kernel ``symbol`` (a file system takes 255 bytes a name)."""
    if len(symbol) <= 120:
        return f"{symbol}.o"
    import hashlib

    return f"{symbol[:100]}_{hashlib.sha256(symbol.encode()).hexdigest()[:16]}.o"


def _is_prelude_helper(name: str) -> bool:
    """Whether ``name`` is one of the C prelude's ``static inline`` helpers (narrow-type
    conversions), which only C can call."""
    return name.startswith("kiln_") and f" {name}(" in c_abi.PRELUDE_HELPERS


def _extern_trampoline(symbol: str, c_ret: str, c_args: Sequence[str], callee: str,
                       consts: dict[int, int]) -> str:
    """An exported C function ``__kiln_extern_<symbol>`` forwarding to ``callee`` (which may
    be static in import_c); the arguments at the positions of ``consts`` are those constants
    (GCC then specializes the callee for them), the others its parameters."""
    params = ", ".join(f"{t} a{i}" for i, t in enumerate(c_args) if i not in consts) or "void"
    values = [f"(({t})({consts[i]}LL))" if i in consts else f"a{i}"
              for i, t in enumerate(c_args)]
    call = f"{callee}({', '.join(values)})"
    body = f"{call};" if c_ret == "void" else f"return {call};"
    return f"{c_ret} __kiln_extern_{symbol}({params}) {{ {body} }}"
