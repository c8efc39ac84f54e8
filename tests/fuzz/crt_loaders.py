"""Fuzz the C graph executor's loaders (graph JSON, params blob) under ASan + UBSan.

A mutation fuzzer (crt_loaders_driver.c; no libFuzzer here: it needs clang) built with
AddressSanitizer and UndefinedBehaviorSanitizer. Seeds are graph JSON + params of models kiln
builds. Each input is one mutated graph or params blob; a finding (sanitizer report, abort,
leak, error without a message) stops the run and saves the input.

Usage::

    python -m tests.fuzz.crt_loaders --inputs 100000          # per loader
    python -m tests.fuzz.crt_loaders --inputs 100000 --seed 7 --out /tmp/crt-fuzz

tests/micro/test_crt_fuzz_smoke.py runs a few thousand inputs of the same campaign.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "micro"))
from crt_testlib import C_TEST_DIR, build_program, run_program  # noqa: E402

import kiln as tvm  # noqa: E402
from kiln import relay  # noqa: E402

DRIVER = Path(__file__).resolve().parent / "crt_loaders_driver.c"
MODES = ("graph", "params")


def _seed_models():
    """Small models whose graphs cover tuples, __nop aliases, pools, several dtypes."""
    x = relay.var("x", shape=(2, 16), dtype="float32")
    w = relay.var("w", shape=(8, 16), dtype="float32")
    b = relay.var("b", shape=(8,), dtype="float32")
    hidden = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w), b))
    mlp = relay.Function([x, w, b], relay.Tuple([relay.nn.softmax(hidden), hidden]))
    d = relay.var("d", shape=(1, 2, 6, 6), dtype="float32")
    k = relay.var("k", shape=(3, 2, 3, 3), dtype="float32")
    y = relay.nn.max_pool2d(relay.nn.relu(relay.nn.conv2d(d, k, padding=(1, 1))), (2, 2), (2, 2))
    cnn = relay.Function([d, k], relay.reshape(y, (1, 27)))
    q = relay.var("q", shape=(4, 4), dtype="int8")
    ints = relay.Function([q], relay.cast(relay.add(q, q), "int32"))
    rng = np.random.default_rng(0)
    return [
        (mlp, {"w": rng.random((8, 16), "float32"), "b": rng.random(8, "float32")}),
        (cnn, {"k": rng.random((3, 2, 3, 3), "float32")}),
        (ints, {}),
    ]


def _variant(graph_json: str) -> str:
    """The first graph with device_index and a flatten_data op, to reach those paths too."""
    graph = json.loads(graph_json)
    entries = graph["node_row_ptr"][-1]
    graph["attrs"]["device_index"] = ["list_int", [1] * entries]
    for node in graph["nodes"]:
        if node["op"] == "tvm_op" and node["attrs"]["func_name"] != "__nop":
            node["attrs"]["flatten_data"] = "1"
            break
    return json.dumps(graph, indent=2)


def make_seeds(out_dir: Path) -> tuple[list[tuple[Path, Path]], list[str]]:
    """Write (graph, params) seed files; return them and every kernel name they call."""
    seeds, names = [], set()
    texts = []
    for func, params in _seed_models():
        with tvm.transform.PassContext(opt_level=3):
            factory = relay.build(tvm.IRModule.from_expr(func), target="c", params=params)
        params_blob = tvm.runtime.save_param_dict(factory.get_params())
        texts.append((factory.get_graph_json(), params_blob))
    texts.append((_variant(texts[0][0]), texts[0][1]))
    for i, (graph_json, params_blob) in enumerate(texts):
        graph_path, params_path = out_dir / f"seed{i}.json", out_dir / f"seed{i}.params"
        graph_path.write_text(graph_json)
        params_path.write_bytes(params_blob)
        seeds.append((graph_path, params_path))
        names.update(re.findall(r'"func_name": "([^"]+)"', graph_json))
    names.discard("__nop")
    return seeds, sorted(names)


def build_driver(out_dir: Path, kernel_names: list[str]) -> Path:
    """The fuzz driver with a registry mapping every seed kernel name to a touch-all kernel."""
    count = len(kernel_names)
    blob = f'"\\{count & 0xFF:03o}\\{count >> 8:03o}" ' + " ".join(
        f'"{n}" "\\0"' for n in kernel_names
    )
    header = out_dir / "include" / "kernel_names.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text(f"#define KERNEL_COUNT {count}\n#define KERNEL_NAMES {blob}\n")
    return build_program(
        out_dir,
        "crt_fuzz",
        [DRIVER],
        components=("common", "graph_executor"),
        platform=C_TEST_DIR / "test_platform.c",
        cflags=(f"-I{header.parent}",),
    )


def run(inputs: int, seed: int, out_dir: Path, chunk: int = 25000, log=print) -> dict:
    """Run `inputs` mutated inputs per loader; return the summed counts (raises on a finding)."""
    seeds, names = make_seeds(out_dir)
    exe = build_driver(out_dir, names)
    seed_args = [str(p) for pair in seeds for p in pair]
    totals = {mode: {"inputs": 0, "accepted": 0, "rejected": 0} for mode in MODES}
    for mode in MODES:
        done, part = 0, 0
        while done < inputs:
            n = min(chunk, inputs - done)
            started = time.perf_counter()
            proc = run_program(
                exe, mode, str(n), str(seed * 1000 + part), str(out_dir), *seed_args, timeout=3600
            )
            if proc.returncode != 0:
                raise RuntimeError(
                    f"fuzz finding in {mode} mode (rng seed {seed * 1000 + part}), exit code "
                    f"{proc.returncode}:\n{proc.stdout}{proc.stderr[-4000:]}"
                )
            counts = dict(re.findall(r"(inputs|accepted|rejected) (\d+)", proc.stdout))
            for key, value in counts.items():
                totals[mode][key] += int(value)
            log(
                f"{mode}: {n} inputs in {time.perf_counter() - started:.1f}s: {proc.stdout.strip()}"
            )
            done += n
            part += 1
    return totals


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100000, help="inputs per loader")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="work directory (kept)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="crt-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    totals = run(args.inputs, args.seed, out)
    for mode, counts in totals.items():
        print(
            f"{mode} loader: {counts['inputs']} inputs, {counts['accepted']} accepted, "
            f"{counts['rejected']} rejected with an error code and message, 0 findings"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
