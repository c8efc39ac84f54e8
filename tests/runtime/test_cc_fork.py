"""A process forked while a background compile is in flight compiles the same object itself
(it waited forever for the parent's future, whose thread the child does not have)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = r"""
import os, signal, threading
from kiln.runtime import cc

parent = os.getpid()
started, forked = threading.Event(), threading.Event()
run = cc.run_compiler
def gated(cmd, what):
    if os.getpid() == parent:
        started.set()
        forked.wait(60)
    return run(cmd, what)
cc.run_compiler = gated

source = "int risks_fork_probe(void) { return 5; }\n"
wait = cc.compile_in_background(source, ["-O1", "-fPIC"])
assert started.wait(60), "the compile never started"
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hung child dies of SIGALRM
    try:
        data = cc.compile_in_background(source, ["-O1", "-fPIC"])()
        os._exit(0 if data.startswith(b"\x7fELF") else 3)
    except BaseException:
        os._exit(4)
forked.set()
assert wait().startswith(b"\x7fELF")
print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_child_forked_during_a_background_compile_compiles_for_itself(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _CHILD], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "child 0"  # -14 (SIGALRM): it hung
