"""A fork while another thread is inside an LLVM call (kiln's LLVM thread optimizing a
kernel, say) waits for that call, so the child can use LLVM (it hung on llvmlite's lock,
copied held)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


# A lock callback stops kiln's LLVM thread inside an LLVM call of a compile while the main
# thread forks; a timer lets it go on. Optimizing, the thread passes llvmlite's lock: the fork
# waits for its call, and the child compiles. Printing the module, the thread holds the lock
# (llvm_toolchain._print_module) across two LLVM calls (print, then free the string): the
# fork waited for the thread's call to end and then for the lock, which the thread held while
# it waited to make its second call: both waited for ever (the parent hung).
_COMPILING = r"""
import os, signal, threading
import llvmlite.binding.ffi as ffi
from kiln.target import Target, llvm_toolchain

signal.alarm(60)  # a hung parent dies of SIGALRM
target = Target("llvm")
tm = llvm_toolchain.host_target_machine(target)
llvm_toolchain.llvm_thread_count()  # the threads and their way past llvmlite's lock
inner = ffi.lib._lock._lock.inner  # llvmlite's own lock, which printing holds
inside, leave = threading.Event(), threading.Event()
def acquired():
    # an LLVM thread past llvmlite's lock that holds it all the same: printing
    if (getattr(llvm_toolchain._WORKER, "isolated", False) and inner._is_owned() == {printing}
            and not leave.is_set()):
        inside.set()
        leave.wait(60)
ffi.register_lock_callback(acquired, lambda: None)
wait = llvm_toolchain.compile_in_background("define void @f() { ret void }", tm, target)
assert inside.wait(60), "the LLVM thread never made that call"
threading.Timer(0.3, leave.set).start()
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hung child dies of SIGALRM
    try:
        obj, _ = llvm_toolchain.compile_cached("define void @g() { ret void }", tm, target)
        os._exit(0 if obj else 4)
    except BaseException:
        os._exit(3)
assert wait()[0]
print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.parametrize("printing", [False, True], ids=["optimizing", "printing"])
def test_a_fork_while_an_llvm_thread_compiles_hangs_neither_side(tmp_path, printing):
    env = {**os.environ, "PYTHONPATH": ROOT, "KILN_CACHE_DIR": str(tmp_path)}
    script = _COMPILING.replace("{printing}", str(printing))
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # -14: the parent hung
    assert proc.stdout.strip().splitlines()[-1] == "child 0"  # -14 (SIGALRM): the child hung
