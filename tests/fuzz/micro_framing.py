"""Fuzz the CRT's microTVM unframer (framing.c) under ASan + UBSan.

A mutation fuzzer (micro_framing_driver.c): random payloads framed by the C framer, the wire
bytes damaged, fed to the unframer split at random points. Undamaged streams must come back
exactly; damaged ones must give packets or error codes, never a sanitizer report.

Usage::

    python -m tests.fuzz.micro_framing --inputs 1000000 --seed 7 --out /tmp/framing-fuzz

tests/micro/test_micro_framing.py runs a short campaign of the same driver.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "micro"))
from crt_testlib import build_program, run_program  # noqa: E402

DRIVER = Path(__file__).resolve().parent / "micro_framing_driver.c"


def build_driver(out_dir: Path) -> Path:
    """The fuzz driver linked with the CRT's framing component, sanitized."""
    return build_program(
        out_dir, "micro_framing_fuzz", [DRIVER], components=("common", "memory",
                                                             "microtvm_rpc_common"),
    )


def run(inputs: int, seed: int, out_dir: Path, chunk: int = 200000, log=print) -> dict:
    """Run ``inputs`` damaged streams; return the summed counts (raises on a finding)."""
    exe = build_driver(out_dir)
    totals = {"inputs": 0, "packets": 0, "bad_crc": 0, "errors": 0}
    done, part = 0, 0
    while done < inputs:
        n = min(chunk, inputs - done)
        started = time.perf_counter()
        proc = run_program(exe, str(n), str(seed * 1000 + part), str(out_dir), timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(
                f"fuzz finding (rng seed {seed * 1000 + part}), exit code {proc.returncode}:\n"
                f"{proc.stdout}{proc.stderr[-4000:]}"
            )
        for key, value in re.findall(r"(inputs|packets|bad_crc|errors) (\d+)", proc.stdout):
            totals[key] += int(value)
        log(f"{n} inputs in {time.perf_counter() - started:.1f}s: {proc.stdout.strip()}")
        done += n
        part += 1
    return totals


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1000000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="work directory (kept)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="framing-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    totals = run(args.inputs, args.seed, out)
    print(
        f"unframer: {totals['inputs']} streams, {totals['packets']} packets delivered, "
        f"{totals['bad_crc']} bad CRCs, {totals['errors']} framing errors, 0 findings"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
