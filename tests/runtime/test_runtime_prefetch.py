"""The runtime support library can be built in the background while a build lowers kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = r"""
import json, time
from kiln.runtime import cc, native

compiles = []
run = cc.run_compiler
def counting(cmd, what):
    # the runtime's link (its C files compile in parallel first), not the OpenMP probe
    if "-shared" in map(str, cmd) and what != "OpenMP probe":
        compiles.append(time.perf_counter())
    return run(cmd, what)
cc.run_compiler = counting

native.prefetch_runtime_lib()
native.prefetch_runtime_lib()  # already on its way: starts nothing more
lib = native.load_runtime_lib()  # waits for the background build
from kiln.runtime import packed_func
print(json.dumps({"compiles": len(compiles), "same": lib is packed_func.runtime_library(),
                  "error": packed_func.get_last_error()}))
"""


def test_prefetch_builds_the_runtime_once_and_load_waits_for_it(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"compiles": 1, "same": True, "error": ""}
    assert len(list((tmp_path / "cc").glob("lib_*.so"))) == 1


# The parent holds the runtime build's gcc run open until it has forked; the child (like a
# multiprocessing or LocalBuilder worker) then loads the runtime itself. Before the fork fix
# it inherited the library lock held by a thread that does not exist in it and hung.
_FORK_CHILD = r"""
import os, sys, threading, time
from kiln.runtime import cc, native

parent = os.getpid()
started, forked = threading.Event(), threading.Event()
run = cc.run_compiler
def gated(cmd, what):
    if os.getpid() == parent:  # the prefetch's first gcc run: nothing else compiles here
        started.set()
        forked.wait(60)
    return run(cmd, what)
cc.run_compiler = gated

native.prefetch_runtime_lib()
assert started.wait(120), "the background build never started gcc"
pid = os.fork()
if pid == 0:
    try:
        lib = native.load_runtime_lib()
        from kiln.runtime import packed_func
        os._exit(0 if lib is packed_func.runtime_library() else 3)
    except BaseException:
        os._exit(4)
forked.set()
native.load_runtime_lib()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child", os.waitstatus_to_exitcode(status))
        sys.exit(0)
    time.sleep(0.05)
os.kill(pid, 9)
print("child hung")
"""


def test_a_fork_while_the_prefetch_runs_gcc_can_load_the_runtime(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _FORK_CHILD],
                          capture_output=True, text=True, env=env, timeout=400, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "child 0"
