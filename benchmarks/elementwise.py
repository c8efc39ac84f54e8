"""Elementwise benchmark: fused ``exp(a) * b + c`` on 1M float32 values, kiln vs NumPy.

The te schedule splits the single axis into chunks of 8 lanes, vectorizes the lanes and runs
the chunks in parallel; kiln fuses the three operations into one pass over memory while
NumPy makes three. Both code generators are timed against NumPy in the same run,
alternating, best of ``--repeat``.

Run: ``python benchmarks/elementwise.py [--threads 2] [--size 1048576]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def fused_schedule(size: int, vector: int = 8):
    """``D = exp(A) * B + C`` with the axis split into vector lanes and parallel chunks."""
    from kiln import te

    A = te.placeholder((size,), name="A")
    B = te.placeholder((size,), name="B")
    C = te.placeholder((size,), name="C")
    D = te.compute((size,), lambda i: te.exp(A[i]) * B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    outer, lanes = s[D].split(D.op.axis[0], factor=vector)
    s[D].vectorize(lanes)
    s[D].parallel(outer)
    return s, [A, B, C, D]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--targets", default="c,llvm")
    opts = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KILN_NUM_THREADS"):
        os.environ[var] = str(opts.threads)
    # Idle OpenMP workers sleep instead of spinning: on a shared, oversubscribed machine a
    # spinning worker steals the core its partner needs and a 1 ms kernel takes a scheduler
    # quantum (10-20x slower). Set OMP_WAIT_POLICY=active to measure spinning instead.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    import numpy as np

    import kiln as tvm

    rng = np.random.default_rng(0)
    a_np, b_np, c_np = (rng.standard_normal(opts.size).astype(np.float32) for _ in range(3))
    expected = np.exp(a_np) * b_np + c_np
    a, b, c = (tvm.nd.array(x) for x in (a_np, b_np, c_np))
    d = tvm.nd.array(np.zeros(opts.size, np.float32))

    kernels = {}
    for target in opts.targets.split(","):
        s, args = fused_schedule(opts.size)
        func = tvm.build(s, args, target=target, name="fused")["fused"]
        func(a, b, c, d)
        np.testing.assert_allclose(d.numpy(), expected, rtol=1e-5, atol=1e-6)
        kernels[target] = func

    best = {name: float("inf") for name in ["numpy", *kernels]}
    for _ in range(opts.repeat):
        start = time.perf_counter()
        np.exp(a_np) * b_np + c_np
        best["numpy"] = min(best["numpy"], time.perf_counter() - start)
        for name, func in kernels.items():
            start = time.perf_counter()
            func(a, b, c, d)
            best[name] = min(best[name], time.perf_counter() - start)
    print(f"exp(a) * b + c on {opts.size} float32, threads: {opts.threads}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"numpy:     {best['numpy'] * 1e3:8.3f} ms")
    for name in kernels:
        ratio = best["numpy"] / best[name]
        verdict = "ok" if ratio >= 1.0 else "slower than numpy"
        print(f"kiln {name:>4}: {best[name] * 1e3:8.3f} ms  "
              f"({ratio:.2f}x numpy's speed, {verdict})")


if __name__ == "__main__":
    sys.exit(main())
