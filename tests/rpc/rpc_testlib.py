"""Helpers for the RPC tests: kiln servers and trackers as processes on free loopback ports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REMOTE_FUNCS = Path(__file__).resolve().parent / "remote_funcs.py"


class Process:
    """A server/tracker process that printed ``bind to HOST:PORT``; killed on exit."""

    def __init__(self, argv: list[str], timeout: float = 60.0,
                 expect: str = r"bind to [\d.]+:(\d+)") -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        self.port = None
        for line in self.proc.stderr:
            match = re.search(expect, line)
            if match:
                self.port = int(match.group(1)) if match.groups() else 0
                break
            if time.monotonic() > deadline:
                break
        if self.port is None:
            self.kill()
            raise RuntimeError(f"{argv} did not start")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stderr:
            self.proc.stderr.close()

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def kiln_server(*extra: str, cli: bool = False, **options) -> Process:
    """``python -m kiln.exec.rpc_server`` (``cli``: ``kiln rpc server``) with the test
    functions, on a free port (``extra`` arguments come last and win)."""
    program = ["kiln", "rpc", "server"] if cli else ["kiln.exec.rpc_server"]
    return Process([sys.executable, "-m", *program, "--port", "0", "--port-end", "0",
                    "--init-module", str(REMOTE_FUNCS), *extra], **options)


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    """Poll ``predicate`` until it returns something true; that value (or AssertionError)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")
