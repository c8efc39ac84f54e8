"""Soak test: does memory grow over many runs and executor creations (graph and VM)?

For each executor the same small model (dense + bias + relu, softmax, a reshape) runs
``--runs`` times with fresh inputs, then ``--creations`` executors are created, run once
and dropped. The process's resident set size (RSS, from /proc/self/statm) is sampled
``--samples`` times per phase. A phase's growth is the RSS at its end minus the RSS after
its warm-up (the first tenth of the phase, where caches and allocator pools fill); leaking
one byte per iteration would show as ``iterations`` bytes, so the table also gives growth
per iteration, and the growth over the second half alone: a leak keeps growing there, while
allocator pools that settle late (a plateau) do not. Results are checked against NumPy on
every 1000th run.

Run: ``nice -n 19 python benchmarks/soak.py`` (100,000 runs, 10,000 creations per executor;
``--runs 10000 --creations 1000`` for a quicker look).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import numpy as np

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident set size."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def build_model():
    """(mod, params, inputs, numpy reference) of a small two-output model."""
    import kiln
    from kiln import relay

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 32)).astype("float32")
    bias = rng.standard_normal(64).astype("float32")
    x = relay.var("x", shape=(8, 32), dtype="float32")
    w, b = relay.var("w", shape=weight.shape), relay.var("b", shape=bias.shape)
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b))
    out = relay.Tuple([relay.nn.softmax(y), relay.reshape(y, (16, 32))])
    mod = kiln.IRModule.from_expr(relay.Function([x, w, b], out))

    def reference(data: np.ndarray) -> np.ndarray:
        hidden = np.maximum(data @ weight.T + bias, 0)
        e = np.exp(hidden - hidden.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return mod, {"w": weight, "b": bias}, reference


class GraphSubject:
    """The graph executor: one factory module, GraphModules made from it."""

    name = "graph"

    def __init__(self, mod, params) -> None:
        import kiln
        from kiln import relay

        with kiln.transform.PassContext(opt_level=3):
            self.factory = relay.build(mod, target="c", params=params)
        self.device = kiln.cpu(0)

    def create(self):
        from kiln.contrib import graph_executor

        return graph_executor.GraphModule(self.factory["default"](self.device))

    @staticmethod
    def run(executor, data: np.ndarray) -> np.ndarray:
        executor.set_input("x", data)
        executor.run()
        return executor.get_output(0).numpy()


class VMSubject:
    """The VM: one compiled Executable, VirtualMachines made from it."""

    name = "vm"

    def __init__(self, mod, params) -> None:
        import kiln
        from kiln import relay

        with kiln.transform.PassContext(opt_level=3):
            self.exe = relay.vm.compile(mod, target="c", params=params)
        self.device = kiln.cpu(0)

    def create(self):
        from kiln.runtime.vm import VirtualMachine

        return VirtualMachine(self.exe, self.device)

    @staticmethod
    def run(executor, data: np.ndarray) -> np.ndarray:
        return executor.invoke("main", data)[0].numpy()


def soak(label: str, iterations: int, step, samples: int) -> dict:
    """Run ``step(i)`` ``iterations`` times, sampling RSS; growth after the warm-up tenth."""
    every = max(1, iterations // samples)
    warm_up = max(1, iterations // 10)
    trace = []
    start = time.perf_counter()
    for i in range(iterations):
        step(i)
        if i == warm_up - 1 or (i + 1) % every == 0:
            gc.collect()
            trace.append((i + 1, rss_bytes()))
    seconds = time.perf_counter() - start
    after_warm_up = next(rss for count, rss in trace if count >= warm_up)
    halfway = next(rss for count, rss in trace if count >= iterations // 2)
    growth = trace[-1][1] - after_warm_up
    return {"phase": label, "iterations": iterations, "seconds": seconds,
            "rss_mb": trace[-1][1] / 2**20, "growth_kb": growth / 1024,
            "bytes_per_iter": growth / max(1, iterations - warm_up),
            "last_half_kb": (trace[-1][1] - halfway) / 1024,
            "peak_growth_kb": (max(r for _, r in trace) - after_warm_up) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--creations", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--executors", default="graph,vm")
    args = parser.parse_args()

    mod, params, reference = build_model()
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((8, 32)).astype("float32") for _ in range(16)]
    subjects = {"graph": GraphSubject, "vm": VMSubject}
    results = []
    for name in args.executors.split(","):
        subject = subjects[name](mod, params)
        executor = subject.create()

        def run_once(i: int, executor=executor, subject=subject) -> None:
            data = inputs[i % len(inputs)]
            out = subject.run(executor, data)
            if i % 1000 == 0:
                np.testing.assert_allclose(out, reference(data), rtol=1e-4, atol=1e-6)

        def create_once(i: int, subject=subject) -> None:
            subject.run(subject.create(), inputs[i % len(inputs)])

        results.append(soak(f"{name}: run", args.runs, run_once, args.samples))
        results.append(soak(f"{name}: create+run+drop", args.creations, create_once,
                            args.samples))
    print(f"{'phase':24s} {'iterations':>10s} {'seconds':>8s} {'RSS MB':>8s} "
          f"{'growth KB':>10s} {'B/iter':>8s} {'peak KB':>8s} {'2nd half KB':>11s}")
    for r in results:
        print(f"{r['phase']:24s} {r['iterations']:>10d} {r['seconds']:>8.1f} {r['rss_mb']:>8.1f} "
              f"{r['growth_kb']:>10.0f} {r['bytes_per_iter']:>8.2f} {r['peak_growth_kb']:>8.0f} "
              f"{r['last_half_kb']:>11.0f}")


if __name__ == "__main__":
    main()
