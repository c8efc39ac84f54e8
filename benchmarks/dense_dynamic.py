"""x86 dense with a run-time row count vs the static kernel of the same shape.

Builds ``relu(x @ W.T + b)`` (K=256 -> N=1024, an LSTM's input projection) once with a
symbolic row count and once per static row count, then times them interleaved in one process
(CPU time, min and median of ``--rounds`` rounds) and prints dynamic / static per row count.

    python benchmarks/dense_dynamic.py --rows 1,2,3,5,8,32,100 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kiln  # noqa: E402
from kiln import te, topi  # noqa: E402
from kiln.topi.x86 import dense as x86_dense  # noqa: E402


def _kernel(rows, k: int, n: int, target: str):
    x = te.placeholder((rows, k), name="x")
    wp = te.placeholder((n // 16, k, 16), name="wp")
    b = te.placeholder((n,), name="b")
    y = topi.nn.relu(x86_dense.dense_packed_weight(x, wp, b))
    sch = x86_dense.schedule_dense_pack([y])
    return kiln.build(sch, [x, wp, b, y], target=target)


def _per_call(fn, args, number: int) -> float:
    start = time.process_time()
    for _ in range(number):
        fn(*args)
    return (time.process_time() - start) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,3,5,8,32,100")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    k, n = args.k, args.n
    dynamic = _kernel(te.var("m", "int64"), k, n, args.target)
    static = {m: _kernel(m, k, n, args.target) for m in rows}
    rng = np.random.default_rng(0)
    wp = kiln.nd.array(rng.standard_normal((n // 16, k, 16)).astype("float32"))
    b = kiln.nd.array(rng.standard_normal(n).astype("float32"))
    print(f"{'rows':>5} {'static us':>10} {'dynamic us':>11} {'ratio min':>9} {'ratio med':>9}")
    for m in rows:
        x = kiln.nd.array(rng.standard_normal((m, k)).astype("float32"))
        out = kiln.nd.empty((m, n), "float32")
        number = max(20, 4000 // m)
        fns = {"static": static[m], "dynamic": dynamic}
        times = {"static": [], "dynamic": []}
        for _ in range(args.rounds):
            for key, mod in fns.items():
                times[key].append(_per_call(mod, (x, wp, b, out), number))
        ratios = [d / s for d, s in zip(times["dynamic"], times["static"])]
        print(f"{m:>5} {min(times['static']):>10.1f} {min(times['dynamic']):>11.1f} "
              f"{min(times['dynamic']) / min(times['static']):>9.3f} "
              f"{statistics.median(ratios):>9.3f}")


if __name__ == "__main__":
    main()
