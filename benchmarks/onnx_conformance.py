"""ONNX backend node-test conformance of kiln, with onnxruntime measured in the same run.

Runs every case of ONNX's node suite (``onnx.backend.test.case.node``) through
``relay.frontend.from_onnx`` and then, per column: ``vm`` -- the compiled path a user takes for
control-flow models (``relay.vm.compile`` at opt_level 3 for llvm, run on the VM), the headline
number; ``graph`` (``relay.build`` opt 3 + the graph executor); ``interpreter`` (the reference
interpreter); ``ort`` (onnxruntime, CPU). A case passes when every output matches ONNX's
expected one (dtype, shape, values within the case's rtol/atol); "fail" is a wrong answer,
"error" a raised exception (an honest "not supported" included).

Results are kept in a JSON file (``--results``), one entry per case and column, so a run with
``--filter`` or ``--columns`` updates part of it; ``--docs`` writes ``docs/onnx_support.md``
from the whole file.

Usage::

    python benchmarks/onnx_conformance.py [--columns vm,graph,interpreter,ort]
        [--filter SUBSTR] [--skip N] [--stop N] [--timeout SECONDS] [--results PATH] [--docs PATH]
        [--failures] [--progress]

The full suite takes about 25 minutes per kiln column on one free core (ORT: under a minute).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "onnx_conformance"))
sys.path.insert(0, str(ROOT))

import harness  # noqa: E402

COLUMNS = ("vm", "graph", "interpreter", "ort")
TITLES = {"vm": "compiled (VM, opt 3, llvm)", "graph": "graph executor (opt 3)",
          "interpreter": "interpreter", "ort": "onnxruntime"}
DEFAULT_RESULTS = ROOT / "benchmarks" / "onnx_conformance_results.json"


class _Timeout(BaseException):  # not caught by the runners' "except Exception"
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _timed(run, case, seconds: int) -> harness.Outcome:
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return run(case)
    except _Timeout:
        return harness.Outcome("error", f"timed out after {seconds} s")
    finally:
        signal.alarm(0)


def _runner(column: str):
    if column == "ort":
        return harness.run_onnxruntime
    return lambda case: harness.run_kiln(case, column)


def run_columns(cases: list, columns: list, timeout: int, progress: bool,
                save=None) -> dict:
    """``{case name: {column: [status, reason]}}`` for ``cases`` on ``columns``; ``save`` is
    called with the results so far every 50 cases (a long run keeps what it measured)."""
    results: dict = {}
    for index, case in enumerate(cases):
        if save is not None and index and index % 50 == 0:
            save(results)
        entry = results.setdefault(case.name, {"op": harness.op_type_of(case)})
        for column in columns:
            outcome = _timed(_runner(column), case, timeout)
            entry[column] = [outcome.status, outcome.reason]
            if progress:
                print(f"  {case.name:60} {column:11} {outcome.status:5} {outcome.reason}",
                      flush=True)
    return results


def merge(path: Path, fresh: dict) -> dict:
    """The results stored at ``path`` updated with ``fresh`` (written back)."""
    stored = json.loads(path.read_text()) if path.exists() else {}
    for name, entry in fresh.items():
        stored.setdefault(name, {}).update(entry)
    path.write_text(json.dumps(stored, indent=0, sort_keys=True))
    return stored


def totals(results: dict, column: str) -> Counter:
    """Pass/fail/error counts of one column (cases it has a result for)."""
    return Counter(e[column][0] for e in results.values() if column in e)


def per_op(results: dict, column: str) -> dict:
    """``{op type: Counter(status)}`` for one column."""
    table: dict = defaultdict(Counter)
    for entry in results.values():
        if column in entry:
            table[entry["op"]][entry[column][0]] += 1
    return dict(table)


def _reason_kind(reason: str) -> str:
    """A failing case's reason shortened to what is missing (an op, a dtype, a feature)."""
    match = re.search(r"at opset \d+: (.*)", reason)
    if match:
        return f"no converter: {match.group(1)}"
    match = re.search(r"ONNX element type (\w+) has no kiln dtype", reason)
    if match:
        return f"dtype {match.group(1)} not in kiln"
    match = re.search(r"ONNX (\w+): (.*) is not supported by kiln", reason)
    if match:
        return f"{match.group(1)}: {match.group(2)}"
    if "non-tensor input" in reason:
        return "sequence/optional inputs (the harness feeds tensors only)"
    return re.sub(r"'[^']*'", "'…'", reason)[:110]


def write_docs(results: dict, path: Path) -> None:
    """``docs/onnx_support.md``: totals per column, per-op counts, and why cases fail."""
    # a column measured on only part of the suite would mislead beside complete ones
    present = [c for c in COLUMNS if all(c in e for e in results.values())]
    partial = [c for c in COLUMNS if c not in present and any(c in e for e in results.values())]
    lines = [
        "# ONNX support",
        "",
        "Generated by `python benchmarks/onnx_conformance.py --docs docs/onnx_support.md` from "
        "ONNX's backend node suite (`onnx.backend.test.case.node`, "
        f"onnx {_onnx_version()}); do not edit by hand.",
        "",
        "A case passes when every output has ONNX's expected dtype and shape and matches within "
        "the case's tolerances; *wrong* is a wrong answer, *error* a raised error (an honest "
        "\"not supported\" included). The compiled column is the path a user takes for "
        "control-flow models: `relay.frontend.from_onnx` → `relay.vm.compile` (opt_level 3, "
        "llvm) → VM.",
        "",
        "| column | pass | wrong | error | cases |",
        "|---|---:|---:|---:|---:|",
    ]
    for column in present:
        t = totals(results, column)
        lines.append(f"| {TITLES[column]} | {t['pass']} | {t['fail']} | {t['error']} | "
                     f"{sum(t.values())} |")
    if partial:
        lines += ["", "Left out (measured on part of the suite only): "
                  + ", ".join(TITLES[c] for c in partial) + "."]
    lines += ["", "## Per op type", "",
              "Counts are pass/wrong/error; `X(multi-node)` is a function-expanded case "
              "named after its first node.", "",
              "| op type | " + " | ".join(TITLES[c] for c in present) + " |",
              "|---|" + "---:|" * len(present)]
    tables = {c: per_op(results, c) for c in present}
    for op in sorted({e["op"] for e in results.values()}):
        cells = []
        for column in present:
            c = tables[column].get(op, Counter())
            cells.append(f"{c['pass']}/{c['fail']}/{c['error']}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    if "vm" in present:
        reasons: dict = defaultdict(list)
        for name, entry in sorted(results.items()):
            if "vm" in entry and entry["vm"][0] != "pass":
                reasons[_reason_kind(entry["vm"][1])].append(name)
        lines += ["", "## What does not pass on the compiled path, and why", "",
                  "| reason | cases | examples |", "|---|---:|---|"]
        for kind, names in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            examples = ", ".join(f"`{n}`" for n in names[:3])
            lines.append(f"| {kind.replace('|', '/')} | {len(names)} | {examples} |")
    path.write_text("\n".join(lines) + "\n")


def _onnx_version() -> str:
    import onnx

    return onnx.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", default="vm,graph,interpreter,ort",
                        help="comma-separated subset of " + ",".join(COLUMNS))
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--skip", type=int, default=0,
                        help="leave out the first SKIP cases (to split a run across processes)")
    parser.add_argument("--stop", type=int, default=None,
                        help="run the cases before index STOP only (with --skip: one slice)")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per case and column")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                        help="JSON file the results are merged into")
    parser.add_argument("--docs", type=Path, help="write the support page here")
    parser.add_argument("--failures", action="store_true",
                        help="list every case that does not pass on the first column")
    parser.add_argument("--progress", action="store_true", help="print each outcome")
    args = parser.parse_args()
    columns = [c for c in args.columns.split(",") if c]
    unknown = set(columns) - set(COLUMNS)
    if unknown:
        parser.error(f"unknown columns {sorted(unknown)}; choose from {COLUMNS}")

    cases = [c for c in harness.node_cases() if args.filter in c.name][args.skip:args.stop]
    start = time.perf_counter()
    fresh = run_columns(cases, columns, args.timeout, args.progress,
                        lambda partial: merge(args.results, partial))
    elapsed = time.perf_counter() - start
    results = merge(args.results, fresh)

    print(f"{'op type':40}" + "".join(f"{c:>18}" for c in columns))
    for op in sorted({e["op"] for e in fresh.values()}):
        cells = []
        for column in columns:
            c = per_op(fresh, column).get(op, Counter())
            cells.append(f"{c['pass']}/{c['fail']}/{c['error']}")
        print(f"{op:40}" + "".join(f"{x:>18}" for x in cells))
    if args.failures and columns:
        print(f"\nnot passing on {columns[0]}:")
        for name, entry in fresh.items():
            status, reason = entry[columns[0]]
            if status != "pass":
                print(f"  {name:60} {status:5} {reason}")
    print(f"\n{len(cases)} cases in {elapsed:.0f} s; pass/fail/error:")
    for column in columns:
        t = totals(fresh, column)
        print(f"  {TITLES[column]:28} pass {t['pass']:5}  fail {t['fail']:5}  "
              f"error {t['error']:5}")
    if args.docs:
        write_docs(results, args.docs)
        print(f"wrote {args.docs}")


if __name__ == "__main__":
    main()
