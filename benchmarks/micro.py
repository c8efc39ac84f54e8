"""microTVM memory and speed on the emulated Cortex-M4, with TFLite Micro side by side.

For the three models of ``kiln.relay.testing.micro_models`` (small CNN, KWS DS-CNN, MLP):

- flash (text + rodata + data image) and RAM (data + bss, the AOT workspace pool, the graph
  executor's peak platform allocations, the measured stack) of the ``qemu-cortex-m4`` program,
  from ``arm-none-eabi-size`` and the program's own report, for AOT and the C graph executor;
- instructions per inference (QEMU ``-icount shift=0``: SysTick ticks x 40), AOT and graph;
- the AOT workspace pool against the largest-live-set lower bound in ``metadata.json``;
- TensorFlow Lite for Microcontrollers' arena for the same model (the same weights, written as
  a ``.tflite`` by ``micro_tflite.py``; its outputs are checked against kiln's);
- host latency of AOT vs the graph executor (target ``llvm``, same process, interleaved);
- the int8 KWS DS-CNN and MobileNet-style CNN (``micro_models_int8.to_tflite_int8``, imported
  with ``from_tflite``): instructions with the DSP (SMLAD, SMLABB/SMLATT) int8 micro-kernels
  and with the portable C kernels (``-mattr=+nodsp``), flash, AOT pool, TFLite Micro's arena;
  outputs equal to the host's, LiteRT's within one step (the KWS: equal).

Every board output is checked against the host graph executor before a number is reported.
Run: ``python benchmarks/micro.py [--models cnn,kws_dscnn,mlp] [--skip-graph] [--int8-only]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

# this checkout's kiln and the sibling micro_tflite.py, whatever kiln is installed
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.micro.board import StandaloneProject  # noqa: E402
from kiln.micro.board.qemu import size_of  # noqa: E402
from kiln.relay.backend import Executor, Runtime  # noqa: E402
from kiln.relay.testing import micro_models  # noqa: E402

TARGET = "c -keys=arm_cpu -mcpu=cortex-m4"
INT8_TARGETS = {"DSP (SMLAD)": TARGET, "portable C": TARGET + " -mattr=+nodsp"}
FLASH_SECTIONS = (".isr_vector", ".text", ".rodata", ".ARM.exidx", ".ARM.extab", ".data")


def build_mlf(mod, params, executor: str, path: Path, target: str = TARGET) -> Path:
    """Relay → Model Library Format for the Cortex-M4: ``aot`` (C interface), ``aot-io``
    (the same with the inputs and outputs in the workspace pool), ``graph`` (linked
    params)."""
    config = Executor("graph", {"link-params": True}) if executor == "graph" else \
        Executor("aot", {"interface-api": "c", "unpacked-api": True})
    pass_config = {"tir.disable_vectorize": True,
                   "tir.usmp.use_workspace_io": executor == "aot-io"}
    with tvm.transform.PassContext(opt_level=3, config=pass_config):
        module = relay.build(mod, target=tvm.target.Target(target), params=params,
                             runtime=Runtime("crt", {"system-lib": True}), executor=config)
    tvm.micro.export_model_library_format(module, str(path))
    return path


def reference(mod, params, x: np.ndarray) -> np.ndarray:
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    g = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    g.set_input("input", x)
    g.run()
    return g.get_output(0).numpy()


def pool_bounds(mlf: Path) -> tuple[int | None, int | None]:
    """(workspace pool bytes, its largest-live-set lower bound) from metadata.json."""
    with tarfile.open(mlf) as tar:
        meta = json.load(tar.extractfile("./metadata.json") if "./metadata.json"
                         in tar.getnames() else tar.extractfile("metadata.json"))
    module = next(iter(meta["modules"].values()))
    for pool in module.get("memory", {}).get("pools", []):
        if not pool.get("constant"):
            return pool.get("size_bytes"), pool.get("lower_bound_bytes")
    return None, None


def board_numbers(mlf: Path, x: np.ndarray, want: np.ndarray, workdir: Path) -> dict:
    """Build + run on qemu-cortex-m4; sizes, instructions, stack and heap."""
    project = StandaloneProject(mlf, "qemu-cortex-m4", build_dir=workdir)
    elf = project.build()
    result = project.run([x])
    got = result.outputs[0].reshape(want.shape)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)
    sizes = size_of(elf)
    return {
        "flash": sum(sizes.get(s, 0) for s in FLASH_SECTIONS),
        "data_bss": sizes.get(".data", 0) + sizes.get(".bss", 0),
        "workspace": sizes.get(".tvm_workspace", 0),
        "platform_pool": sizes.get(".kiln_workspace", 0),
        "io": sizes.get(".kiln_io", 0),
        "heap_peak": result.heap_peak_bytes,
        "stack": result.stack_bytes,
        "instructions": result.instructions,
    }


def host_latency(mod, params, x: np.ndarray, repeat: int = 200) -> tuple[float, float]:
    """Median seconds per run of host AOT and host graph executor (llvm), interleaved."""
    from kiln.runtime.executor import AotModule

    with tvm.transform.PassContext(opt_level=3):
        graph_lib = relay.build(mod, target="llvm", params=params)
        aot_lib = relay.build(mod, target="llvm", params=params, executor=Executor("aot"),
                              runtime=Runtime("cpp"))
    dev = tvm.cpu(0)
    graph = graph_executor.GraphModule(graph_lib["default"](dev))
    aot = AotModule(aot_lib["default"](dev))
    graph.set_input("input", x)
    aot.set_input("input", x)
    np.testing.assert_allclose(_once(aot), _once(graph), rtol=1e-5, atol=1e-6)
    times = {"aot": [], "graph": []}
    for _ in range(repeat):
        for name, runner in (("aot", aot), ("graph", graph)):
            start = time.perf_counter()
            runner.run()
            times[name].append(time.perf_counter() - start)
    return float(np.median(times["aot"])), float(np.median(times["graph"]))


def _once(runner) -> np.ndarray:
    runner.run()
    return runner.get_output(0).numpy()


INT8_MODELS = ("kws_dscnn", "mobilenet_tiny")


def int8_models(tmp: Path) -> list[dict]:
    """The int8 KWS DS-CNN and MobileNet-style CNN through from_tflite on qemu-cortex-m4, DSP
    and portable kernels. The board must equal the host graph executor (llvm, x86 kernels)
    exactly and LiteRT's reference kernels within one step (exactly for the KWS), and TFLite
    Micro must equal LiteRT."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    from micro_tflite import tflm_run

    from kiln.relay.testing.micro_models_int8 import to_tflite_int8

    rows = []
    for name in INT8_MODELS:
        model = getattr(micro_models, name)()
        model_bytes = to_tflite_int8(model)
        x = np.clip(np.round(model.random_input() * 128), -128, 127).astype("int8")
        litert = Interpreter(model_content=model_bytes,
                             experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        litert.allocate_tensors()
        litert.set_tensor(litert.get_input_details()[0]["index"], x)
        litert.invoke()
        want = litert.get_tensor(litert.get_output_details()[0]["index"])
        tflm_out, arena, _ = tflm_run(model_bytes, x)
        np.testing.assert_array_equal(tflm_out.reshape(want.shape), want)
        mod, params = relay.frontend.from_tflite(model_bytes)
        host = reference(mod, params, x)
        # kiln rounds requantize once, TFLite's reference kernels twice
        tolerance = 0 if name == "kws_dscnn" else 1
        np.testing.assert_allclose(host.astype(int), want.astype(int), atol=tolerance, rtol=0)
        for kernels, target in INT8_TARGETS.items():
            print(f"[micro] int8 {name}: {kernels}", file=sys.stderr, flush=True)
            work = tmp / f"int8_{name}_{len(rows)}"
            mlf = build_mlf(mod, params, "aot", work.with_suffix(".tar"), target)
            row = {"model": name, "kernels": kernels, **board_numbers(mlf, x, host, work)}
            row["pool"], _ = pool_bounds(mlf)
            row["tflm_arena"] = arena
            rows.append(row)
    return rows


def print_int8_table(rows: list[dict]) -> None:
    print("\nint8 models from TFLite (from_tflite), AOT on qemu-cortex-m4, -O2; outputs equal "
          "to the host's and to TFLite Micro's, LiteRT's within one step (KWS: equal)\n")
    head = (f"{'model':<15} {'kernels':<12} {'instr/inf':>11} {'vs portable':>12} "
            f"{'flash':>8} {'AOT pool':>9} {'TFLM arena':>11} {'stack':>7}")
    print(head)
    print("-" * len(head))
    portable = {row["model"]: row["instructions"] for row in rows
                if row["kernels"] == "portable C"}
    for row in rows:
        print(f"{row['model']:<15} {row['kernels']:<12} {row['instructions']:>11} "
              f"{row['instructions'] / portable[row['model']]:>12.3f} {row['flash']:>8} "
              f"{row['pool'] or 0:>9} {row['tflm_arena']:>11} {row['stack']:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,kws_dscnn,mlp")
    parser.add_argument("--skip-graph", action="store_true",
                        help="AOT only (no C graph executor program)")
    parser.add_argument("--int8-only", action="store_true",
                        help="only the int8 models (DSP vs portable kernels)")
    args = parser.parse_args()
    from micro_tflite import tflm_run, to_tflite

    if args.int8_only:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-micro-") as tmp:
            print_int8_table(int8_models(Path(tmp)))
        return

    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-bench-micro-") as tmp:
        tmp = Path(tmp)
        for name in args.models.split(","):
            model = micro_models.MODELS[name]()
            mod, params = micro_models.to_relay(model)
            x = model.random_input()
            want = reference(mod, params, x)
            row = {"model": name}
            print(f"[micro] {name}: AOT", file=sys.stderr, flush=True)
            aot_mlf = build_mlf(mod, params, "aot", tmp / f"{name}_aot.tar")
            row["aot"] = board_numbers(aot_mlf, x, want, tmp / f"{name}_aot")
            row["pool"], row["lower_bound"] = pool_bounds(aot_mlf)
            print(f"[micro] {name}: AOT, I/O in the pool", file=sys.stderr, flush=True)
            io_mlf = build_mlf(mod, params, "aot-io", tmp / f"{name}_aot_io.tar")
            row["aot-io"] = board_numbers(io_mlf, x, want, tmp / f"{name}_aot_io")
            if not args.skip_graph:
                print(f"[micro] {name}: graph", file=sys.stderr, flush=True)
                graph_mlf = build_mlf(mod, params, "graph", tmp / f"{name}_graph.tar")
                row["graph"] = board_numbers(graph_mlf, x, want, tmp / f"{name}_graph")
            print(f"[micro] {name}: TFLM", file=sys.stderr, flush=True)
            tflm_out, arena, _ = tflm_run(to_tflite(model), x)
            np.testing.assert_allclose(tflm_out.reshape(want.shape), want, rtol=1e-4,
                                       atol=1e-5)
            row["tflm_arena"] = arena
            row["host_aot"], row["host_graph"] = host_latency(mod, params, x)
            rows.append(row)
        int8_rows = int8_models(tmp)
    print_table(rows)
    print_int8_table(int8_rows)


def print_table(rows: list[dict]) -> None:
    print("\nqemu-cortex-m4 (mps2-an386), float32, -O2; bytes unless noted; "
          "instructions = SysTick ticks x 40 under -icount shift=0\n")
    print("RAM total = data+bss + AOT pool + I/O buffers + the graph executor's peak "
          "platform allocations + measured stack\n")
    head = (f"{'model':<10} {'exec':<7} {'flash':>8} {'data+bss':>9} {'workspace':>10} "
            f"{'I/O':>6} {'heap peak':>10} {'stack':>7} {'RAM total':>10} {'instr/inf':>11}")
    print(head)
    print("-" * len(head))
    for row in rows:
        for executor in ("aot", "aot-io", "graph"):
            n = row.get(executor)
            if n is None:
                continue
            print(f"{row['model']:<10} {executor:<7} {n['flash']:>8} {n['data_bss']:>9} "
                  f"{n['workspace']:>10} {n['io']:>6} {n['heap_peak']:>10} {n['stack']:>7} "
                  f"{_ram(n):>10} {n['instructions']:>11}")
    print()
    print("kiln tensors = AOT pool + I/O buffers (aot) or the pool holding I/O too (aot-io); "
          "TFLM's arena holds its I/O tensors\n")
    head = (f"{'model':<10} {'AOT pool':>9} {'live-set LB':>12} {'pool/LB':>8} "
            f"{'aot tensors':>12} {'aot-io pool':>12} {'TFLM arena':>11} {'aot-io/TFLM':>12} "
            f"{'graph/AOT RAM':>14} {'host AOT/graph':>15}")
    print(head)
    print("-" * len(head))
    for row in rows:
        aot, io = row["aot"], row["aot-io"]
        pool, bound = row["pool"] or 0, row["lower_bound"] or 0
        graph_ratio = f"{_ram(row['graph']) / _ram(aot):.2f}" if row.get("graph") else "-"
        ratio = f"{pool / bound:.3f}" if bound else "-"
        print(f"{row['model']:<10} {pool:>9} {bound:>12} {ratio:>8} "
              f"{pool + aot['io']:>12} {io['workspace']:>12} {row['tflm_arena']:>11} "
              f"{io['workspace'] / row['tflm_arena']:>12.2f} {graph_ratio:>14} "
              f"{row['host_aot'] / row['host_graph']:>15.2f}")
    print("\nhost latency (llvm, median of 200 interleaved runs):")
    for row in rows:
        print(f"  {row['model']:<10} AOT {row['host_aot'] * 1e6:9.1f} us   graph "
              f"{row['host_graph'] * 1e6:9.1f} us")


def _ram(n: dict) -> int:
    return n["data_bss"] + n["workspace"] + n["io"] + n["heap_peak"] + n["stack"]


if __name__ == "__main__":
    main()
