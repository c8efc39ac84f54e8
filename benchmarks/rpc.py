"""RPC over loopback TCP: kiln vs the apache-tvm wheel, in the same run.

Each side runs its own server process (``python -m kiln.exec.rpc_server`` /
``python -m tvm.exec.rpc_server``) and is driven by its own client from this process:

* latency: one empty remote call (``testing.nop``, no arguments, no result), microseconds;
  both servers answer it with their built-in native ``testing.nop``. kiln also reports the
  same call of a Python function (``testing.pynop``, registered by ``--init-module``), which
  TVM's server cannot host;
* throughput: copying a 16 MiB float32 array to the server (``copyfrom``) and back
  (``numpy()``), MB/s.

Rounds alternate between kiln and TVM so that load on the shared machine hits both alike;
the table shows medians and the ratios (goal: latency <= 1.0x TVM, throughput >= 1.0x TVM).

Usage::

    python benchmarks/rpc.py                 # needs kiln[interop] (apache-tvm)
    python benchmarks/rpc.py --calls 5000 --rounds 9
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NOP_MODULE = 'import kiln\nkiln.register_func("testing.pynop", lambda: None, override=True)\n'
MIB16 = 16 << 20


def start_server(argv: list[str]) -> tuple[subprocess.Popen, int]:
    """A server process (its own process group) and the port it printed."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    for line in proc.stdout:
        match = re.search(r"bind to [\d.]+:(\d+)", line)
        if match:
            return proc, int(match.group(1))
    raise RuntimeError(f"{argv[2]} did not start")


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


class Side:
    """One RPC stack: a client session plus how to make and read remote arrays."""

    def __init__(self, name: str, session, nop, empty, to_numpy, pynop=None) -> None:
        self.name, self.session, self.nop, self.pynop = name, session, nop, pynop
        self.empty, self.to_numpy = empty, to_numpy

    def latency_us(self, calls: int, python: bool = False) -> float:
        nop = self.pynop if python else self.nop
        start = time.perf_counter()
        for _ in range(calls):
            nop()
        return (time.perf_counter() - start) / calls * 1e6

    def copy_mb_s(self, host: np.ndarray, remote) -> tuple[float, float]:
        start = time.perf_counter()
        remote.copyfrom(host)
        upload = time.perf_counter() - start
        start = time.perf_counter()
        back = self.to_numpy(remote)
        download = time.perf_counter() - start
        assert np.array_equal(back, host), f"{self.name}: the array came back changed"
        return host.nbytes / upload / 1e6, host.nbytes / download / 1e6


def kiln_side(port: int) -> Side:
    import kiln
    from kiln import rpc

    session = rpc.connect("127.0.0.1", port)
    return Side("kiln", session, session.get_function("testing.nop"),
                lambda shape: kiln.nd.empty(shape, "float32", session.cpu(0)),
                lambda arr: arr.numpy(), session.get_function("testing.pynop"))


def tvm_side(port: int) -> Side:
    import tvm
    import tvm.rpc

    session = tvm.rpc.connect("127.0.0.1", port)
    return Side("tvm", session, session.get_function("testing.nop"),
                lambda shape: tvm.runtime.empty(shape, "float32", session.cpu(0)),
                lambda arr: arr.numpy())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per latency round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per measurement")
    args = parser.parse_args()
    try:
        import tvm  # noqa: F401
    except ImportError:
        print("apache-tvm is not installed: pip install 'kiln[interop]'")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        nop = Path(tmp, "nop.py")
        nop.write_text(NOP_MODULE)
        kiln_proc, kiln_port = start_server([sys.executable, "-m", "kiln.exec.rpc_server",
                                             "--port", "0", "--port-end", "0",
                                             "--init-module", str(nop)])
        tvm_proc, tvm_port = start_server([sys.executable, "-m", "tvm.exec.rpc_server",
                                           "--host", "127.0.0.1", "--port", "9700",
                                           "--port-end", "9799"])
        try:
            sides = [kiln_side(kiln_port), tvm_side(tvm_port)]
            host = np.random.default_rng(0).standard_normal(MIB16 // 4).astype("float32")
            remotes = [side.empty(host.shape) for side in sides]
            results = {side.name: {"lat": [], "pylat": [], "up": [], "down": []}
                       for side in sides}
            for side, remote in zip(sides, remotes):  # warm up both
                side.latency_us(200)
                side.copy_mb_s(host, remote)
            for _ in range(args.rounds):
                for side, remote in zip(sides, remotes):
                    results[side.name]["lat"].append(side.latency_us(args.calls))
                    if side.pynop is not None:
                        results[side.name]["pylat"].append(side.latency_us(args.calls, True))
                    up, down = side.copy_mb_s(host, remote)
                    results[side.name]["up"].append(up)
                    results[side.name]["down"].append(down)
        finally:
            stop_server(kiln_proc)
            stop_server(tvm_proc)
    load = os.getloadavg()
    print(f"RPC over loopback TCP, {args.rounds} alternating rounds (apache-tvm "
          f"{sys.modules['tvm'].__version__}); load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} on {os.cpu_count()} cores")
    print(f"{'measure':<34}{'stat':>6}{'kiln':>10}{'tvm':>10}{'kiln/tvm':>10}  goal")
    results["tvm"]["pylat"] = results["tvm"]["lat"]  # TVM's server hosts no Python function
    rows = [("empty call latency (us)", "lat", min, "<= 1.0"),
            ("kiln Python function vs tvm (us)", "pylat", min, ""),
            ("16 MiB copy to server (MB/s)", "up", max, ">= 1.0"),
            ("16 MiB copy from server (MB/s)", "down", max, ">= 1.0")]
    for label, key, best, goal in rows:
        for stat, reduce in (("best", best), ("median", statistics.median)):
            k, t = reduce(results["kiln"][key]), reduce(results["tvm"][key])
            print(f"{label:<34}{stat:>6}{k:>10.1f}{t:>10.1f}{k / t:>10.2f}  {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
