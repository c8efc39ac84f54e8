"""Per-kernel float profile of a ``benchmarks/models.py`` model: every kernel kiln runs and
every node onnxruntime runs, each timed inside the whole model, one thread each.

    python benchmarks/model_layers.py [--model mobilenet|cnn|resnet18] [--repeat 10]
                                      [--target llvm]

The model is built and exported as ``models.py`` does. kiln: the debug executor times every
kernel (``run_individual``, one call per round, the minimum over ``--repeat`` rounds: a
mean over several calls catches more preemptions on a loaded machine); onnxruntime: its
profiler times every node (the minimum per node over ``--repeat`` runs). Both lists are printed in
model order with their sums, so a layer can be matched by eye (kiln fuses batch norm, relu and
the layout changes into its kernels; onnxruntime fuses conv + relu). Wall time of one kernel on
one thread: on a loaded machine the minimum is the steadier statistic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict

import numpy as np

os.environ["KILN_NUM_THREADS"] = "1"
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_HERE), _HERE]


def kiln_kernels(path: str, shape: tuple, x: np.ndarray, target: str, repeat: int) -> list:
    """[(kernel name, output shape, min seconds)] of the ONNX model at ``path`` on kiln's debug
    executor."""
    import kiln
    from kiln import relay
    from kiln.contrib.debugger import debug_executor
    from kiln.relay.frontend import from_onnx

    mod, params = from_onnx(path, shape={"input": list(shape)})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    gmod = debug_executor.create(lib.get_graph_json(), lib.get_lib(), kiln.cpu(0),
                                 dump_root=tempfile.mkdtemp())
    gmod.set_input("input", x)
    gmod.set_input(**lib.get_params())
    ops = gmod.module.op_execs
    best = np.full(len(ops), np.inf)
    for _ in range(repeat):
        best = np.minimum(best, gmod.run_individual(number=1, repeat=1))
    entries = gmod.module.graph.entries
    return [(op.func_name, tuple(entries[op.output_eids[0]].shape), t)
            for op, t in zip(ops, best)]


def ort_nodes(path: str, x: np.ndarray, repeat: int, workdir: str) -> list:
    """[(node name, op type, min seconds)] of the model at ``path`` on onnxruntime, 1 thread."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.enable_profiling = True
    opts.profile_file_prefix = os.path.join(workdir, "ort_profile")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for _ in range(repeat + 3):
        sess.run(None, {"input": x})
    with open(sess.end_profiling()) as f:
        events = json.load(f)
    best, order = defaultdict(lambda: np.inf), {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = e["name"][:-len("_kernel_time")]
            order.setdefault(node, e["args"].get("op_name", "?"))
            best[node] = min(best[node], e["dur"] * 1e-6)
    return [(node, op, best[node]) for node, op in order.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    import torch
    from models import build_models

    torch.set_num_threads(1)
    model, shape = build_models()[args.model]
    model.eval()
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    with tempfile.TemporaryDirectory() as workdir:
        path = os.path.join(workdir, f"{args.model}.onnx")
        torch.onnx.export(model, (torch.from_numpy(x),), path, input_names=["input"],
                          output_names=["output"], dynamo=False, opset_version=17)
        kiln_rows = kiln_kernels(path, shape, x, args.target, args.repeat)
        ort_rows = ort_nodes(path, x, args.repeat, workdir)
    print(f"kiln ({args.model}, 1 thread, min of {args.repeat}, target {args.target!r}, "
          f"load {os.getloadavg()[0]:.1f})")
    for name, out_shape, t in kiln_rows:
        print(f"  {name[:60]:60} {str(out_shape):22} {t * 1e3:8.3f}")
    print("onnxruntime")
    for node, op, t in ort_rows:
        print(f"  {node[:40]:40} {op:20} {t * 1e3:8.3f}")
    k_sum, o_sum = sum(r[-1] for r in kiln_rows), sum(r[-1] for r in ort_rows)
    print(f"sum kiln {k_sum * 1e3:.3f} ms ({len(kiln_rows)} kernels), onnxruntime "
          f"{o_sum * 1e3:.3f} ms ({len(ort_rows)} nodes): {k_sum / o_sum:.2f}")


if __name__ == "__main__":
    main()
