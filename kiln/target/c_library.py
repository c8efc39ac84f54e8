"""The ``c`` target's library, built kernel by kernel in several C translation units.

Entry point: :class:`CKernelBuilder` (``kiln.target.build.KERNEL_BUILDERS["c"]``).

Relay's TE compiler hands each kernel to the builder as soon as it is lowered. The builder
prints the kernel's C into an open translation unit (a self-contained file: includes,
helpers, the imported C its kernels use, their unpacked functions and packed wrappers); once
the unit is big enough it starts gcc on it in the background and a new unit opens. gcc so
works on another core while Python lowers the next kernels, and the last units compile on
every core at once. Each unit's object is cached on its own (``KILN_CACHE_DIR/cc``).
:meth:`CKernelBuilder.finish` returns the :class:`~kiln.target.build.NativeModule` of all
units, whose library build finds their objects compiled or in flight and only links them.

How big is big enough: every unit costs gcc a fixed ~40 ms (process, headers, preamble), so
a unit closes at :data:`UNIT_CHARS` of kernel text. Kernels that import C
(``pragma_import_c``: the int8 and recurrent kernels) share one open unit per set of
imported sources, because each unit compiles its imported C again (a static function per
unit) and that C is dense (AVX-512 int8 planes cost gcc ~0.25 s per copy): such a unit closes
only at :data:`IMPORT_COPY_WORTH` times the imported C's length of kernel text.

The units stay the module's ``sources`` (``lib0.c``, ``lib1.c``, ...): ``export_library``,
Model Library Format (``codegen/host/src/<mod>_lib<n>.c``) and AOT consume them as before;
``get_source()`` and ``save("x.c")`` give all kernels as one translation unit (each helper
and imported source once), which compiles on its own as a one-unit library's source did.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime import cc
from kiln.target import codegen_c
from kiln.tir.stmt_functor import post_order_visit

__all__ = ["CKernelBuilder", "UNIT_CHARS", "IMPORT_COPY_WORTH", "imported_c",
           "joined_source"]

# Kernel text (characters of C, packed wrappers included) that closes a translation unit:
# about 0.1 s of gcc at -O3, so a unit's fixed cost stays small; a ResNet-18 conv kernel
# (15-45k characters) gets a unit of its own.
UNIT_CHARS = 16_000
# A unit carrying imported C closes once its kernel text is this many times the imported
# C's length: each further unit compiles that C again.
IMPORT_COPY_WORTH = 24


class CKernelBuilder:
    """The ``c`` target's library, compiled unit by unit as kernels are added (see module).

    Example
    -------
    >>> from kiln import tir
    >>> from kiln.target import Target
    >>> A = tir.decl_buffer((4,), "float32", name="A")
    >>> builder = CKernelBuilder(Target("c"))
    >>> builder.add("one", tir.PrimFunc([A], tir.BufferStore(A, tir.const(1.0, "float32"), [0])))
    >>> builder.finish().function_names
    ['one']
    """

    def __init__(self, target: Any) -> None:
        self.target = target
        self.options = codegen_c.compile_options(target)
        self.sources: dict[str, str] = {}
        self.function_names: list[str] = []
        # imported C sources -> the open unit of the kernels importing exactly those
        self._open: dict[tuple[str, ...], codegen_c.CodeGenC] = {}
        self._closed: list[codegen_c.CodeGenC] = []

    def add(self, symbol: str, func: Any) -> None:
        """Print ``symbol``'s C; start compiling its unit once the unit is big enough."""
        imports = imported_c(func)
        unit = self._open.get(imports)
        if unit is None:
            unit = self._open[imports] = codegen_c.codegen_for(self.target)
        known = len(unit.function_names)
        codegen_c.add_kernels(unit, {symbol: func})
        self.function_names += unit.function_names[known:]
        size = max(UNIT_CHARS, IMPORT_COPY_WORTH * sum(map(len, imports)))
        if unit.kernel_chars >= size:
            self._close(imports)

    def _close(self, imports: tuple[str, ...]) -> None:
        unit = self._open.pop(imports)
        # __tvm_main__ names the module's first function: only its unit defines it
        source = unit.finish(entry=self.function_names[0] in unit.function_names)
        self.sources[f"lib{len(self.sources)}.c"] = source
        self._closed.append(unit)
        cc.compile_in_background(source, self.options)

    def finish(self) -> Any:
        """The loaded library of every kernel added (a NativeModule)."""
        from kiln.target.build import NativeModule

        for imports in list(self._open):
            self._close(imports)
        if not self.sources:  # no kernel: one empty unit, as build_c makes
            self.sources["lib0.c"] = codegen_c.emit_c({}, self.target)[0]
        text = self._one_unit() if len(self.sources) > 1 else joined_source(self.sources)
        return NativeModule("c", self.sources, {}, self.function_names, self.options,
                            {"c": text, "": text})

    def _one_unit(self) -> str:
        """Every kernel in one translation unit, the module's entry function first (the
        source a user saves and compiles: the units' texts define their helpers each)."""
        first = next(u for u in self._closed if self.function_names[0] in u.function_names)
        merged = codegen_c.codegen_for(self.target)
        for unit in [first, *(u for u in self._closed if u is not first)]:
            merged.absorb(unit)
        return merged.finish(entry=True)


def imported_c(func: Any) -> tuple[str, ...]:
    """The C sources ``func`` imports (``pragma_import_c``), in order, each once."""
    found: list[str] = []

    def visit(node: Any) -> None:
        if getattr(node, "attr_key", None) == "pragma_import_c":
            source = node.value.value
            if source not in found:
                found.append(source)

    post_order_visit(func.body, visit)
    return tuple(found)


def joined_source(sources: dict[str, str]) -> str:
    """The units of a library one after another, each under a comment naming its file (one
    unit is given as it is)."""
    if len(sources) == 1:
        return next(iter(sources.values()))
    return "\n".join(f"/* ---- {name} ---- */\n{text}" for name, text in sources.items())
