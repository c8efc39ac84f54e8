"""Soak run of the cross-executor differential tests (too slow for the suite).

Runs, with ``KILN_DIFFERENTIAL=full``: the Tier-1 op test matrices on the graph executor and
the VM at opt_level 0-3 with inputs as run-time inputs and as bound constants (16
configurations instead of the suite's 4), and 300 random programs instead of 8, each
configuration against the Relay interpreter. Prints pytest's summary and the wall time.

    python benchmarks/differential_executors.py [extra pytest args]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/relay/op/strategy/test_strategy_computes.py",
         "tests/relay/op/strategy/test_strategy_nn.py",
         "tests/relay/test_random_programs.py"]


def main() -> int:
    env = dict(os.environ, KILN_DIFFERENTIAL="full")
    # the op matrices' executor variant, and the whole random-program test
    command = [sys.executable, "-m", "pytest", "-q", *TESTS, "-k",
               "executors or every_executor", *sys.argv[1:]]
    start = time.perf_counter()
    rc = subprocess.call(command, cwd=ROOT, env=env)
    print(f"differential soak: {time.perf_counter() - start:.0f} s, pytest exit code {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
