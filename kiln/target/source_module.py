"""``CSourceModule``: generated C kept as source, for a toolchain other than the host's.

Entry point: :class:`CSourceModule`.

Builds for the C runtime (``Runtime("crt")``) produce C that the firmware's toolchain
compiles against the CRT's headers, so kiln keeps it as source (TVM's ``CSourceModuleNode``):
``get_source``, ``save``, ``export_objects`` (for Model Library Format) and
``get_func_names``. Kernels need only the TVM C API, which kiln's host runtime also provides:
given ``host_options``, the module compiles itself for this machine the first time one of its
functions is asked for (so a crt graph build also runs on the host graph executor). Other
source (the CRT registry) answers such a request with an error saying how to use it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kiln.runtime.error import TVMError
from kiln.runtime.module import Module, ModuleProperty

__all__ = ["CSourceModule"]


class CSourceModule(Module):
    """C source that is exported, never loaded (TVM's ``CSourceModule``, type key ``"c"``).

    Example
    -------
    >>> m = CSourceModule("int32_t f(void) { return 0; }", ["f"])
    >>> m.type_key, m.get_source()[:7]
    ('c', 'int32_t')
    """

    type_key = "c"
    _property_mask = ModuleProperty.DSO_EXPORTABLE

    def __init__(self, source: str, function_names: Sequence[str] = (),
                 file_name: str = "lib.c", host_options: Sequence[str] | None = None) -> None:
        super().__init__()
        self.source = source
        self.function_names = list(function_names)
        self.file_name = file_name
        self.host_options = None if host_options is None else list(host_options)
        self._host_library: Any = None

    @property
    def format(self) -> str:
        """The module's source format: ``c``."""
        return "c"

    def _get_function(self, name: str) -> Any:
        if name == "get_func_names":
            return lambda: list(self.function_names)
        if name in self.function_names and self.host_options is not None:
            return self._host().get_function(name)
        if name in self.function_names:
            raise TVMError(
                f"{name} is C source for the C runtime (Runtime('crt')); it is not compiled "
                "for this machine. Export it with tvm.micro.export_model_library_format and "
                "build it with the CRT, or build with Runtime('cpp') to run it here")
        return None

    def _host(self) -> Module:
        """This source compiled for the host (once; the toolchain driver caches it)."""
        if self._host_library is None:
            from kiln.runtime import cc
            from kiln.runtime.module import DSOModule

            path = cc.cached_shared_library({self.file_name: self.source}, self.host_options)
            self._host_library = DSOModule(str(path))
        return self._host_library

    def get_source(self, fmt: str = "") -> str:
        """The C source (``fmt`` ``""`` or ``"c"``)."""
        if fmt not in ("", "c"):
            raise TVMError(f"Module[c] has no source of format {fmt!r}; it has 'c'")
        return self.source

    def save(self, file_name: str | os.PathLike, fmt: str = "") -> None:
        """Write the C source to ``file_name``."""
        Path(file_name).write_text(self.source)

    def export_objects(self, workspace_dir: str) -> list[str]:
        """Write the C source into ``workspace_dir``; return its path."""
        path = Path(workspace_dir, self.file_name)
        path.write_text(self.source)
        return [str(path)]

    def __repr__(self) -> str:
        return f"Module(c, functions={self.function_names})"
