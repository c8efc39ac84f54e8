"""Elementwise benchmark: fused ``exp(a) * b + c`` on 1M float32 values, kiln vs NumPy; then
``exp``/``tanh``/``erf`` against ``fast_exp``/``fast_tanh``/``fast_erf``, kiln vs NumPy and
PyTorch.

The te schedule splits the single axis into chunks of 8 lanes, vectorizes the lanes and runs
the chunks in parallel; kiln fuses the three operations into one pass over memory while
NumPy makes three. Both code generators are timed against NumPy in the same run,
alternating, best of ``--repeat``. The fast-math table times each exact op and its fast twin
(same schedule) per target, next to NumPy (no erf: ``math.erf`` is per element, so "-") and
PyTorch (``--threads`` threads).

Run: ``python benchmarks/elementwise.py [--threads 2] [--size 1048576] [--targets c,llvm]``
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


def unary_schedule(size: int, op_name: str, vector: int = 8):
    """``topi.<op_name>(A)`` scheduled like :func:`fused_schedule`."""
    from kiln import te, topi

    A = te.placeholder((size,), name="A")
    D = getattr(topi, op_name)(A)
    s = te.create_schedule(D.op)
    outer, lanes = s[D].split(D.op.axis[0], factor=vector)
    s[D].vectorize(lanes)
    s[D].parallel(outer)
    return s, [A, D]


def best_times(runs: dict, repeat: int) -> dict:
    """Best seconds per call of each runner, timed in alternating rounds."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeat):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def fast_math_table(opts, a_np) -> None:
    import math

    import numpy as np
    import torch

    import kiln as tvm

    torch.set_num_threads(opts.threads)
    a, t = tvm.nd.array(a_np), torch.from_numpy(a_np)
    out = tvm.nd.array(np.zeros_like(a_np))
    references = {"exp": (np.exp, torch.exp), "tanh": (np.tanh, torch.tanh),
                  "erf": (None, torch.erf)}
    print(f"\n{'op':6s} {'target':6s} {'exact ms':>9s} {'fast ms':>9s} {'fast/exact':>10s} "
          f"{'numpy ms':>9s} {'torch ms':>9s}")
    for op_name, (np_fn, torch_fn) in references.items():
        want = np.vectorize(math.erf)(a_np) if np_fn is None else np_fn(a_np)
        for target in opts.targets.split(","):
            funcs = {}
            for name in (op_name, "fast_" + op_name):
                s, args = unary_schedule(opts.size, name)
                funcs[name] = tvm.build(s, args, target=target, name=f"k_{name}")[f"k_{name}"]
                funcs[name](a, out)
                np.testing.assert_allclose(out.numpy(), want, rtol=2e-6, atol=2e-6)
            runs = {name: (lambda f=f: f(a, out)) for name, f in funcs.items()}
            runs["torch"] = lambda fn=torch_fn: fn(t)
            if np_fn is not None:
                runs["numpy"] = lambda fn=np_fn: fn(a_np)
            best = best_times(runs, opts.repeat)
            exact, fast = best[op_name], best["fast_" + op_name]
            numpy_ms = f"{best['numpy'] * 1e3:9.3f}" if "numpy" in best else f"{'-':>9s}"
            print(f"{op_name:6s} {target:6s} {exact * 1e3:9.3f} {fast * 1e3:9.3f} "
                  f"{fast / exact:10.2f} {numpy_ms} {best['torch'] * 1e3:9.3f}", flush=True)


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
    fast_math_table(opts, a_np * 3)


if __name__ == "__main__":
    sys.exit(main())
