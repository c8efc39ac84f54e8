"""Per-layer int8 MobileNet: each conv + BN + ReLU layer of ``benchmarks/quant.py``'s
MobileNet-style model alone, quantized by onnxruntime (QDQ, uint8 activations, int8 weights),
kiln vs onnxruntime, one thread each by default, CPU time (``time.process_time``).

    python benchmarks/quant_layers.py [--repeat 20] [--target llvm] [--only pw,dw,stem]
                                      [--threads 1]

Each layer is exported and quantized as ``quant.py`` does the whole model, built with
``relay.build`` and run on the graph executor; the two runtimes are timed in turns (one call of
each per round) and the table gives kiln and onnxruntime min ms, kiln/ort min and median, and
the sum over the layers. ``--target "llvm -mattr=-avx512vnni"`` times kiln's int16 kernels on a
VNNI host (the C is still compiled for the host CPU).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np


def _layers() -> list[tuple[str, object, tuple]]:
    """(name, torch module, input shape) of every conv layer of the MobileNet-style model."""
    from torch import nn

    def block(conv):
        return nn.Sequential(conv, nn.BatchNorm2d(conv.out_channels), nn.ReLU()).eval()

    out = [("stem 3->32 s2 @224", block(nn.Conv2d(3, 32, 3, 2, 1, bias=False)),
            (1, 3, 224, 224))]
    size, cfg = 112, [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
                      (256, 512, 2), (512, 512, 1), (512, 512, 1), (512, 1024, 2)]
    for cin, cout, stride in cfg:
        out.append((f"dw {cin} s{stride} @{size}", block(
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)), (1, cin, size, size)))
        size //= stride
        out.append((f"pw {cin}->{cout} @{size}", block(nn.Conv2d(cin, cout, 1, bias=False)),
                    (1, cin, size, size)))
    return out


def _time(fns: list, repeat: int) -> list[tuple[float, float]]:
    """(min, median) CPU seconds of each of ``fns``, called in turns."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, samples in zip(fns, times):
            start = time.process_time()
            fn()
            samples.append(time.process_time() - start)
    return [(float(np.min(t)), float(np.median(t))) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--only", default="stem,dw,pw", help="layer kinds to run")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["KILN_NUM_THREADS"] = str(args.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [os.path.dirname(here), here]
    import torch
    from quant import _export_and_quantize, _kiln, _ort

    torch.manual_seed(0)
    kinds = args.only.split(",")
    print(f"{'layer':22} {'kiln ms':>8} {'ort ms':>8} {'min':>6} {'median':>6}"
          f"   (kiln/ort, CPU time, {args.threads} thread(s), target {args.target!r})")
    total = np.zeros(2)
    with tempfile.TemporaryDirectory() as workdir:
        for k, (name, module, shape) in enumerate(_layers()):
            if name.split()[0] not in kinds:
                continue
            _, q_path, _ = _export_and_quantize(module, shape, workdir, f"l{k}", False)
            x = np.random.default_rng(k).standard_normal(shape).astype("float32")
            run, _, _ = _kiln(q_path, shape, x, args.target)
            run_ort, _ = _ort(q_path, x, args.threads)
            (k_min, k_med), (o_min, o_med) = _time([run, run_ort], args.repeat)
            total += (k_min, o_min)
            print(f"{name:22} {k_min * 1e3:8.3f} {o_min * 1e3:8.3f} {k_min / o_min:6.2f} "
                  f"{k_med / o_med:6.2f}", flush=True)
    print(f"{'sum of mins':22} {total[0] * 1e3:8.3f} {total[1] * 1e3:8.3f} "
          f"{total[0] / total[1]:6.2f}")


if __name__ == "__main__":
    main()
