"""``tvm.contrib.cc``: the C toolchain driver (implemented in :mod:`kiln.runtime.cc`).

Entry points: :func:`create_shared`, :func:`compile_object`, :func:`create_staticlib`,
:func:`cached_shared_library`, :func:`find_compiler`, :func:`default_options`.

Example
-------
>>> from kiln.contrib import cc
>>> cc.create_shared is __import__("kiln.runtime.cc", fromlist=["x"]).create_shared
True
"""

from __future__ import annotations

from kiln.runtime.cc import (
    cached_shared_library,
    compile_object,
    compiler_version,
    create_shared,
    create_staticlib,
    cross_compiler,
    default_options,
    find_compiler,
    include_dirs,
    openmp_available,
)

__all__ = [
    "cached_shared_library",
    "compile_object",
    "compiler_version",
    "create_shared",
    "create_staticlib",
    "cross_compiler",
    "default_options",
    "find_compiler",
    "include_dirs",
    "openmp_available",
]
