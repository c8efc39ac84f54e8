"""The table of target kinds -> build functions, and the Module that native codegen returns.

Entry points: :data:`BUILD_FUNCTIONS`, :data:`KERNEL_BUILDERS`, :func:`build_module`,
:class:`NativeModule`.

A build function takes ``(IRModule of PrimFuncs, Target)`` and returns a runtime
:class:`~kiln.runtime.module.Module`. Each one is defined (and registered in the global
registry as ``target.build.<kind>``) in its codegen module; this table is the one place that
says which kinds kiln can generate code for.

:class:`NativeModule` holds what a codegen produced (C source, or LLVM IR plus an object file
and the C glue of the packed wrappers), compiles it through the one toolchain driver's build
cache (identical source + flags reuse the library), loads it as a ``DSOModule`` (LLVM's
objects alone are linked in process instead: :mod:`.llvm_jit`), and exports its objects for
``export_library``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kiln.runtime import cc, config
from kiln.runtime.error import TVMError
from kiln.runtime.module import DSOModule, Module, ModuleProperty
from kiln.target import c_library, codegen_c, codegen_opencl, llvm_jit, llvm_library

__all__ = ["BUILD_FUNCTIONS", "KERNEL_BUILDERS", "build_module", "NativeModule"]

BUILD_FUNCTIONS: dict[str, Callable[[Any, Any], Module]] = {
    "c": codegen_c.build_c,
    "llvm": llvm_library.build_llvm,
    "opencl": codegen_opencl.build_opencl,
}

# Target kinds whose library can be built kernel by kernel, as the kernels are lowered: the
# class takes the Target; ``add(symbol, prim_func)`` starts compiling one kernel and
# ``finish()`` returns the Module of all of them (what the build function returns).
KERNEL_BUILDERS: dict[str, Callable[[Any], Any]] = {
    "c": c_library.CKernelBuilder,
    "llvm": llvm_library.LLVMKernelBuilder,
}


def build_module(mod: Any, target: Any) -> Module:
    """Generate and compile code for every PrimFunc of ``mod`` with ``target``'s codegen.

    Example
    -------
    >>> from kiln import tir
    >>> from kiln.target import Target
    >>> A = tir.decl_buffer((4,), "float32", name="A")
    >>> f = tir.PrimFunc([A], tir.BufferStore(A, tir.const(1.0, "float32"), [0]))
    >>> build_module(f.with_attr("global_symbol", "one"), Target("c")).type_key
    'c'
    """
    kind = target.kind.name
    build = BUILD_FUNCTIONS.get(kind)
    if build is None:
        raise TVMError(
            f"kiln cannot generate code for target kind '{kind}'; code generators exist for: "
            + ", ".join(sorted(BUILD_FUNCTIONS))
        )
    return build(mod, target)


class NativeModule(Module):
    """Compiled host code from kiln's codegen: source kept for ``get_source``, a loaded DSO.

    ``sources`` maps a file name to C text; ``objects`` maps a file name to object-file bytes
    (LLVM output). Both are linked into one shared library, cached by content and flags.
    """

    _property_mask = (ModuleProperty.RUNNABLE | ModuleProperty.DSO_EXPORTABLE)

    def __init__(self, kind: str, sources: dict[str, str], objects: dict[str, bytes],
                 function_names: Sequence[str], options: Sequence[str],
                 text: dict[str, Any], foreign_triple: str | None = None) -> None:
        super().__init__()
        self.type_key = kind
        self.sources = dict(sources)
        self.objects = dict(objects)
        self.function_names = list(function_names)
        self.options = list(options)
        # fmt -> source text for get_source, or a function making it on first request (LLVM
        # assembly costs as much as the object file: a build should not pay for it unasked)
        self.text = dict(text)
        # Code for another machine (-mtriple) is kept for export and source, never loaded.
        self.foreign_triple = foreign_triple
        self.library_path: Path | None = None  # the loaded .so; None in process or foreign
        self.dso = None if foreign_triple else self._load()
        if foreign_triple:
            self._property_mask = ModuleProperty.DSO_EXPORTABLE

    @classmethod
    def from_c_source(cls, source: str, names: Sequence[str], options: Sequence[str],
                      kind: str = "c") -> NativeModule:
        """A module of one C translation unit (``lib0.c``) exporting ``names``."""
        return cls(kind, {"lib0.c": source}, {}, names, options, {"c": source, "": source})

    def with_source(self, name: str, text: str, function_names: Sequence[str]) -> NativeModule:
        """This module plus one more C file (compiled and linked with the rest): how the AOT
        main joins the kernels it calls."""
        sources = {**self.sources, name: text}
        shown = {fmt: (self.get_source(fmt) + "\n" + text if fmt in ("c", "") else src)
                 for fmt, src in self.text.items()}
        shown.setdefault("c", text)
        return NativeModule(self.type_key, sources, self.objects,
                            self.function_names + list(function_names), self.options, shown,
                            self.foreign_triple)

    def _load(self) -> Module:
        """The loaded library: LLVM's objects linked in this process (:mod:`.llvm_jit`) when
        nothing needs the C compiler or the loader, else a cached shared library, dlopened."""
        start = time.perf_counter()
        try:
            if config.debug_level() >= 4:
                for fmt in self.text:
                    if fmt:
                        print(f"[kiln codegen] generated {fmt}:\n{self.get_source(fmt)}",
                              file=sys.stderr)
            if self.objects and not self.sources and llvm_library.C_OBJECT not in self.objects:
                loaded = llvm_jit.link_in_process(self.objects, f"{self.type_key} library")
                if loaded is not None:
                    return loaded
            self.library_path = self._compile()
            return DSOModule(str(self.library_path))
        finally:
            # the linker's and C compiler's share of a build (KILN_DEBUG=1's breakdown)
            self.compile_seconds = time.perf_counter() - start

    def _compile(self) -> Path:
        if not self.objects:
            path = cc.cached_shared_library(self.sources, self.options)
        else:
            # Object bytes cannot travel as text: stage every file and let cc hash the files.
            # LLVM's objects need no compiler driver to link (gcc's -fopenmp object from
            # import_c sources might need its runtime)
            objects_only = not self.sources and llvm_library.C_OBJECT not in self.objects
            with tempfile.TemporaryDirectory() as tmp:
                paths = self.export_objects(tmp)
                path = cc.cached_shared_library(paths, self.options, objects_only=objects_only)
        if config.debug_level() >= 4:
            print(f"[kiln codegen] library {path}", file=sys.stderr)
        return path

    @property
    def format(self) -> str:
        """The module's format: its codegen kind (``c`` or ``llvm``)."""
        return self.type_key

    def _get_function(self, name: str) -> Any:
        if self.dso is None:
            raise TVMError(
                f"Module[{self.type_key}] holds code for {self.foreign_triple}, which this "
                "machine cannot run; export it with export_library(..., fcompile=<a cross "
                "compiler>) or save its object file"
            )
        return self.dso._get_function(name)

    def get_source(self, fmt: str = "") -> str:
        """The generated source: ``"c"`` for C; ``"ll"`` / ``"asm"`` for LLVM."""
        try:
            text = self.text[fmt]
        except KeyError:
            raise TVMError(
                f"Module[{self.type_key}] has no source of format {fmt!r}; available: "
                + ", ".join(repr(k) for k in self.text if k)
            ) from None
        if callable(text):
            text = self.text[fmt] = text()
        return text

    def save(self, file_name: str | os.PathLike, fmt: str = "") -> None:
        """Write the source (``.c``, ``.ll``, ``.s``) or the object file (``.o``: the kernels
        and their packed wrappers, linked into one relocatable object)."""
        path = os.fspath(file_name)
        suffix = fmt or Path(path).suffix.lstrip(".")
        if suffix == "o" and len(self.objects) == 1:
            Path(path).write_bytes(next(iter(self.objects.values())))
            return
        if suffix == "o" and self.objects:  # one object per kernel and the glue's: link them
            with tempfile.TemporaryDirectory() as tmp:
                cc.link_relocatable(path, [p for p in self.export_objects(tmp)
                                           if p.endswith(".o")])
            return
        fmt_of = {"c": "c", "ll": "ll", "s": "asm", "asm": "asm"}
        Path(path).write_text(self.get_source(fmt_of.get(suffix, suffix)))

    def export_objects(self, workspace_dir: str) -> list[str]:
        """Write the sources and objects into ``workspace_dir``; return their paths."""
        paths = []
        for name, text in self.sources.items():
            path = Path(workspace_dir, name)
            path.write_text(text)
            paths.append(str(path))
        for name, data in self.objects.items():
            path = Path(workspace_dir, name)
            path.write_bytes(data)
            paths.append(str(path))
        return paths

    def link_options(self) -> list[str]:
        """The flags this module was built with (export_library's single gcc call both
        compiles the exported C and links, so -march, -std, -fopenmp ... all apply)."""
        return [o for o in self.options if o != "-fPIC"]

    def __repr__(self) -> str:
        return f"Module({self.type_key}, functions={self.function_names})"
