"""Cold compile of benchmarks/jit.py's MLP training step: kiln.jit vs jax.jit, CPU and wall.

Each round is a fresh Python process (so nothing is cached in memory) with an empty
``KILN_CACHE_DIR``; both libraries are warmed up by a trivial function first, then each
compiles the step once, kiln and JAX in alternating order. CPU time is the whole process's
(kiln's LLVM threads and XLA's threads included) and its child processes' (``ld``, ``gcc``);
``llvm`` is the CPU kiln's LLVM threads spent. Prints each round and the min/median of
the ratios; CPU ratios are the stable ones on a shared machine.

Run from the repository root: ``PYTHONPATH=. python benchmarks/jit_compile.py --rounds 5``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_ROUND = r"""
import json, os, sys, tempfile, time
import numpy as np
sys.path.insert(0, {benchmarks!r})
import kiln
from jit import mlp_step
from kiln.target.llvm_toolchain import llvm_thread_seconds
import jax, jax.numpy as jnp

@jax.jit
def jstep(*arrays):  # benchmarks/jit.py's mlp_step in JAX
    params, (x, y) = arrays[:4], arrays[4:]
    loss = lambda p: jnp.mean((jnp.tanh(x @ p[0] + p[1]) @ p[2] + p[3] - y) ** 2)
    return tuple(p - 0.01 * g for p, g in zip(params, jax.grad(loss)(params)))

rng = np.random.default_rng(0)
args = ((rng.standard_normal((784, 256)) * 0.05).astype("float32"), np.zeros(256, "float32"),
        (rng.standard_normal((256, 10)) * 0.05).astype("float32"), np.zeros(10, "float32"),
        rng.standard_normal((64, 784)).astype("float32"),
        rng.standard_normal((64, 10)).astype("float32"))
def cpu_time():  # this process's and its children's (ld, gcc) CPU seconds
    t = os.times()
    return time.process_time() + t.children_user + t.children_system

out = {{}}
with tempfile.TemporaryDirectory() as cache:
    os.environ["KILN_CACHE_DIR"] = cache
    kiln.jit(lambda a: np.tanh(a) + 1.0)(np.ones(3, "float32"))
    jax.block_until_ready(jax.jit(lambda a: jnp.tanh(a) + 1.0)(np.ones(3, "float32")))
    for who in {order!r}:
        cpu, wall, llvm = cpu_time(), time.perf_counter(), llvm_thread_seconds()
        if who == "k":
            got = kiln.jit(mlp_step)(*args)
            out["llvm"] = llvm_thread_seconds() - llvm
        else:
            ref = jax.block_until_ready(jstep(*args))
        out[who + "_cpu"] = cpu_time() - cpu
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
        with tempfile.TemporaryDirectory() as folder:  # kiln.jit reads functions' source
            path = os.path.join(folder, "jit_compile_round.py")
            with open(path, "w") as f:
                f.write(script)
            done = subprocess.run([sys.executable, path], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"round {index} failed:\n{done.stderr[-3000:]}")
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
