"""``python -m tests.fuzz``: fuzz campaigns over kiln's loaders (run it niced on shared hosts).

Example: ``nice -n 19 python -m tests.fuzz --inputs 100000 --targets params,ndarray``.
Findings go to ``--out`` (default ``tests/fuzz/findings/``); the exit status is 1 when any
loader crashed, hung or raised something other than a TVMError.
"""

from __future__ import annotations

import argparse
import sys

from .campaign import run_campaign
from .targets import TARGETS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    parser.add_argument("--minutes", type=float, help="minutes per loader")
    parser.add_argument("--inputs", type=int, help="inputs per loader")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated loaders (default: all: {', '.join(TARGETS)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="where findings are written")
    parser.add_argument("--nice", type=int, default=0, help="worker niceness (0-19)")
    args = parser.parse_args(argv)
    if args.minutes is None and args.inputs is None:
        parser.error("give --minutes or --inputs")
    clean = True
    for name in args.targets.split(","):
        stats = run_campaign(name, inputs=args.inputs,
                             seconds=None if args.minutes is None else args.minutes * 60,
                             seed=args.seed, out_dir=args.out, nice=args.nice, progress=True)
        print(stats.line(), flush=True)
        for path, summary in stats.findings[:20]:
            print(f"  {path}: {summary}", flush=True)
        clean = clean and stats.clean
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
