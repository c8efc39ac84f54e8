"""The runtime support library: every ``kiln/runtime/src/*.c`` built into one shared library.

Entry points: :func:`load_runtime_lib`, :func:`prefetch_runtime_lib`, :func:`include_dirs`.

The library implements the C API that generated kernels call (``TVMAPISetLastError``,
``TVMBackendAllocWorkspace``, ``TVMBackendParallelLaunch``, ``TVMFuncCall`` …) plus the C
loops of the executors. It is compiled once per content hash + flags into the build cache and
loaded with ``RTLD_GLOBAL``, so kernel libraries loaded afterwards resolve those symbols
against it. Loading it also installs the Python registry hooks (``TVMFuncRegisterGlobal`` and
friends forward to :mod:`kiln.runtime.registry`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path

from kiln.runtime import cc, config

# libgomp spins while waiting for work by default; when the machine is oversubscribed a
# parallel kernel then loses whole scheduler slices (a 50 us dense measured 21 ms). Passive
# waiting costs a few microseconds per launch and never that. Users may still override it.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

__all__ = ["load_runtime_lib", "prefetch_runtime_lib", "include_dirs", "runtime_sources"]

_SRC_DIR = Path(__file__).resolve().parent / "src"
_lock = threading.RLock()
_lib: ctypes.CDLL | None = None


def include_dirs() -> list[str]:
    """Include directories for code that uses kiln's C headers (``-I`` flags)."""
    return cc.include_dirs()


def runtime_sources() -> list[Path]:
    """The C files compiled into the support library, in a stable order."""
    return sorted(_SRC_DIR.glob("*.c"))


def _options() -> list[str]:
    options = ["-O3", "-fPIC", "-std=gnu11"]
    if cc.openmp_available():
        options.append("-fopenmp")
    return options


def load_runtime_lib() -> ctypes.CDLL:
    """Build (first time only) and load the support library; return the loaded library.

    Example
    -------
    >>> lib = load_runtime_lib()
    >>> lib.TVMGetLastError.restype = ctypes.c_char_p
    >>> isinstance(lib.TVMGetLastError(), bytes)
    True
    """
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = cc.cached_shared_library(
            {src.name: src.read_text() for src in runtime_sources()}, _options()
        )
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.KilnRuntimeSetNumThreads.argtypes = [ctypes.c_int]
        lib.KilnRuntimeSetNumThreads(config.num_threads())
        _lib = lib
        # The hooks live with the PackedFunc bridge; importing it here keeps "load the
        # library" and "C can reach the Python registry" one step for every caller.
        from kiln.runtime import packed_func, thread_pool  # noqa: F401 (registers globals)

        packed_func.install_runtime_hooks(lib)
        return lib


def prefetch_runtime_lib() -> None:
    """Start building and loading the support library on a background thread (unless it is
    loaded or on its way): with an empty cache directory it compiles for about a second,
    which a build overlaps with its own work; :func:`load_runtime_lib` then waits for it."""
    global _prefetch
    if _lib is not None or (_prefetch is not None and _prefetch.is_alive()):
        return
    _prefetch = threading.Thread(target=_load_in_background, name="kiln-runtime-lib",
                                 daemon=True)
    _prefetch.start()


_prefetch: threading.Thread | None = None


def _load_in_background() -> None:
    with contextlib.suppress(Exception):  # the caller's own load_runtime_lib reports it
        load_runtime_lib()


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing, AutoTVM's builder pool) has only the forking thread:
    a lock the background build held across its ~1 s gcc run would stay held forever
    there, so the child starts with a free lock and no prefetch (its own load builds or
    finds the library)."""
    global _lock, _prefetch
    _lock = threading.RLock()
    _prefetch = None


os.register_at_fork(after_in_child=_after_fork_in_child)
