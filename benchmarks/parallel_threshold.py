"""Where a parallel launch starts to pay: an elementwise kernel (``exp(x) * y + x``) over
n elements, built with its loop parallel (``tir.parallel_min_work`` = 1) and serial (= 2**62),
timed side by side at the configured thread count, with NumPy as a reference. Each column
is ``best/median`` microseconds over ``--repeat`` calls: the median shows what a launch
costs when it waits for a worker thread to wake up, which the best time hides. The parallel
kernel runs twice: with the pool cold (a lone kernel call: the worker sleeps between calls
once the Python loop's gaps pass its spin) and held hot (``thread_pool.hot()``, what the
graph executor and the VM do for a whole run).

The crossover n (parallel faster than serial) is what
:data:`kiln.topi.x86.parallel.DEFAULT_PARALLEL_MIN_WORK` should sit near.

Run: ``KILN_NUM_THREADS=2 python benchmarks/parallel_threshold.py [--repeat 200]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# the checkout this script sits in, not whichever kiln the environment installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kiln  # noqa: E402
from kiln import te, topi  # noqa: E402
from kiln.ir.transform import PassContext  # noqa: E402
from kiln.runtime import config, thread_pool  # noqa: E402
from kiln.topi.x86 import schedule_injective  # noqa: E402

SIZES = [64, 1024, 4096, 8192, 16384, 32768, 65536, 262144]


def build(n: int, min_work: int):
    x = te.placeholder((n,), name="x")
    y = te.placeholder((n,), name="y")
    out = topi.add(topi.multiply(topi.exp(x), y), x)
    with PassContext(config={"tir.parallel_min_work": min_work}):
        sch = schedule_injective([out])
        return kiln.build(sch, [x, y, out], target="llvm", name="kernel")["kernel"]


def time_us(fn, args, repeat: int) -> tuple[float, float]:
    """(best, median) wall time of ``fn(*args)`` in microseconds, after one warm-up call."""
    fn(*args)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times) * 1e6, float(np.median(times)) * 1e6


def cell(times: tuple[float, float]) -> str:
    return f"{times[0]:.1f}/{times[1]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    opts = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"KILN_NUM_THREADS={config.num_threads()}, load {os.getloadavg()[0]:.1f}; "
          f"best/median us of {opts.repeat} calls")
    print(f"{'n':>8} {'serial':>13} {'parallel':>13} {'held':>13} {'numpy':>13}")
    for n in SIZES:
        a, b = rng.standard_normal((2, n)).astype("float32")
        args = [kiln.nd.array(a), kiln.nd.array(b), kiln.nd.empty((n,), "float32")]
        serial = time_us(build(n, 1 << 62), args, opts.repeat)
        kernel = build(n, 1)
        parallel = time_us(kernel, args, opts.repeat)
        with thread_pool.hot():
            held = time_us(kernel, args, opts.repeat)
        ref = time_us(lambda p, q: np.exp(p) * q + p, [a, b], opts.repeat)
        print(f"{n:>8} {cell(serial):>13} {cell(parallel):>13} {cell(held):>13} {cell(ref):>13}")

if __name__ == "__main__":
    main()
