"""kiln.jit against CPython, JAX (jax.jit, CPU) and PyTorch eager, in one run.

Rows:
- FinalVM dispatch: µs per executed instruction on the scalar loop (instructions counted).
- scalar loop ``while i < n: acc += i * i``: kiln.jit (Python backend, and FinalVM) vs the
  same function run by CPython undecorated.
- MLP 784-256-10, batch 64, one training step (loss + grad + SGD update): kiln.jit vs jax.jit
  vs PyTorch eager; compile (first call) time beside JAX's, both libraries warmed up by a
  trivial function first; kiln's with an empty cache and again with its build cache on disk.
- RNN cell (tanh, 64 hidden, batch 16) over 32 steps with a Python ``for``, and its grad: vs
  jax.jit of the same code.

Absolute times on shared machines are noise; the ratios (same run) are what to read.
Run: ``python benchmarks/jit.py [--repeat 20]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from kiln.jit import grad


def best(fn, repeat: int, number: int = 1, clock=time.perf_counter) -> float:
    """Best time per call (seconds) over ``repeat`` rounds of ``number`` calls."""
    times = []
    for _ in range(repeat):
        t = clock()
        for _ in range(number):
            fn()
        times.append((clock() - t) / number)
    return min(times)


# Single-threaded Python rows are timed in CPU time: on a shared machine wall time counts the
# other processes' turns too (measured 4x). Rows running kernels (threads) use wall time.
CPU = time.process_time


def scalar_loop(n):
    i = 0
    acc = 0
    while i < n:
        acc += i * i
        i += 1
    return acc


def tail_recursion(n, acc):
    if n == 0:
        return acc
    return tail_recursion(n - 1, acc + 1)


def mlp_loss(W1, b1, W2, b2, x, y):
    h = np.tanh(x @ W1 + b1)
    return np.mean((h @ W2 + b2 - y) ** 2)


def mlp_step(W1, b1, W2, b2, x, y):
    g = grad(mlp_loss, argnums=(0, 1, 2, 3))(W1, b1, W2, b2, x, y)
    lr = 0.01
    return (W1 - lr * g[0], b1 - lr * g[1], W2 - lr * g[2], b2 - lr * g[3])


def rnn(W, U, b, h, xs):
    for t in range(xs.shape[0]):
        h = np.tanh(h @ W + xs[t] @ U + b)
    return np.sum(h)


def bench_dispatch(repeat: int) -> list[tuple]:
    from kiln.jit import myia, standard_pipeline
    vm_fn = myia(scalar_loop, pipeline=standard_pipeline.configure(
        {"compile.backend": "finalvm"}))
    py_fn = myia(scalar_loop)
    n = 20_000
    vm_fn(n)
    py_fn(n)
    vm = vm_fn.cache[vm_fn.signature(n)].vm
    counter = _Counting(vm.code)
    vm.code = counter
    vm.run((n,))
    vm.code = list(counter)
    executed = counter.count
    t_vm = best(lambda: vm_fn(n), repeat, clock=CPU)
    t_py = best(lambda: py_fn(n), repeat, clock=CPU)
    t_cpy = best(lambda: scalar_loop(n), repeat, clock=CPU)
    t0 = CPU()
    assert vm_fn(1_000_000) == scalar_loop(1_000_000)
    t_million = CPU() - t0
    deep = myia(tail_recursion, pipeline=standard_pipeline.configure(
        {"compile.backend": "finalvm"}))
    t0 = CPU()
    assert deep(100_000, 0) == 100_000
    t_deep = CPU() - t0
    return [
        ("FinalVM dispatch (CPU µs/instruction)", t_vm / executed * 1e6, None,
         f"{executed / n:.0f} instructions per iteration"),
        ("FinalVM while loop, 1,000,000 iterations (CPU s)", t_million, None, "constant stack"),
        ("FinalVM tail recursion, depth 100,000 (CPU s)", t_deep, None, "constant stack"),
        ("scalar loop n=20000: kiln.jit (python backend) / CPython", t_py, t_cpy,
         "goal <= 2x"),
        ("scalar loop n=20000: kiln.jit (FinalVM) / CPython", t_vm, t_cpy, ""),
    ]


class _Counting(list):
    """An instruction list that counts fetches (the VM fetches each executed instruction)."""

    count = 0

    def __getitem__(self, i):
        self.count += 1
        return list.__getitem__(self, i)


def bench_mlp(repeat: int) -> list[tuple]:
    import os
    import tempfile

    import kiln
    from kiln.jit.segments import clear_segment_cache
    rng = np.random.default_rng(0)
    W1 = (rng.standard_normal((784, 256)) * 0.05).astype("float32")
    b1 = np.zeros(256, "float32")
    W2 = (rng.standard_normal((256, 10)) * 0.05).astype("float32")
    b2 = np.zeros(10, "float32")
    x = rng.standard_normal((64, 784)).astype("float32")
    y = rng.standard_normal((64, 10)).astype("float32")
    args = (W1, b1, W2, b2, x, y)
    # Both libraries imported and initialized by a trivial function first (jax's first jit
    # starts its CPU client; kiln imports its compiler lazily), so compile rows time compiling.
    # kiln's warm-up compiles in an empty cache of its own: a build found in the user's cache
    # would load without importing the lowering and LLVM (~0.1 s the MLP row then paid).
    saved = os.environ.get("KILN_CACHE_DIR")
    with tempfile.TemporaryDirectory() as warm_cache:
        os.environ["KILN_CACHE_DIR"] = warm_cache
        kiln.jit(lambda a: np.tanh(a) + 1.0)(np.ones(3, "float32"))
    # The first compile runs with an empty kernel cache (KILN_CACHE_DIR a fresh directory);
    # the second, of a new function object, finds the build on disk (as a later process).
    with tempfile.TemporaryDirectory() as cache:
        os.environ["KILN_CACHE_DIR"] = cache
        try:
            step = kiln.jit(mlp_step)
            t0, c0 = time.perf_counter(), time.process_time()
            out = step(*args)
            compile_kiln = time.perf_counter() - t0
            compile_kiln_cpu = time.process_time() - c0  # every thread's (LLVM's two too)
            clear_segment_cache()
            t0 = time.perf_counter()
            kiln.jit(mlp_step)(*args)
            compile_warm = time.perf_counter() - t0
        finally:
            if saved is None:
                del os.environ["KILN_CACHE_DIR"]
            else:
                os.environ["KILN_CACHE_DIR"] = saved
    rows = []
    t_kiln = best(lambda: step(*args), repeat, 5)
    try:
        import jax
        import jax.numpy as jnp

        def jloss(W1, b1, W2, b2, x, y):
            h = jnp.tanh(x @ W1 + b1)
            return jnp.mean((h @ W2 + b2 - y) ** 2)

        @jax.jit
        def jstep(W1, b1, W2, b2, x, y):
            g = jax.grad(jloss, argnums=(0, 1, 2, 3))(W1, b1, W2, b2, x, y)
            return (W1 - 0.01 * g[0], b1 - 0.01 * g[1], W2 - 0.01 * g[2], b2 - 0.01 * g[3])

        jax.block_until_ready(jax.jit(lambda a: jnp.tanh(a) + 1.0)(np.ones(3, "float32")))
        t0, c0 = time.perf_counter(), time.process_time()
        ref = jax.block_until_ready(jstep(*args))
        compile_jax = time.perf_counter() - t0
        compile_jax_cpu = time.process_time() - c0
        for a, r in zip(out, ref):
            np.testing.assert_allclose(a, np.asarray(r), rtol=1e-3, atol=1e-5)
        t_jax = best(lambda: jax.block_until_ready(jstep(*args)), repeat, 5)
        rows += [("MLP 784-256-10 b64 train step: kiln.jit / jax.jit", t_kiln, t_jax,
                  "goal <= 1.0"),
                 ("MLP compile (first call), empty kernel cache: kiln.jit / jax.jit",
                  compile_kiln, compile_jax, "goal <= 1.0"),
                 ("MLP compile CPU time (all threads), empty kernel cache: kiln / jax",
                  compile_kiln_cpu, compile_jax_cpu, ""),
                 ("MLP compile (first call), build cache on disk: kiln.jit / jax.jit",
                  compile_warm, compile_jax, "")]
    except ImportError:
        rows.append(("MLP train step: jax not installed", t_kiln, None, ""))
    try:
        import torch
        tw = [torch.tensor(a, requires_grad=i < 4) for i, a in enumerate(args)]

        def tstep():
            W1, b1, W2, b2, x, y = tw
            loss = ((torch.tanh(x @ W1 + b1) @ W2 + b2 - y) ** 2).mean()
            gs = torch.autograd.grad(loss, [W1, b1, W2, b2])
            with torch.no_grad():
                return [p - 0.01 * g for p, g in zip((W1, b1, W2, b2), gs)]

        t_torch = best(tstep, repeat, 5)
        rows.append(("MLP train step: kiln.jit / PyTorch eager", t_kiln, t_torch,
                     "goal <= 0.8"))
    except ImportError:
        rows.append(("MLP train step: torch not installed", t_kiln, None, ""))
    return rows


def bench_rnn(repeat: int) -> list[tuple]:
    from kiln.jit import myia
    rng = np.random.default_rng(1)
    W = (rng.standard_normal((64, 64)) * 0.1).astype("float32")
    U = (rng.standard_normal((32, 64)) * 0.1).astype("float32")
    b = np.zeros(64, "float32")
    h = np.zeros((16, 64), "float32")
    xs = rng.standard_normal((32, 16, 32)).astype("float32")
    args = (W, U, b, h, xs)
    fwd, bwd = myia(rnn), grad(rnn, argnums=(0, 1))
    fwd(*args)
    bwd(*args)
    t_fwd = best(lambda: fwd(*args), repeat)
    t_bwd = best(lambda: bwd(*args), repeat)
    try:
        import jax
        import jax.numpy as jnp

        def jrnn(W, U, b, h, xs):
            for t in range(xs.shape[0]):
                h = jnp.tanh(h @ W + xs[t] @ U + b)
            return jnp.sum(h)

        jf, jg = jax.jit(jrnn), jax.jit(jax.grad(jrnn, argnums=(0, 1)))
        np.testing.assert_allclose(fwd(*args), jf(*args), rtol=1e-4)
        jax.block_until_ready(jg(*args))
        t_jf = best(lambda: jax.block_until_ready(jf(*args)), repeat)
        t_jg = best(lambda: jax.block_until_ready(jg(*args)), repeat)
        return [("RNN 32 steps forward: kiln.jit / jax.jit", t_fwd, t_jf, "goal <= 1.0"),
                ("RNN 32 steps grad: kiln.jit / jax.jit", t_bwd, t_jg, "goal <= 1.0")]
    except ImportError:
        return [("RNN forward (jax not installed)", t_fwd, None, ""),
                ("RNN grad (jax not installed)", t_bwd, None, "")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--only", choices=["dispatch", "mlp", "rnn"], default=None)
    args = parser.parse_args()
    rows = []
    for name, fn in [("dispatch", bench_dispatch), ("mlp", bench_mlp), ("rnn", bench_rnn)]:
        if args.only in (None, name):
            rows += fn(args.repeat)
    print(f"{'benchmark':62s} {'kiln':>12s} {'other':>12s} {'ratio':>8s}  note")
    for name, a, b, note in rows:
        if b is None:
            print(f"{name:62s} {a:12.4g} {'':>12s} {'':>8s}  {note}")
        else:
            print(f"{name:62s} {a * 1e3:10.3f}ms {b * 1e3:10.3f}ms {a / b:8.2f}  {note}")


if __name__ == "__main__":
    main()
