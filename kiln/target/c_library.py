"""The ``c`` target's library, built kernel by kernel in several C translation units.

Entry point: :class:`CKernelBuilder` (``kiln.target.build.KERNEL_BUILDERS["c"]``).

Relay's TE compiler hands each kernel to the builder as soon as it is lowered. The builder
prints the kernel's C into the current translation unit (a self-contained file: includes,
helpers, the imported C its kernels use, their unpacked functions and packed wrappers); once
the unit holds :data:`UNIT_CHARS` of kernel text it starts gcc on it in the background and
opens the next. gcc so works on another core while Python lowers the next kernels, and the
last units compile on every core at once. Small kernels share a unit because each unit costs
gcc a fixed ~40 ms (process, headers, preamble). Each unit's object is cached on its own
(``KILN_CACHE_DIR/cc``). :meth:`CKernelBuilder.finish` returns the
:class:`~kiln.target.build.NativeModule` of all units, whose library build finds their
objects compiled or in flight and only links them.

The units stay the module's ``sources`` (``lib0.c``, ``lib1.c``, ...): ``export_library``,
Model Library Format (``codegen/host/src/<mod>_lib<n>.c``) and AOT consume them as before;
``get_source()`` gives them one after another, each under a comment naming its file.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime import cc
from kiln.target import codegen_c

__all__ = ["CKernelBuilder", "UNIT_CHARS", "joined_source"]

# Kernel text (characters of C) that closes a translation unit: about 0.1 s of gcc at -O3, so
# the ~40 ms a unit costs gcc besides its kernels stays small, and a ResNet-18 conv kernel
# (15-45k characters) gets a unit of its own.
UNIT_CHARS = 16_000


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
        self._unit: codegen_c.CodeGenC | None = None

    def add(self, symbol: str, func: Any) -> None:
        """Print ``symbol``'s C; start compiling its unit once the unit is big enough."""
        if self._unit is None:
            self._unit = codegen_c.codegen_for(self.target)
        codegen_c.add_kernels(self._unit, {symbol: func})
        if self._unit.emitted_chars >= UNIT_CHARS:
            self._close_unit()

    def _close_unit(self) -> None:
        unit, self._unit = self._unit, None
        # __tvm_main__ names the module's first function: only the first unit defines it
        source = unit.finish(entry=not self.sources)
        self.sources[f"lib{len(self.sources)}.c"] = source
        self.function_names += unit.function_names
        cc.compile_in_background(source, self.options)

    def finish(self) -> Any:
        """The loaded library of every kernel added (a NativeModule)."""
        from kiln.target.build import NativeModule

        if self._unit is not None or not self.sources:  # the last unit (or an empty one)
            self._unit = self._unit or codegen_c.codegen_for(self.target)
            self._close_unit()
        text = joined_source(self.sources)
        return NativeModule("c", self.sources, {}, self.function_names, self.options,
                            {"c": text, "": text})


def joined_source(sources: dict[str, str]) -> str:
    """The units of a library one after another, each under a comment naming its file (one
    unit is given as it is)."""
    if len(sources) == 1:
        return next(iter(sources.values()))
    return "\n".join(f"/* ---- {name} ---- */\n{text}" for name, text in sources.items())
