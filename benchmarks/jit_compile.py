"""Cold compile of benchmarks/jit.py's MLP training step: kiln.jit vs jax.jit, CPU and wall.

Each round is a fresh Python process (so nothing is cached in memory) with an empty
``KILN_CACHE_DIR``; both libraries are warmed up by a trivial function first, then each
compiles the step once, kiln and JAX in alternating order. CPU time is the whole process's
(kiln's LLVM threads and XLA's threads included); ``llvm`` is the CPU kiln's LLVM threads
spent. Prints each round and the min/median of the ratios; CPU ratios are the stable ones
on a shared machine.

Run from the repository root: ``PYTHONPATH=. python benchmarks/jit_compile.py --rounds 5``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_ROUND = r"""
import json, os, sys, tempfile, time
import numpy as np
sys.path.insert(0, {benchmarks!r})
import kiln
from jit import mlp_step
from kiln.target.llvm_toolchain import llvm_thread_seconds
import jax, jax.numpy as jnp

def jloss(W1, b1, W2, b2, x, y):
    h = jnp.tanh(x @ W1 + b1)
    return jnp.mean((h @ W2 + b2 - y) ** 2)

@jax.jit
def jstep(W1, b1, W2, b2, x, y):
    g = jax.grad(jloss, argnums=(0, 1, 2, 3))(W1, b1, W2, b2, x, y)
    return (W1 - 0.01 * g[0], b1 - 0.01 * g[1], W2 - 0.01 * g[2], b2 - 0.01 * g[3])

rng = np.random.default_rng(0)
args = ((rng.standard_normal((784, 256)) * 0.05).astype("float32"), np.zeros(256, "float32"),
        (rng.standard_normal((256, 10)) * 0.05).astype("float32"), np.zeros(10, "float32"),
        rng.standard_normal((64, 784)).astype("float32"),
        rng.standard_normal((64, 10)).astype("float32"))
out = {{}}
with tempfile.TemporaryDirectory() as cache:
    os.environ["KILN_CACHE_DIR"] = cache
    kiln.jit(lambda a: np.tanh(a) + 1.0)(np.ones(3, "float32"))
    jax.block_until_ready(jax.jit(lambda a: jnp.tanh(a) + 1.0)(np.ones(3, "float32")))
    for who in {order!r}:
        cpu, wall, llvm = time.process_time(), time.perf_counter(), llvm_thread_seconds()
        if who == "k":
            got = kiln.jit(mlp_step)(*args)
            out["llvm"] = llvm_thread_seconds() - llvm
        else:
            ref = jax.block_until_ready(jstep(*args))
        out[who + "_cpu"] = time.process_time() - cpu
        out[who + "_wall"] = time.perf_counter() - wall
for a, r in zip(got, ref):
    np.testing.assert_allclose(a, np.asarray(r), rtol=1e-3, atol=1e-5)
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    benchmarks = os.path.dirname(os.path.abspath(__file__))
    ratios: dict[str, list[float]] = {"cpu": [], "wall": []}
    print("round  kiln cpu/wall ms (llvm threads cpu)   jax cpu/wall ms   ratio cpu/wall")
    for index in range(args.rounds):
        script = _ROUND.format(benchmarks=benchmarks, order="kj" if index % 2 == 0 else "jk")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        for clock in ratios:
            ratios[clock].append(r[f"k_{clock}"] / r[f"j_{clock}"])
        print(f"{index:5d}  {r['k_cpu'] * 1e3:7.0f} / {r['k_wall'] * 1e3:5.0f} "
              f"({r['llvm'] * 1e3:4.0f})            {r['j_cpu'] * 1e3:5.0f} / "
              f"{r['j_wall'] * 1e3:5.0f}       {ratios['cpu'][-1]:.2f} / {ratios['wall'][-1]:.2f}",
              flush=True)
    for clock, values in ratios.items():
        print(f"kiln.jit / jax.jit cold compile ({clock}): min {min(values):.2f}, "
              f"median {statistics.median(values):.2f} over {len(values)} rounds "
              "(goal <= 1.0)")


if __name__ == "__main__":
    main()
