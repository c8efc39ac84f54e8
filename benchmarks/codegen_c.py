"""Target ``c`` against ``llvm`` (and NumPy) on the vector patterns the C emitter must keep in
registers: a zero-padded copy, a 16-lane FMA block, a select on a bool buffer, conv1d and
max_pool2d from ``kiln.topi.x86``.

Each kernel is built once per target from the same schedule; the table gives the best time
per call over ``--repeat`` rounds (alternating targets) and the c / llvm ratio. NumPy runs the
same math as a reference point (``np.pad``, ``a * b + c``, ``np.where``; conv1d and the pool
use PyTorch when it is installed).

Run: ``python benchmarks/codegen_c.py [--repeat 5] [--number 50]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def padded_copy(lanes: int = 8, rows: int = 512, width: int = 510):
    """A zero padding of one element on each side, vectorized along the padded rows."""
    from kiln import te, tir

    data = te.placeholder((rows, width), name="data")
    padded = te.compute((rows + 2, width + 2), lambda i, j: tir.if_then_else(
        tir.all(i >= 1, i < rows + 1, j >= 1, j < width + 1), data[i - 1, j - 1],
        tir.const(0.0, "float32")), name="padded")
    sch = te.create_schedule(padded.op)
    _, inner = sch[padded].split(padded.op.axis[1], factor=lanes)
    sch[padded].vectorize(inner)
    inputs = [np.random.rand(rows, width).astype("float32")]
    return sch, [data, padded], inputs, lambda x: np.pad(x, 1)


def fma_block(lanes: int = 16, rows: int = 64, cols: int = 4096):
    """``a * b + c`` with 16-lane vectors (two AVX2 registers per vector)."""
    from kiln import te

    a, b, c = (te.placeholder((rows, cols), name=n) for n in "abc")
    out = te.compute((rows, cols), lambda i, j: a[i, j] * b[i, j] + c[i, j], name="out")
    sch = te.create_schedule(out.op)
    _, inner = sch[out].split(out.op.axis[1], factor=lanes)
    sch[out].vectorize(inner)
    inputs = [np.random.rand(rows, cols).astype("float32") for _ in range(3)]
    return sch, [a, b, c, out], inputs, lambda x, y, z: x * y + z


def bool_select(lanes: int = 8, size: int = 1 << 18):
    """``where(mask, a, 0)`` with the mask read from a bool buffer."""
    from kiln import te, tir

    mask = te.placeholder((size,), "bool", name="mask")
    a = te.placeholder((size,), name="a")
    out = te.compute((size,), lambda i: tir.Select(mask[i], a[i], tir.const(0.0, "float32")),
                     name="out")
    sch = te.create_schedule(out.op)
    _, inner = sch[out].split(out.op.axis[0], factor=lanes)
    sch[out].vectorize(inner)
    inputs = [np.random.rand(size) < 0.5, np.random.rand(size).astype("float32")]
    return sch, [mask, a, out], inputs, lambda m, x: np.where(m, x, np.float32(0))


def conv1d(target: str, channels: int = 64, width: int = 256, config: dict | None = None):
    """``topi.nn.conv1d`` (kernel 3, padding 1) with the x86 register-block schedule."""
    from kiln import te, topi
    from kiln.topi.x86 import conv1d as x86_conv1d

    data = te.placeholder((1, channels, width), name="data")
    weight = te.placeholder((channels, channels, 3), name="weight")
    out = topi.nn.conv1d(data, weight, 1, 1)
    cfg = config or x86_conv1d.default_config(target)
    sch = x86_conv1d.schedule_conv1d_ncw([out], cfg)
    inputs = [np.random.rand(1, channels, width).astype("float32"),
              np.random.rand(channels, channels, 3).astype("float32")]
    return sch, [data, weight, out], inputs, _torch_conv1d


def max_pool(target: str, channels: int = 64, size: int = 56):
    """3x3 max pool, stride 1, padding 1 (NCHW), scheduled by ``topi.x86.pool``."""
    from kiln import te
    from kiln.topi.x86 import pool as x86_pool

    data = te.placeholder((1, channels, size, size), name="data")
    out = x86_pool.pool(data, (3, 3), 1, 1, 1, "max")
    sch = x86_pool.schedule_pool([out], "NCHW")
    inputs = [np.random.rand(1, channels, size, size).astype("float32")]
    return sch, [data, out], inputs, _torch_max_pool


def _torch_conv1d(x, w):
    import torch

    return torch.nn.functional.conv1d(torch.from_numpy(x), torch.from_numpy(w),
                                      padding=1).numpy()


def _torch_max_pool(x):
    import torch

    return torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 1, 1).numpy()


def _time(fn, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def run_case(name: str, make, repeat: int, number: int) -> tuple[str, float, float, float]:
    """Best seconds per call of c, llvm and the NumPy/PyTorch reference, results checked."""
    import kiln

    runners, reference = {}, None
    for target in ("c", "llvm"):
        sch, args, inputs, ref = make(target)
        mod = kiln.build(sch, args, target=target, name="kernel")
        nd_inputs = [kiln.nd.array(x) for x in inputs]
        out = kiln.nd.empty([int(d) for d in args[-1].shape], args[-1].dtype)
        mod["kernel"](*nd_inputs, out)
        expected = ref(*inputs)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
        runners[target] = (lambda m=mod, a=(*nd_inputs, out): m["kernel"](*a))
        reference = (lambda f=ref, a=inputs: f(*a))
    runners["reference"] = reference
    best = {key: float("inf") for key in runners}
    for _ in range(repeat):
        for key, fn in runners.items():
            best[key] = min(best[key], _time(fn, number))
    return name, best["c"], best["llvm"], best["reference"]


CASES = {
    "padded copy 512x510 (8 lanes)": lambda target: padded_copy(),
    "padded copy 512x510 (16 lanes)": lambda target: padded_copy(lanes=16),
    "FMA 64x4096 (16 lanes)": lambda target: fma_block(),
    "bool select 256K (8 lanes)": lambda target: bool_select(),
    "bool select 256K (16 lanes)": lambda target: bool_select(lanes=16),
    "conv1d 64x256 k3 (default block)": lambda target: conv1d(target),
    "conv1d 64x256 k3 (4x16 block)": lambda target: conv1d(target,
                                                          config={"oc_bn": 4, "tile_ow": 16}),
    "max_pool 3x3 64x56x56": lambda target: max_pool(target),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=50)
    opts = parser.parse_args()
    print(f"{'kernel':36s} {'c ms':>8s} {'llvm ms':>8s} {'ref ms':>8s} {'c/llvm':>7s}")
    for name, make in CASES.items():
        _, c_time, llvm_time, ref_time = run_case(name, make, opts.repeat, opts.number)
        print(f"{name:36s} {c_time * 1e3:8.3f} {llvm_time * 1e3:8.3f} {ref_time * 1e3:8.3f} "
              f"{c_time / llvm_time:7.2f}")


if __name__ == "__main__":
    main()
