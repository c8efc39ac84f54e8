"""The few environment knobs kiln reads, in one place.

- ``KILN_CACHE_DIR``: build cache directory (default ``~/.cache/kiln``).
- ``KILN_CACHE_MAX_MB``: size cap of that directory in megabytes (default 2048, ``0``: no
  cap); least recently used entries are evicted past it (:mod:`kiln.runtime.disk_cache`).
- ``KILN_BUILD_CACHE``: ``0`` turns off the caches of whole ``relay.build`` results and of
  lowered kernels (LLVM objects and C libraries are still cached by content).
- ``KILN_DEBUG``: 1 pass names and times, 2 IR after each pass, 3 lowered TIR,
  4 generated C/LLVM with the compiler command and cache path.
- ``KILN_NUM_THREADS`` (or ``TVM_NUM_THREADS``): threads for parallel kernels.
- ``KILN_CC_TIMEOUT``: seconds one compiler run may take (default 1800).
- ``KILN_RPC_SPIN_US``: microseconds an RPC receive polls before it sleeps (default 50, 0: never,
  at most 10000).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cache_dir", "cache_max_bytes", "debug_level", "num_threads", "compile_timeout",
           "build_cache_enabled", "rpc_spin_us", "DEFAULT_CACHE_MAX_MB"]


def cache_dir() -> Path:
    """The on-disk build cache, created on first use."""
    path = Path(os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")
    path.mkdir(parents=True, exist_ok=True)
    return path


DEFAULT_CACHE_MAX_MB = 2048


def cache_max_bytes() -> int:
    """The build cache's size cap in bytes (``KILN_CACHE_MAX_MB``, default 2048 MB; 0: no
    cap). A value that is not a finite number >= 0 gives the default."""
    text = os.environ.get("KILN_CACHE_MAX_MB", "").strip()
    try:
        megabytes = float(text) if text else DEFAULT_CACHE_MAX_MB
    except ValueError:
        megabytes = DEFAULT_CACHE_MAX_MB
    if not math.isfinite(megabytes) or megabytes < 0:
        megabytes = DEFAULT_CACHE_MAX_MB
    # a positive cap below a byte is a byte, not 0 (which turns the cap off)
    return max(1, int(megabytes * (1 << 20))) if megabytes > 0 else 0


def build_cache_enabled() -> bool:
    """Whether ``relay.build`` looks up and stores whole builds and the TE compiler lowered
    kernels (``KILN_BUILD_CACHE``, on unless ``0``, ``off`` or ``false``)."""
    return os.environ.get("KILN_BUILD_CACHE", "1").strip().lower() not in ("0", "off", "false")


def debug_level() -> int:
    """The ``KILN_DEBUG`` level (0 when unset or not a number)."""
    try:
        return int(os.environ.get("KILN_DEBUG", "0"))
    except ValueError:
        return 0


def num_threads() -> int:
    """Threads for parallel kernels: KILN_NUM_THREADS, TVM_NUM_THREADS, else the CPU count."""
    for var in ("KILN_NUM_THREADS", "TVM_NUM_THREADS"):
        value = os.environ.get(var)
        if value:
            try:
                n = int(value)
            except ValueError:
                continue
            if n > 0:
                return n
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def compile_timeout() -> float:
    """Seconds one C compiler run may take (``KILN_CC_TIMEOUT``, default 1800).

    Source that includes a device file (``#include "/dev/zero"``) makes gcc read forever;
    the limit turns that into an error instead of a hang.
    """
    try:
        value = float(os.environ.get("KILN_CC_TIMEOUT", "1800"))
    except ValueError:
        return 1800.0
    return value if value > 0 else 1800.0


# A receive never spins longer than this: the spin burns a CPU, and rpc_serve.c converts
# the budget to int64 nanoseconds (inf/NaN or 1e30 would not convert, or would wrap).
_RPC_SPIN_US_MAX = 10000.0


def rpc_spin_us() -> float:
    """Microseconds an RPC receive polls its socket before it sleeps (``KILN_RPC_SPIN_US``,
    default 50; 0 or a negative number: sleep at once; at most 10000; not a finite number:
    the default). Polling spares a round trip the wake-up of an idle CPU;
    kiln/runtime/src/rpc_serve.c says when it spins."""
    try:
        value = float(os.environ.get("KILN_RPC_SPIN_US", "50"))
    except ValueError:
        return 50.0
    if not math.isfinite(value):
        return 50.0
    return min(max(value, 0.0), _RPC_SPIN_US_MAX)
