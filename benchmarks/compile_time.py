"""Compile time of relay.build: cold, from the build cache, and where a cold build's time goes.

    python benchmarks/compile_time.py [--models resnet18,transformer12] [--targets llvm,c]
                                      [--rounds 1]

Models are PyTorch modules from ``benchmarks/models.py`` exported to ONNX at run time:
ResNet-18 (1x3x224x224, 65 ONNX nodes) and a 12-layer transformer encoder (seq 128, d 256,
about 1,000 ONNX nodes). For each model and target, every build runs in a fresh Python process
(``relay.build`` timed alone, after ``from_onnx``) against a fresh ``KILN_CACHE_DIR``:

- ``cold``: empty cache directory (no LLVM object, C library or build result cached);
- ``cached``: the same directory again, a new process: the whole-build cache answers
  (``relay.build`` stats say ``hit``); the process still pays its first-use imports;
- ``warm``: a second ``relay.build`` of the same model in that process (imports done);
- ``no entry``: the cold run's directory without its whole-build entries (what a model with
  other weights meets): the passes run, lowered kernels come from ``KILN_CACHE_DIR/lower``
  and LLVM objects / C libraries from their caches;
- ``cache off``: ``KILN_BUILD_CACHE=0`` on that directory: passes and lowering run again,
  codegen and the C compiler hit their object caches.

The stage breakdown (``KILN_DEBUG=1``: passes, lowering, codegen, cc, other) is printed for the
cold build. The machine load is printed with each row: absolute times on a shared machine are
noise, the load says how much.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"resnet18": [1, 3, 224, 224], "transformer12": [1, 128, 256]}


def export(name: str, path: str) -> None:
    """Write the ONNX file of benchmark model ``name``."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from models import build_models

    models = build_models()
    if name == "transformer12":
        model = type(models["transformer"][0])(12)  # models.py's encoder with 12 layers
    else:
        model = models[name][0]
    model.eval()
    torch.onnx.export(model, (torch.randn(*SHAPES[name]),), path, input_names=["input"],
                      output_names=["output"], dynamo=False, opset_version=17)


def child(path: str, name: str, target: str, twice: bool) -> None:
    """One process: from_onnx, then relay.build once (or twice); print one JSON line."""
    sys.path.insert(0, ROOT)
    import kiln
    from kiln import relay
    from kiln.relay.frontend import from_onnx

    mod, params = from_onnx(path, shape={"input": SHAPES[name]})
    times, states = [], []
    for _ in range(2 if twice else 1):
        start = time.perf_counter()
        with kiln.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target=target, params=params)
        times.append(time.perf_counter() - start)
        states.append(lib.stats["build_cache"])
    print(json.dumps({"times": times, "states": states, "kernels": lib.stats["kernels"]}))


def run_child(path: str, name: str, target: str, cache: str, twice: bool = False,
              build_cache: bool = True) -> tuple[dict, str]:
    env = {**os.environ, "KILN_CACHE_DIR": cache, "KILN_DEBUG": "1",
           "KILN_BUILD_CACHE": "1" if build_cache else "0", "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, __file__, "--child", path, name, target,
                           "twice" if twice else "once"], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} on {target} failed:\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    stages = [line for line in proc.stderr.splitlines() if "relay.build stages" in line]
    return result, (stages[0].split("stages: ", 1)[1] if stages else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,transformer12")
    parser.add_argument("--targets", default="llvm,c")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        path, name, target, twice = args.child
        child(path, name, target, twice == "twice")
        return
    print(f"{'model':14} {'target':6} {'kernels':>7} {'cold s':>7} {'cached s':>8} "
          f"{'warm s':>7} {'no entry s':>10} {'cache off s':>11} {'load':>5}  cold stages")
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            path = os.path.join(work, f"{name}.onnx")
            export(name, path)
            for target in args.targets.split(","):
                for _ in range(args.rounds):
                    cache = tempfile.mkdtemp(dir=work)
                    cold, stages = run_child(path, name, target, cache)
                    cached, _ = run_child(path, name, target, cache, twice=True)
                    assert cached["states"] == ["hit", "hit"], cached["states"]
                    shutil.rmtree(os.path.join(cache, "build"))
                    no_entry, _ = run_child(path, name, target, cache)
                    off, _ = run_child(path, name, target, cache, build_cache=False)
                    stages = re.sub(r"\s+", " ", stages)
                    print(f"{name:14} {target:6} {cold['kernels']:7d} "
                          f"{cold['times'][0]:7.2f} {cached['times'][0]:8.2f} "
                          f"{cached['times'][1]:7.2f} {no_entry['times'][0]:10.2f} "
                          f"{off['times'][0]:11.2f} {os.getloadavg()[0]:5.1f}  {stages}",
                          flush=True)


if __name__ == "__main__":
    main()
