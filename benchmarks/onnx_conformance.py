"""ONNX backend node-test conformance of kiln, with onnxruntime measured in the same run.

Runs every case of ONNX's node suite (``onnx.backend.test.case.node``) through
``relay.frontend.from_onnx`` + the reference interpreter (``--executor graph`` uses
``relay.build`` + the graph executor instead), and through onnxruntime, then prints
pass/fail/error per op type and the totals of both.

Usage::

    python benchmarks/onnx_conformance.py [--executor interpreter|graph] [--filter SUBSTR]
                                          [--timeout SECONDS] [--failures] [--progress]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "onnx_conformance"))

import harness  # noqa: E402


class _Timeout(Exception):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("interpreter", "graph"), default="interpreter")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--timeout", type=int, default=60, help="seconds per case")
    parser.add_argument("--failures", action="store_true", help="list every failing case")
    parser.add_argument("--progress", action="store_true",
                        help="print each case's kiln outcome as it finishes")
    args = parser.parse_args()

    cases = [c for c in harness.node_cases() if args.filter in c.name]
    kiln_outcomes, ort_outcomes = [], []
    start = time.perf_counter()
    for case in cases:
        kiln_outcomes.append((case, _timed(lambda c: harness.run_kiln(c, args.executor), case,
                                           args.timeout)))
        if args.progress:
            outcome = kiln_outcomes[-1][1]
            print(f"  {case.name:60} {outcome.status:5} {outcome.reason}", flush=True)
        ort_outcomes.append((case, _timed(harness.run_onnxruntime, case, args.timeout)))
    elapsed = time.perf_counter() - start

    kiln_ops, kiln_totals = harness.summarize(kiln_outcomes)
    ort_ops, ort_totals = harness.summarize(ort_outcomes)
    print(f"{'op type':34} {'kiln pass/fail/error':>22} {'onnxruntime pass/fail/error':>28}")
    for op in sorted(kiln_ops):
        k, o = kiln_ops[op], ort_ops.get(op, {})
        print(f"{op:34} {k['pass']:>8}/{k['fail']}/{k['error']:<8} "
              f"{o['pass']:>14}/{o['fail']}/{o['error']}")
    if args.failures:
        print("\nkiln failures:")
        for case, outcome in kiln_outcomes:
            if outcome.status != "pass":
                print(f"  {case.name:60} {outcome.status:5} {outcome.reason}")
    print(f"\n{len(cases)} cases in {elapsed:.0f} s (executor: {args.executor})")
    for name, totals in (("kiln", kiln_totals), ("onnxruntime", ort_totals)):
        print(f"{name:12} pass {totals['pass']:5}  fail {totals['fail']:5}  "
              f"error {totals['error']:5}")


if __name__ == "__main__":
    main()
