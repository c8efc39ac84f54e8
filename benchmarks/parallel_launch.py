"""What a parallel launch costs, and how a model's 2-thread time spreads when the box is busy.

    python benchmarks/parallel_launch.py launch [--repeat 400]
    python benchmarks/parallel_launch.py load [--model cnn] [--loads 0,2,4] [--repeat 200]

``launch``: a hand-written lambda (16 chunks of ``work`` ~0.03 us items) launched after a gap
of serial work, with the pool cold (workers sleep after ~70 us idle) and held hot (what the
graph executor and the VM do for a run); per row the best/median microseconds per launch and,
from the pool's counters, the worker tasks and worker sleeps per launch. A launch into a
sleeping pool pays a futex wake and usually runs alone.

``load``: starts N busy processes (pure spin loops, one per N) for each N of ``--loads``, then
times a model from benchmarks/models.py on kiln's graph executor and onnxruntime, both at 2
threads, interleaved; prints min / median / p90 milliseconds and the spread (p90 / min).
The issue's question is whether kiln's spread under load is wider than ORT's.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KILN_NUM_THREADS", "2")

LAMBDA_C = r"""
#include <tvm/runtime/c_backend_api.h>
#include <stdint.h>
#include <time.h>

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

typedef struct { int64_t next, count, spin; } Work;

static int chunks(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)task_id;
  Work* w = (Work*)cdata;
  int64_t parts = 4 * (int64_t)penv->num_task, chunk = (w->count + parts - 1) / parts;
  if (chunk < 1) chunk = 1;
  for (;;) {
    int64_t start = __atomic_fetch_add(&w->next, chunk, __ATOMIC_RELAXED);
    if (start >= w->count) return 0;
    int64_t stop = start + chunk < w->count ? start + chunk : w->count;
    for (int64_t i = start; i < stop; ++i) {
      for (volatile int64_t k = 0; k < w->spin; ++k) {
      }
    }
  }
}

/* Mean ns per launch of `items` items, each launch after `gap_ns` of serial busy work. */
double launches(int count, int64_t items, double gap_ns) {
  double total = 0;
  for (int r = 0; r < count; ++r) {
    double gap = now_ns();
    while (now_ns() - gap < gap_ns) {
    }
    Work w = {0, items, 100};
    double start = now_ns();
    TVMBackendParallelLaunch(chunks, &w, 0);
    total += now_ns() - start;
  }
  return total / count;
}
"""


def launch_table(repeat: int) -> None:
    from kiln.runtime import cc, thread_pool
    from kiln.runtime.native import load_runtime_lib

    runtime = load_runtime_lib()
    lib = ctypes.CDLL(str(cc.cached_shared_library({"launch_cost.c": LAMBDA_C},
                                                   ["-O2", "-fPIC"])))
    lib.launches.restype = ctypes.c_double
    lib.launches.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_double]
    print(f"load {os.getloadavg()[0]:.1f}; us per launch best/median of 4 x {repeat // 4}; "
          "worker tasks and sleeps per launch")
    print(f"{'items':>6} {'gap us':>7} {'1 thread':>13} {'2 cold':>13} {'tasks':>6} "
          f"{'sleeps':>6} {'2 held':>13} {'tasks':>6} {'sleeps':>6}")
    for items in (64, 1024):
        for gap_us in (0, 20, 50, 100, 200, 1000):
            row = f"{items:>6} {gap_us:>7}"
            for threads, held in ((1, False), (2, False), (2, True)):
                runtime.KilnRuntimeSetNumThreads(threads)
                thread_pool.pool_stats(reset=True)
                with thread_pool.hot() if held else contextlib.nullcontext():
                    times = [lib.launches(repeat // 4, items, gap_us * 1e3) for _ in range(4)]
                stats = thread_pool.pool_stats()
                row += f" {min(times) / 1e3:6.2f}/{np.median(times) / 1e3:<6.2f}"
                if threads == 2:
                    row += (f" {stats['worker_tasks'] / repeat:6.2f}"
                            f" {stats['worker_sleeps'] / repeat:6.2f}")
            print(row, flush=True)
    runtime.KilnRuntimeSetNumThreads(int(os.environ["KILN_NUM_THREADS"]))


def _spin_forever() -> None:
    while True:
        pass


def load_table(model_name: str, loads: list[int], repeat: int) -> None:
    import onnxruntime as ort
    import torch
    from models import build_models

    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx

    model, shape = build_models()[model_name]
    model.eval()
    x = torch.randn(*shape)
    with tempfile.TemporaryDirectory() as workdir:
        path = os.path.join(workdir, f"{model_name}.onnx")
        torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                          dynamo=False, opset_version=17)
        mod, params = from_onnx(path, shape={"input": list(shape)})
        with kiln.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    xn = x.numpy()
    gmod.set_input("input", xn)
    runs = {"kiln2": gmod.run, "ort2": lambda: session.run(None, {"input": xn})}
    print(f"{model_name}, 2 threads; ms min / median / p90 of {repeat}, spread = p90 / min")
    for load in loads:
        busy = [multiprocessing.Process(target=_spin_forever, daemon=True) for _ in range(load)]
        for proc in busy:
            proc.start()
        time.sleep(0.5)
        samples = {key: [] for key in runs}
        try:
            for _ in range(repeat):
                for key, fn in runs.items():
                    start = time.perf_counter()
                    fn()
                    samples[key].append(time.perf_counter() - start)
        finally:
            for proc in busy:
                proc.terminate()
                proc.join()
        cells = []
        for key, times in samples.items():
            lo, med, p90 = (float(np.percentile(times, q)) * 1e3 for q in (0, 50, 90))
            cells.append(f"{key} {lo:7.3f} / {med:7.3f} / {p90:7.3f} spread {p90 / lo:5.2f}")
        print(f"busy processes {load}, load {os.getloadavg()[0]:4.1f}: " + " | ".join(cells),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["launch", "load"])
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--loads", default="0,2,4")
    args = parser.parse_args()
    if args.what == "launch":
        launch_table(args.repeat or 400)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        load_table(args.model, [int(n) for n in args.loads.split(",")], args.repeat or 200)


if __name__ == "__main__":
    main()
