"""Fork safety of llvmlite: a process forks only while no thread is inside an LLVM call.

Entry point: :func:`guard_forks` (called once llvmlite is imported).

llvmlite holds one process-wide lock around every call into LLVM, and kiln's LLVM thread
makes calls lasting up to seconds (optimizing and emitting a kernel). A fork meanwhile
(``multiprocessing``'s default start method on Linux, a user's worker pool, Ray) copied the
lock held by a thread the child does not have, and the child's first LLVM call hung; LLVM's
own state could also be mid-change in the copy. So a fork first takes llvmlite's lock
(waiting for the call in progress to end) and both sides release it after the fork.

kiln's own LLVM threads (:mod:`kiln.target.llvm_toolchain`, ``_WorkerBypassLock``) pass
that lock, each in an LLVM context and target machine of its own; their lock stand-in has a
fork handler of its own that takes llvmlite's lock and then waits until none of them is inside
an LLVM call (letting none in until the fork is done). The child finds LLVM idle and the lock
free, and makes new threads, contexts and machines of its own.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["guard_forks"]

_GUARDED: list[Any] = []


def guard_forks(binding: Any) -> None:
    """Make forks wait for llvmlite's lock (once per process; a llvmlite without the lock
    this relies on is left as it is)."""
    if _GUARDED:
        return
    # llvmlite.binding.ffi.lib._lock._lock: the RLock of _LLVMLock, taken directly so that
    # callbacks registered on the lock (numba's) do not run around a fork
    lock = getattr(getattr(getattr(binding.ffi, "lib", None), "_lock", None), "_lock", None)
    if lock is None or not hasattr(lock, "acquire"):
        return
    _GUARDED.append(lock)
    os.register_at_fork(before=lock.acquire, after_in_parent=lock.release,
                        after_in_child=lock.release)
