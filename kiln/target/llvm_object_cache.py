"""The ``llvm`` target's object cache: optimized object files on disk, by unoptimized IR.

Entry point: :func:`compile_cached`.

LLVM's O3 pipeline and code emission are most of a build's codegen time (ResNet-18: ~10 of
~13 s on a loaded 2-core box); kiln's IR generation is deterministic, so a second build of
the same kernels produces the same unoptimized IR text, and the object file and optimized IR
of the first build are reused from ``KILN_CACHE_DIR/llvm/<key>.{o,ll}``. The key covers the IR
(which carries the triple and data layout), the target string, its opt level, the host CPU
name and features (what ``-mcpu=native`` or no ``-mcpu`` select) and the LLVM version.

Example
-------
>>> from kiln.target.llvm_object_cache import cache_key
>>> key = cache_key("; empty module", "llvm -mcpu=znver3", 3)
>>> len(key)
64
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from typing import Any

from kiln.runtime import config

__all__ = ["compile_cached", "cache_key"]


def cache_key(ir_text: str, target: Any, opt_level: int) -> str:
    """The hex SHA-256 naming the cached object of ``ir_text`` built for ``target``."""
    import llvmlite.binding as llvm

    return hashlib.sha256("\0".join([
        ir_text, str(target), str(opt_level), llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(), str(llvm.llvm_version_info)]).encode()
    ).hexdigest()


def compile_cached(ir_text: str, target: Any, optimize: Callable[[], Any],
                   machine: Any) -> tuple[bytes, str]:
    """``(object bytes, optimized IR text)`` of the module whose unoptimized IR is
    ``ir_text``: from the cache, else ``optimize()`` (the verified, optimized ModuleRef)
    emitted by ``machine`` and stored."""
    opt_level = getattr(target, "opt_level", 3) if target is not None else 3
    path = config.cache_dir() / "llvm" / cache_key(ir_text, target, opt_level)
    obj_path, ir_path = path.with_suffix(".o"), path.with_suffix(".ll")
    try:
        return obj_path.read_bytes(), ir_path.read_text()
    except OSError:
        pass
    ref = optimize()
    obj, optimized = machine.emit_object(ref), str(ref)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the IR first and the object last, each renamed into place: a reader that finds the
        # object finds its IR complete
        for final, data in ((ir_path, optimized.encode()), (obj_path, obj)):
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
    except OSError:
        pass  # a read-only cache only costs the next build its time
    return obj, optimized
