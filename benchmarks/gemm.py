"""GEMM benchmark: a scheduled float32 1024x1024x1024 matmul built with te vs NumPy (OpenBLAS).

The schedule follows TVM's "How to optimize GEMM on CPU": B is packed into ``[N/bn, K, bn]``
panels so the inner loop reads it contiguously; C is computed in ``mb x bn`` tiles through a
local accumulator (``cache_write``) that lives in registers; the reduction is split by 4 and
unrolled; the tile's columns are vectorized 8 lanes at a time (one AVX2 register); the outer
row loop and the packing run in parallel. Both code generators (c, llvm) build the same
schedule; each is timed against NumPy in the same run, alternating, best of ``--repeat``.

Run: ``python benchmarks/gemm.py [--threads 2] [--repeat 15] [--bn 16] [--mb 4]``
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def machine_name() -> str:
    """The CPU model from ``lscpu`` (or /proc/cpuinfo)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def gemm_schedule(size: int, bn: int, mb: int, vector: int = 8, kfactor: int = 4):
    """The te program and schedule; returns ``(schedule, [A, B, C])``."""
    import kiln as tvm
    from kiln import te

    M = K = N = size
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    packed_b = te.compute((N // bn, K, bn), lambda x, y, z: B[y, x * bn + z], name="packedB")
    C = te.compute(
        (M, N),
        lambda i, j: te.sum(A[i, k] * packed_b[j // bn, k, tvm.tir.indexmod(j, bn)], axis=k),
        name="C",
    )
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], mb, bn)
    s[CC].compute_at(s[C], no)
    mc, nc = s[CC].op.axis
    (kaxis,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(kaxis, factor=kfactor)
    nco, nci = s[CC].split(nc, factor=vector)
    s[CC].reorder(ko, ki, mc, nco, nci)
    s[CC].vectorize(nci)
    s[CC].unroll(nco)
    s[CC].unroll(mc)
    s[CC].unroll(ki)
    _, nii = s[C].split(ni, factor=vector)
    s[C].vectorize(nii)
    x, _, z = s[packed_b].op.axis
    s[packed_b].vectorize(z)
    s[packed_b].parallel(x)
    s[C].parallel(mo)
    return s, [A, B, C]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--bn", type=int, default=16)
    parser.add_argument("--mb", type=int, default=4)
    parser.add_argument("--targets", default="c,llvm")
    opts = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "KILN_NUM_THREADS"):
        os.environ[var] = str(opts.threads)
    # Idle OpenMP workers sleep instead of spinning: on a shared, oversubscribed machine a
    # spinning worker steals the core its partner needs and a 1 ms kernel takes a scheduler
    # quantum (10-20x slower). Set OMP_WAIT_POLICY=active to measure spinning instead.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    import numpy as np

    import kiln as tvm

    size = opts.size
    rng = np.random.default_rng(0)
    a_np = rng.random((size, size), dtype=np.float32)
    b_np = rng.random((size, size), dtype=np.float32)
    expected = a_np @ b_np
    a, b = tvm.nd.array(a_np), tvm.nd.array(b_np)
    c = tvm.nd.array(np.zeros((size, size), np.float32))
    flops = 2.0 * size ** 3

    print(f"machine: {machine_name()}, threads: {opts.threads}, "
          f"matmul {size}x{size}x{size} float32, tile {opts.mb}x{opts.bn}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    kernels = {}
    for target in opts.targets.split(","):
        s, args = gemm_schedule(size, opts.bn, opts.mb)
        func = tvm.build(s, args, target=target, name="gemm")["gemm"]
        func(a, b, c)
        np.testing.assert_allclose(c.numpy(), expected, rtol=1e-3)
        kernels[target] = func

    best = {name: float("inf") for name in ["numpy", *kernels]}
    for _ in range(opts.repeat):
        start = time.perf_counter()
        a_np @ b_np
        best["numpy"] = min(best["numpy"], time.perf_counter() - start)
        for name, func in kernels.items():
            start = time.perf_counter()
            func(a, b, c)
            best[name] = min(best[name], time.perf_counter() - start)
    numpy_gflops = flops / best["numpy"] / 1e9
    print(f"numpy (OpenBLAS): {numpy_gflops:7.1f} GFLOP/s")
    for name in kernels:
        gflops = flops / best[name] / 1e9
        verdict = "ok" if gflops >= 0.7 * numpy_gflops else "below the 70% goal"
        print(f"kiln {name:>4}:        {gflops:7.1f} GFLOP/s  "
              f"ratio {gflops / numpy_gflops:.2f} of numpy ({verdict})")


if __name__ == "__main__":
    sys.exit(main())
