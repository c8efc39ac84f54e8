"""The thread pool that runs parallel kernels (``TVMBackendParallelLaunch`` in kiln_runtime.c).

Entry points: :func:`num_threads` (TVM's ``tvm.runtime.num_threads``),
:func:`config_threadpool` (the global ``runtime.config_threadpool``), :func:`hot` (hold the
pool hot across a run of kernels), :func:`pool_stats` (exact counts of launches, worker tasks
and sleeps, for benchmarks), :data:`STAT_NAMES`.

The executors hold the pool hot for a whole run: the graph executor's C loop does it itself,
the VM wraps its interpreter loop in :func:`hot`. While a hold is in force the workers poll
for the next parallel kernel instead of sleeping between two of them (bounded: 2 ms without
work, see the spin budgets in kiln_runtime.c).

Example
-------
>>> from kiln.runtime import thread_pool
>>> thread_pool.num_threads() >= 1
True
>>> with thread_pool.hot():
...     pass
>>> sorted(thread_pool.pool_stats())[:2]
['barrier_sleeps', 'inline']
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator

from kiln.runtime import config
from kiln.runtime.error import TVMError
from kiln.runtime.native import load_runtime_lib
from kiln.runtime.registry import register_func

__all__ = ["num_threads", "config_threadpool", "hot", "pool_stats", "STAT_NAMES"]

# The values of KilnRuntimePoolStats, in its order: counters, then two gauges.
STAT_NAMES = ("launches", "inline", "worker_tasks", "worker_sleeps", "join_sleeps",
              "barrier_sleeps", "wakes", "workers_asleep", "workers")


# kKilnMaxTeam of kiln_runtime.c: no launch runs more tasks than this
MAX_THREADS = 1024

_bound: list[ctypes.CDLL] = []


def _lib() -> ctypes.CDLL:
    """The runtime library with the pool entry points' signatures set (once)."""
    if not _bound:
        lib = load_runtime_lib()
        lib.KilnRuntimePoolHold.argtypes = [ctypes.c_int]
        lib.KilnRuntimePoolHold.restype = ctypes.c_int
        lib.KilnRuntimePoolStats.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int,
                                             ctypes.c_int]
        lib.KilnRuntimePoolStats.restype = ctypes.c_int
        _bound.append(lib)
    return _bound[0]


def num_threads() -> int:
    """Threads a parallel kernel runs on (the caller and the pool's workers).

    Example
    -------
    >>> num_threads() >= 1
    True
    """
    return int(load_runtime_lib().KilnRuntimeNumThreads())


def config_threadpool(affinity_mode: int, nthreads: int) -> None:
    """Set the number of threads parallel kernels use (TVM's ``runtime.config_threadpool``).

    ``affinity_mode`` is TVM's (1 big cores, -1 little, 0 default, -2 specified CPUs): kiln
    does not pin threads, so it only checks it; ``nthreads`` 0 or less returns to the default
    (``KILN_NUM_THREADS`` / ``TVM_NUM_THREADS``, else the CPU count), at most
    :data:`MAX_THREADS`.

    Example
    -------
    >>> config_threadpool(0, 1); num_threads()
    1
    >>> config_threadpool(0, 0)
    """
    if affinity_mode not in (-2, -1, 0, 1):
        raise TVMError(f"config_threadpool: affinity mode must be 1 (big), -1 (little), 0 "
                       f"(default) or -2 (specified CPUs), got {affinity_mode!r}")
    if isinstance(nthreads, bool) or not isinstance(nthreads, int):
        raise TVMError(f"config_threadpool: nthreads must be an int, got {nthreads!r}")
    if nthreads > MAX_THREADS:  # (the C int would also truncate 2**32 + 1 to 1 silently)
        raise TVMError(f"config_threadpool: nthreads must be at most {MAX_THREADS} (a parallel "
                       f"launch's team limit), got {nthreads}")
    load_runtime_lib().KilnRuntimeSetNumThreads(nthreads if nthreads > 0 else
                                                config.num_threads())


@contextlib.contextmanager
def hot() -> Iterator[None]:
    """Hold the pool hot for the body: idle workers poll for the next parallel kernel
    (bounded) instead of sleeping, so a run of many kernels pays no wake-up per kernel.
    Holds nest and may come from several threads."""
    hold = _lib().KilnRuntimePoolHold
    hold(1)
    try:
        yield
    finally:
        hold(0)


def pool_stats(reset: bool = False) -> dict[str, int]:
    """Counts since the process started (or the last ``reset``): ``launches`` that used the
    pool, launches run ``inline`` on the calling thread, ``worker_tasks`` run by workers,
    ``worker_sleeps`` (an idle worker went to sleep), ``join_sleeps`` (a caller slept waiting
    for workers), ``barrier_sleeps``, and ``wakes`` (futex wake calls for sleepers); and
    two gauges that ``reset`` leaves alone: ``workers_asleep`` now and ``workers`` started.

    Example
    -------
    >>> pool_stats(reset=True)["launches"] >= 0
    True
    """
    counts = (ctypes.c_uint64 * len(STAT_NAMES))()
    _lib().KilnRuntimePoolStats(counts, len(STAT_NAMES), int(bool(reset)))
    return dict(zip(STAT_NAMES, (int(c) for c in counts), strict=True))


register_func("runtime.config_threadpool", config_threadpool, override=True)
register_func("runtime.NumThreads", num_threads, override=True)
