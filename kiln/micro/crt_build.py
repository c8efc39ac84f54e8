"""Compile kiln's C runtime (CRT) for a compiler and flags.

The CRT lives as C99 sources in ``kiln/micro/crt`` in TVM's standalone CRT layout
(:func:`get_standalone_crt_dir`). This module picks the sources of the wanted components,
writes a ``crt_config.h`` from the template (with overrides), and compiles objects or links a
host executable. Tests and the board builders use it; it is not needed to *run* a model.

Entry points: :func:`get_standalone_crt_dir`, :func:`crt_sources`, :func:`include_dirs`,
:func:`write_crt_config`, :func:`compile_objects`, :func:`link_executable`.

Example
-------
>>> import tempfile
>>> out = tempfile.mkdtemp()
>>> objs = compile_objects(out, crt_sources(("common", "memory")), cc="gcc")
>>> sorted(p.name for p in objs)[:2]
['crt_backend_api.o', 'crt_runtime_api.o']
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from kiln.runtime.cc import run_compiler
from kiln.runtime.error import TVMError

_CRT_DIR = Path(__file__).resolve().parent / "crt"

#: Components in dependency order (TVM's CRT library names).
COMPONENTS = (
    "common",
    "memory",
    "graph_executor",
    "graph_executor_module",
    "aot_executor",
    "aot_executor_module",
    "microtvm_rpc_common",
    "microtvm_rpc_server",
)

#: Warning flags the CRT must build cleanly with, on every compiler.
STRICT_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-Werror")

#: Flags for Cortex-M4F (the mps2-an386 board).
CORTEX_M4_CFLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16")


def get_standalone_crt_dir() -> str:
    """The directory holding the CRT (``include/``, ``src/runtime/crt/``, ``template/``).

    Example
    -------
    >>> import os
    >>> os.path.isfile(os.path.join(get_standalone_crt_dir(), "include", "dlpack", "dlpack.h"))
    True
    """
    return str(_CRT_DIR)


def crt_sources(components: Iterable[str] = COMPONENTS) -> list[Path]:
    """The ``.c`` files of the named components (see :data:`COMPONENTS`)."""
    sources: list[Path] = []
    for name in components:
        if name not in COMPONENTS:
            raise TVMError(f"unknown CRT component {name!r}; valid: {', '.join(COMPONENTS)}")
        sources += sorted((_CRT_DIR / "src" / "runtime" / "crt" / name).glob("*.c"))
    return sources


def include_dirs(config_dir: str | os.PathLike) -> list[Path]:
    """Include directories for CRT code: public headers, internal headers, ``crt_config.h``."""
    return [
        _CRT_DIR / "include",
        _CRT_DIR / "src" / "runtime" / "crt" / "include",
        Path(config_dir),
    ]


def write_crt_config(out_dir: str | os.PathLike, overrides: Mapping[str, object] = ()) -> Path:
    """Write ``crt_config.h`` into ``out_dir``: the template with ``overrides`` defined first.

    Example
    -------
    >>> import tempfile
    >>> path = write_crt_config(tempfile.mkdtemp(), {"TVM_CRT_MAX_NDIM": 8})
    >>> "#define TVM_CRT_MAX_NDIM 8" in path.read_text()
    True
    """
    template = (_CRT_DIR / "template" / "crt_config-template.h").read_text()
    lines = [f"#define {name} {value}" for name, value in dict(overrides).items()]
    # The template guards every limit with #ifndef, so definitions placed before it win.
    guard = "#define TVM_RUNTIME_CRT_CONFIG_H_\n"
    text = template.replace(guard, guard + "".join(line + "\n" for line in lines), 1)
    path = Path(out_dir) / "crt_config.h"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _find(cc: str) -> str:
    path = shutil.which(cc)
    if path is None:
        raise TVMError(f"C compiler {cc!r} not found on PATH")
    return path


def compile_objects(
    out_dir: str | os.PathLike,
    sources: Iterable[str | os.PathLike],
    *,
    cc: str = "gcc",
    cflags: Sequence[str] = (*STRICT_CFLAGS, "-O2"),
    config: Mapping[str, object] = (),
    include: Sequence[str | os.PathLike] = (),
) -> list[Path]:
    """Compile each source to ``out_dir/<stem>.o`` against the CRT headers; return the objects.

    A ``crt_config.h`` with ``config`` overrides is written to ``out_dir`` first. Compiler
    errors (and, with the default ``-Werror``, warnings) raise :class:`TVMError` with the
    compiler's output.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_crt_config(out, config)
    compiler = _find(cc)
    flags = [f"-I{d}" for d in (*include, *include_dirs(out))]
    objects = []
    for source in sources:
        obj = out / (Path(source).stem + ".o")
        run_compiler(
            [compiler, "-c", *cflags, *flags, os.fspath(source), "-o", os.fspath(obj)],
            f"Compiling {Path(source).name}",
        )
        objects.append(obj)
    return objects


def link_executable(
    output: str | os.PathLike,
    objects: Iterable[str | os.PathLike],
    *,
    cc: str = "gcc",
    ldflags: Sequence[str] = ("-lm",),
) -> Path:
    """Link object files into an executable at ``output``."""
    run_compiler([_find(cc), *map(os.fspath, objects), "-o", os.fspath(output), *ldflags],
                 "Linking")
    return Path(output)
