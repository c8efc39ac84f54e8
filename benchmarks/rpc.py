"""RPC over loopback TCP: kiln vs the apache-tvm wheel, in the same run.

Each side runs its own server process (``python -m kiln.exec.rpc_server`` /
``python -m tvm.exec.rpc_server``) and is driven by its own client from this process:

* latency: one empty remote call (``testing.nop``, no arguments, no result), microseconds
  of wall time, and of CPU time spent by client and server together (on a loaded machine the
  wall time mostly waits for a CPU; the CPU time does not);
  both servers answer it with their built-in native ``testing.nop``. kiln also reports the
  same call of a Python function (``testing.pynop``, registered by ``--init-module``), which
  TVM's server cannot host;
* sleeps: voluntary context switches per empty call of the client thread and of the server
  (all its threads and children): a receive that sleeps counts one; on two otherwise idle
  CPUs each costs the wake-up of an idle CPU, more than the call's own work;
* throughput: copying a 16 MiB float32 array to the server (``copyfrom``) and back
  (``numpy()``), MB/s.

Rounds alternate between kiln and TVM so that load on the shared machine hits both alike;
the table shows medians and the ratios (goal: latency <= 1.0x TVM, throughput >= 1.0x TVM).

Usage::

    python benchmarks/rpc.py                 # needs kiln[interop] (apache-tvm)
    python benchmarks/rpc.py --calls 5000 --rounds 9
    python benchmarks/rpc.py --cross-cpu 0,1   # client on CPU 0, both servers on CPU 1
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
import threading
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
    raise RuntimeError(f"{' '.join(argv)} did not start")


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def process_tree_tasks(pid: int) -> list[str]:
    """The /proc/<pid>/task/<tid> folders of process ``pid``'s threads and its children's."""
    tasks = []
    for task in os.listdir(f"/proc/{pid}/task"):
        tasks.append(f"/proc/{pid}/task/{task}")
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in children.read().split():
                    tasks += process_tree_tasks(int(child))
        except OSError:
            pass
    return tasks


def voluntary_switches(task: str) -> int:
    with open(f"{task}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
    return 0


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, ns resolution) of process ``pid``, its threads and its
    children (TVM's server serves each session in a forked child)."""
    total = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
            total += int(stat.read().split()[0]) / 1e9
        try:
            with open(f"/proc/{pid}/task/{task}/children") as children:
                total += sum(process_tree_cpu_s(int(c)) for c in children.read().split())
        except OSError:
            pass
    return total


class Side:
    """One RPC stack: a client session plus how to make and read remote arrays."""

    def __init__(self, name: str, session, nop, empty, to_numpy, pynop=None) -> None:
        self.name, self.session, self.nop, self.pynop = name, session, nop, pynop
        self.empty, self.to_numpy = empty, to_numpy
        self.server_pid = 0  # set by main: CPU per call is counted on both sides

    def latency_us(self, calls: int, python: bool = False) -> float:
        nop = self.pynop if python else self.nop
        start = time.perf_counter()
        for _ in range(calls):
            nop()
        return (time.perf_counter() - start) / calls * 1e6

    def cpu_us(self, calls: int) -> float:
        """CPU microseconds per empty call, client plus server: unlike the wall time, it
        does not include waiting for a CPU on a loaded machine."""
        mine, server = time.thread_time(), process_tree_cpu_s(self.server_pid)
        self.latency_us(calls)
        return ((time.thread_time() - mine) + process_tree_cpu_s(self.server_pid)
                - server) / calls * 1e6

    def sleeps_per_call(self, calls: int) -> tuple[float, float]:
        """Voluntary context switches per empty call: of this (client) thread, of the
        server's threads and children."""
        me = f"/proc/self/task/{threading.get_native_id()}"
        server = process_tree_tasks(self.server_pid)
        mine, theirs = voluntary_switches(me), [voluntary_switches(t) for t in server]
        self.latency_us(calls)
        return ((voluntary_switches(me) - mine) / calls,
                sum(voluntary_switches(t) - n for t, n in zip(server, theirs)) / calls)

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
    parser.add_argument("--same-cpu", type=int, default=None, metavar="CPU",
                        help="pin the client and both servers to this CPU: the scheduler "
                        "otherwise places a client and its server on one CPU or on two, and "
                        "on an idle machine two CPUs cost two wake-ups per call (the wall "
                        "time then depends on placement more than on either stack)")
    parser.add_argument("--cross-cpu", default=None, metavar="CLIENT,SERVER",
                        help="pin the client to one CPU and both servers to another: the "
                        "placement that costs wake-ups when receives sleep")
    args = parser.parse_args()
    pin: list[str] = []
    if args.same_cpu is not None:
        os.sched_setaffinity(0, {args.same_cpu})
        pin = ["taskset", "-c", str(args.same_cpu)]
    if args.cross_cpu is not None:
        client_cpu, server_cpu = (int(cpu) for cpu in args.cross_cpu.split(","))
        os.sched_setaffinity(0, {client_cpu})
        pin = ["taskset", "-c", str(server_cpu)]
    try:
        import tvm  # noqa: F401
    except ImportError:
        print("apache-tvm is not installed: pip install 'kiln[interop]'")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        nop = Path(tmp, "nop.py")
        nop.write_text(NOP_MODULE)
        kiln_proc, kiln_port = start_server([*pin, sys.executable, "-m",
                                             "kiln.exec.rpc_server", "--port", "0",
                                             "--port-end", "0", "--init-module", str(nop)])
        tvm_proc, tvm_port = start_server([*pin, sys.executable, "-m", "tvm.exec.rpc_server",
                                           "--host", "127.0.0.1", "--port", "9700",
                                           "--port-end", "9799"])
        try:
            sides = [kiln_side(kiln_port), tvm_side(tvm_port)]
            host = np.random.default_rng(0).standard_normal(MIB16 // 4).astype("float32")
            remotes = [side.empty(host.shape) for side in sides]
            for side, proc in zip(sides, (kiln_proc, tvm_proc)):
                side.server_pid = proc.pid
            results = {side.name: {"lat": [], "pylat": [], "cpu": [], "up": [], "down": [],
                                   "csw_client": [], "csw_server": []}
                       for side in sides}
            for side, remote in zip(sides, remotes):  # warm up both
                side.latency_us(200)
                side.copy_mb_s(host, remote)
            for _ in range(args.rounds):
                for side, remote in zip(sides, remotes):
                    results[side.name]["lat"].append(side.latency_us(args.calls))
                    if side.pynop is not None:
                        results[side.name]["pylat"].append(side.latency_us(args.calls, True))
                    results[side.name]["cpu"].append(side.cpu_us(args.calls))
                    client, server = side.sleeps_per_call(args.calls)
                    results[side.name]["csw_client"].append(client)
                    results[side.name]["csw_server"].append(server)
                    up, down = side.copy_mb_s(host, remote)
                    results[side.name]["up"].append(up)
                    results[side.name]["down"].append(down)
        finally:
            stop_server(kiln_proc)
            stop_server(tvm_proc)
    load = os.getloadavg()
    print(f"RPC over loopback TCP, {args.rounds} alternating rounds (apache-tvm "
          f"{sys.modules['tvm'].__version__}); load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} on {os.cpu_count()} cores"
          + ("" if args.same_cpu is None else f"; all pinned to CPU {args.same_cpu}")
          + ("" if args.cross_cpu is None else f"; client, servers on CPUs {args.cross_cpu}"))
    print(f"{'measure':<34}{'stat':>6}{'kiln':>10}{'tvm':>10}{'kiln/tvm':>10}  goal")
    results["tvm"]["pylat"] = results["tvm"]["lat"]  # TVM's server hosts no Python function
    rows = [("empty call latency (us)", "lat", min, "<= 1.0"),
            ("kiln Python function vs tvm (us)", "pylat", min, ""),
            ("empty call CPU, both sides (us)", "cpu", min, "<= 1.0"),
            ("client sleeps per empty call", "csw_client", min, ""),
            ("server sleeps per empty call", "csw_server", min, ""),
            ("16 MiB copy to server (MB/s)", "up", max, ">= 1.0"),
            ("16 MiB copy from server (MB/s)", "down", max, ">= 1.0")]
    for label, key, best, goal in rows:
        for stat, reduce in (("best", best), ("median", statistics.median)):
            k, t = reduce(results["kiln"][key]), reduce(results["tvm"][key])
            ratio = f"{k / t:>10.2f}" if t else f"{'-':>10}"
            digits = 2 if key.startswith("csw") else 1
            print(f"{label:<34}{stat:>6}{k:>10.{digits}f}{t:>10.{digits}f}{ratio}  {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
