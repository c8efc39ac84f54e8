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
one is symbolic).

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

# Elements below which a kernel runs on the calling thread. On a 2-core Zen 3
# (benchmarks/parallel_threshold.py) an elementwise kernel takes ~1 ns per element on one
# thread and a 2-thread launch adds 8-10 us when the second core is free (60-190 us when the
# box is loaded), so splitting pays only from a few tens of thousands of elements.
DEFAULT_PARALLEL_MIN_WORK = 32768


def parallel_min_work() -> int:
    """The work (elements) from which a loop runs in parallel: the current PassContext's
    ``"tir.parallel_min_work"``, else :data:`DEFAULT_PARALLEL_MIN_WORK`.

    Example
    -------
    >>> parallel_min_work()
    32768
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
