"""A fork while another thread is inside an LLVM call (kiln's LLVM thread optimizing a
kernel, say) waits for that call, so the child can use LLVM (it hung on llvmlite's lock,
copied held)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A thread holds llvmlite's lock (stopped in a lock callback, inside an LLVM call) when the
# main thread forks; a timer lets it go on, which the fork waits for. The child then makes
# an LLVM call of its own.
_CHILD = r"""
import os, signal, threading
import llvmlite.binding.ffi as ffi
from kiln.target.llvm_toolchain import initialized_llvm

llvm = initialized_llvm()[1]
inside, leave = threading.Event(), threading.Event()
def acquired():
    if threading.current_thread().name == "busy" and not leave.is_set():
        inside.set()
        leave.wait(60)
ffi.register_lock_callback(acquired, lambda: None)
busy = threading.Thread(target=llvm.parse_assembly, args=("define void @f() { ret void }",),
                        name="busy")
busy.start()
assert inside.wait(60), "the busy thread never entered LLVM"
threading.Timer(0.2, leave.set).start()
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hung child dies of SIGALRM
    try:
        llvm.parse_assembly("define void @g() { ret void }").verify()
        os._exit(0)
    except BaseException:
        os._exit(3)
leave.set()
print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_during_an_llvm_call_leaves_the_child_able_to_use_llvm():
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", _CHILD], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "child 0"  # -14 (SIGALRM): it hung
