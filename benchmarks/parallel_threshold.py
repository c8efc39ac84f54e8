"""Where a parallel launch starts to pay: an elementwise kernel (``exp(x) * y + x``) over
n elements, built with its loop parallel (``tir.parallel_min_work`` = 1) and serial (= 2**62),
timed side by side at the configured thread count, with NumPy as a reference.

The crossover n (parallel faster than serial) is what
:data:`kiln.topi.x86.parallel.DEFAULT_PARALLEL_MIN_WORK` should sit near.

Run: ``KILN_NUM_THREADS=2 python benchmarks/parallel_threshold.py [--repeat 200]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import kiln
from kiln import te, topi
from kiln.ir.transform import PassContext
from kiln.topi.x86 import schedule_injective

SIZES = [1024, 4096, 16384, 32768, 65536, 262144]


def build(n: int, min_work: int):
    x = te.placeholder((n,), name="x")
    y = te.placeholder((n,), name="y")
    out = topi.add(topi.multiply(topi.exp(x), y), x)
    with PassContext(config={"tir.parallel_min_work": min_work}):
        sch = schedule_injective([out])
        return kiln.build(sch, [x, y, out], target="llvm", name="kernel")["kernel"]


def best_us(fn, args, repeat: int) -> float:
    fn(*args)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    opts = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>8} {'serial us':>10} {'parallel us':>12} {'numpy us':>9}")
    for n in SIZES:
        a, b = rng.standard_normal((2, n)).astype("float32")
        args = [kiln.nd.array(a), kiln.nd.array(b), kiln.nd.empty((n,), "float32")]
        serial = best_us(build(n, 1 << 62), args, opts.repeat)
        parallel = best_us(build(n, 1), args, opts.repeat)
        ref = best_us(lambda p, q: np.exp(p) * q + p, [a, b], opts.repeat)
        print(f"{n:>8} {serial:>10.1f} {parallel:>12.1f} {ref:>9.1f}")


if __name__ == "__main__":
    main()
