"""Per-layer int8 MobileNet: the time of each conv layer of ``benchmarks/quant.py``'s
MobileNet-style model inside the whole quantized model, kiln vs onnxruntime, one thread each.

    python benchmarks/quant_layers.py [--repeat 10] [--target llvm] [--model mobilenet]

The model is exported and quantized as ``quant.py`` does (QDQ, uint8 activations, int8
weights). kiln: the debug executor times every kernel (``run_individual``, the minimum over
``--repeat`` rounds); onnxruntime: its profiler times every node (the minimum per node over
``--repeat`` runs). The conv layers pair up in model order (kiln's fused ``conv2d`` kernels,
onnxruntime's ``QLinearConv`` or ``Conv``: its quantizer leaves some convs in float, marked
``f``), then the classifier, then the sum over all kernels / nodes. Both clocks are wall time
of one kernel on one thread: on a loaded machine the minimum is the steadier statistic.
``--target "llvm -mcpu=core-avx2"`` times kiln's AVX2 kernels.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

os.environ["KILN_NUM_THREADS"] = "1"
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(_HERE), _HERE]


# the conv layers of quant.py's MobileNet in model order: input channels -> output, @ width
MOBILENET_LAYERS = ["stem 3->32 s2 @224", "dw 32 @112", "pw 32->64 @112", "dw 64 s2 @112",
                    "pw 64->128 @56", "dw 128 @56", "pw 128->128 @56", "dw 128 s2 @56",
                    "pw 128->256 @28", "dw 256 @28", "pw 256->256 @28", "dw 256 s2 @28",
                    "pw 256->512 @14", "dw 512 @14", "pw 512->512 @14", "dw 512 @14",
                    "pw 512->512 @14", "dw 512 s2 @14", "pw 512->1024 @7"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--model", default="mobilenet", choices=["mobilenet", "resnet18"])
    args = parser.parse_args()
    from model_layers import kiln_kernels
    from model_layers import ort_nodes as ort_profile
    from quant import _export_and_quantize, _models

    shape = (1, 3, 224, 224)
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    with tempfile.TemporaryDirectory() as workdir:
        _, q_path, _ = _export_and_quantize(_models(224)[args.model], shape, workdir, "m",
                                            False)
        kiln_nodes = [(name, t) for name, _, t in
                      kiln_kernels(q_path, shape, x, args.target, args.repeat)]
        ort_nodes = [(op, t) for _, op, t in ort_profile(q_path, x, args.repeat, workdir)]
    kiln_convs = [t for name, t in kiln_nodes if "conv2d" in name]
    ort_convs = [(op, t) for op, t in ort_nodes if op in ("Conv", "QLinearConv")]
    kiln_fc = [t for name, t in kiln_nodes if "dense" in name or "matmul" in name]
    ort_fc = [(op, t) for op, t in ort_nodes if op in ("QGemm", "Gemm", "MatMulInteger",
                                                       "QLinearMatMul")]
    print(f"{'layer':20} {'kiln ms':>8} {'ort ms':>8} {'kiln/ort':>8}   ({args.model}, "
          f"1 thread, min of {args.repeat}, target {args.target!r}; f: onnxruntime in float)")
    labels = MOBILENET_LAYERS if args.model == "mobilenet" else [
        f"conv {k}" for k in range(len(kiln_convs))]
    rows = [(label, a, b) for label, a, b in zip(labels, kiln_convs, ort_convs)]
    rows += [("fc", a, b) for a, b in zip(kiln_fc, ort_fc)]
    for label, k_t, (op, o_t) in rows:
        mark = " f" if op in ("Conv", "Gemm") else ""
        print(f"{label:20} {k_t * 1e3:8.3f} {o_t * 1e3:8.3f} {k_t / o_t:8.2f}{mark}")
    k_sum, o_sum = sum(t for _, t in kiln_nodes), sum(t for _, t in ort_nodes)
    print(f"{'all':20} {k_sum * 1e3:8.3f} {o_sum * 1e3:8.3f} {k_sum / o_sum:8.2f}   "
          f"({len(kiln_nodes)} kiln kernels, {len(ort_nodes)} onnxruntime nodes)")


if __name__ == "__main__":
    main()
