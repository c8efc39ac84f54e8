"""When a loop is worth running in parallel: one rule for the x86 schedules.

A parallel loop costs a launch (waking the worker threads and joining them): tens of
microseconds on a loaded machine, more than a kernel over a few thousand elements takes on
one thread. The injective, reduction, softmax/norm, pool and fallback schedules therefore
mark a loop parallel only when the kernel's *work* — elements it computes or reads,
counted by the schedule — reaches a threshold, and always when the work is not known at
schedule time (symbolic extents).

Entry points: :func:`parallel_min_work` (the threshold: PassContext config
``"tir.parallel_min_work"``, default :data:`DEFAULT_PARALLEL_MIN_WORK`),
:func:`worth_parallel` (the rule), :func:`static_work` (a product of extents, ``None`` when
one is symbolic), and :data:`DEFAULT_PARALLEL_MIN_FLOPS`, the default of the compute-bound
schedules' ``parallel_min_flops`` knob (dense, conv2d, depthwise, recurrent cells).

Example
-------
>>> from kiln.ir.transform import PassContext
>>> worth_parallel(1024), worth_parallel(1 << 20), worth_parallel(None)
(False, True, True)
>>> with PassContext(config={"tir.parallel_min_work": 0}):
...     worth_parallel(1024)
True
"""

from __future__ import annotations

from typing import Any

from kiln.tir import expr as _e

CONFIG_KEY = "tir.parallel_min_work"

# Elements below which a kernel runs on the calling thread. The executors hold the thread pool
# hot for a whole run (kiln.runtime.thread_pool.hot), so a launch finds its worker polling
# and costs ~1 us instead of a futex wake-up (~8 us, and the worker arrives tens of us late).
# Measured on 2-core Zen 4 (benchmarks/parallel_threshold.py, exp(x) * y + x, best of 300):
# 4096 elements 6.4 -> 6.1 us, 8192 9.4 -> 7.7, 16384 15.5 -> 10.8, 32768 28.0 -> 16.9;
# cheaper (memory-bound) elementwise kernels gain less, so the bar sits at 16384.
DEFAULT_PARALLEL_MIN_WORK = 16384

# Flops below which a compute-bound kernel (dense, conv, depthwise, recurrent cell) runs on
# one thread. With the pool held hot a GEMV gains from the second thread from about a quarter
# of a megaflop (2-core Zen 4, prepacked weight, best of 300: 1x256x512 8.4 -> 7.3 us,
# 1x256x1024 14.6 -> 10.3, 1x784x512 21.1 -> 13.9; 1x256x256 5.9 -> 5.6).
DEFAULT_PARALLEL_MIN_FLOPS = 250_000


def parallel_min_work() -> int:
    """The work (elements) from which a loop runs in parallel: the current PassContext's
    ``"tir.parallel_min_work"``, else :data:`DEFAULT_PARALLEL_MIN_WORK`.

    Example
    -------
    >>> parallel_min_work()
    16384
    """
    from kiln.ir.transform import PassContext

    config = PassContext.current().config or {}
    return int(config.get(CONFIG_KEY, DEFAULT_PARALLEL_MIN_WORK))


def worth_parallel(work: int | None) -> bool:
    """Whether a kernel doing ``work`` elements should run its outer loop in parallel;
    ``None`` (symbolic, unknown at schedule time) keeps it parallel.

    Example
    -------
    >>> worth_parallel(64 * 1024)
    True
    """
    return work is None or work >= parallel_min_work()


def static_work(extents: Any) -> int | None:
    """The product of ``extents`` (ints or IntImm), ``None`` when one is symbolic.

    Example
    -------
    >>> static_work([4, 8, 16])
    512
    """
    total = 1
    for extent in extents:
        if isinstance(extent, _e.IntImm):
            extent = int(extent.value)
        if not isinstance(extent, int):
            return None
        total *= extent
    return total
