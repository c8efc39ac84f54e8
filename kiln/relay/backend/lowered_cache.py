"""The on-disk cache of lowered kernels (``KILN_CACHE_DIR/lower``): TE -> TIR done once.

Entry points: :func:`key`, :func:`load`, :func:`store`.

The TE compiler keeps one file per lowered primitive function: its PrimFunc with the numbers
of flat inputs and outputs, pickled (a tenth of the time of lowering it again, and of reading
it back from ``save_json``). The key (:func:`key`) is the primitive's structural hash, its
parameter names, the target and the compile context of
:func:`~kiln.relay.backend.build_cache.compile_context_key` (kiln's source fingerprint, pass
context, host CPU, user-registered strategies), so a change of any of them lowers anew.
Nothing is cached while ``compile_context_key`` says so (``KILN_BUILD_CACHE=0``, tuning
records in effect). A file that does not load (truncated, from another kiln) is removed with
a warning and the kernel lowered again.

Pickle runs code named in the file: the cache directory must be as trusted as the shared
libraries the C toolchain's cache keeps beside it, which kiln loads and runs too.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import warnings
from pathlib import Path
from typing import Any

from kiln.runtime import config, disk_cache

__all__ = ["key", "load", "store"]

# bump when what is stored changes shape
_LAYOUT = "kiln-lowered-1"


def key(*parts: str) -> str:
    """The file name of a lowering: a digest of ``parts`` and the layout version."""
    return hashlib.blake2b("\0".join((_LAYOUT, *parts)).encode(), digest_size=20).hexdigest()


def _path(name: str) -> Path:
    return config.cache_dir() / "lower" / f"{name}.pkl"


def load(name: str) -> tuple[Any, int, int] | None:
    """``(prim_func, number of inputs, number of outputs)`` stored under ``name``, or None."""
    from kiln.tir.function import PrimFunc

    path = _path(name)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        layout, prim_func, n_in, n_out = pickle.loads(data)
        if layout != _LAYOUT or not isinstance(prim_func, PrimFunc) \
                or not isinstance(n_in, int) or not isinstance(n_out, int):
            raise ValueError("not a lowered kernel of this kiln")
    except Exception as err:  # noqa: BLE001 - any unpickling failure means: lower again
        warnings.warn(f"kiln lowering cache: ignoring the unreadable {path} "
                      f"({type(err).__name__}: {err}); lowering again", stacklevel=3)
        path.unlink(missing_ok=True)
        return None
    disk_cache.touch(path)
    return prim_func, n_in, n_out


def store(name: str, lowered: tuple[Any, int, int]) -> None:
    """Keep ``(prim_func, n_in, n_out)`` under ``name`` (written whole, then renamed)."""
    path = _path(name)
    try:
        data = pickle.dumps((_LAYOUT, *lowered), protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return  # a kernel holding something unpicklable is just not cached
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next build its lowering
    disk_cache.stored()
