"""The LLVM toolchain behind the ``llvm`` target: llvmlite, target machines, optimization,
and the on-disk object cache.

Entry points: :func:`llvm_available`, :func:`llvmlite_modules`, :func:`initialized_llvm`,
:func:`host_target_machine`, :func:`parse_and_optimize`, :func:`compile_in_background` (the
object file of an IR module, optimized and emitted on kiln's LLVM threads while the caller goes
on, or read from ``KILN_CACHE_DIR/llvm`` when the same IR was compiled for the same target,
host CPU and LLVM before), :func:`compile_cached` (the same, waited for), :class:`LinkedIR`,
:func:`optimize`, :func:`opt_level`, :func:`llvm_thread_count`.

llvmlite releases Python's lock while LLVM works, so kiln's LLVM threads keep the other cores
busy optimizing while Python lowers the next kernel. llvmlite also holds one process-wide
lock around every call into LLVM; kiln's threads, each with its own LLVMContext and
TargetMachine, pass it (:data:`LLVM_THREADS`), so they optimize two kernels at once.
"""

from __future__ import annotations

import functools
import os
import threading
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from kiln.runtime.error import TVMError
from kiln.target.llvm_fork import guard_forks

__all__ = ["llvm_available", "llvmlite_modules", "initialized_llvm", "host_target_machine",
           "parse_and_optimize", "compile_in_background", "compile_cached", "LinkedIR",
           "llvm_thread_count", "llvm_thread_seconds", "object_cache_path", "optimize", "opt_level"]


def llvmlite_modules():
    """``(llvmlite.ir, llvmlite.binding)``; a TVMError naming the extra when missing."""
    try:
        import llvmlite.binding as binding
        import llvmlite.ir as ir
    except ImportError:
        raise TVMError(
            "target 'llvm' needs llvmlite, which is not installed; install the extra with "
            "`pip install kiln[llvm]` or use target 'c'"
        ) from None
    guard_forks(binding)  # a fork waits for the LLVM call in progress (kiln.target.llvm_fork)
    return ir, binding


def llvm_available() -> bool:
    """Whether llvmlite can be imported."""
    try:
        llvmlite_modules()
    except TVMError:
        return False
    return True


@functools.cache
def initialized_llvm():
    """llvmlite's modules with the native target and asm printer initialized (once)."""
    ir, llvm = llvmlite_modules()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return ir, llvm


def host_target_machine(target: Any = None):
    """An llvmlite TargetMachine for the host triple; CPU/features from ``-mcpu``/``-mattr``."""
    _, llvm = initialized_llvm()
    mcpu = getattr(target, "mcpu", "") if target is not None else ""
    mattr = ",".join(getattr(target, "mattr", []) or []) if target is not None else ""
    triple = (getattr(target, "attrs", {}) or {}).get("mtriple") if target is not None else None
    if mcpu and mcpu != "native":
        features = mattr
        if not triple and llvm.get_process_triple().startswith("x86_64"):
            # an unknown CPU name would select a 32-bit subtarget and abort the process
            features = f"+64bit,{features}" if features else "+64bit"
    else:  # -mcpu=native or none: the host CPU with its features
        mcpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        if mattr:
            features = f"{features},{mattr}" if features else mattr
    if triple:  # cross compilation needs every backend, not just the native one
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    try:
        llvm_target = llvm.Target.from_triple(triple or llvm.get_process_triple())
    except RuntimeError as err:
        raise TVMError(f"LLVM cannot generate code for -mtriple={triple}: {err}") from None
    # -opt-level sets instruction selection and register allocation too (as TVM's does)
    return llvm_target.create_target_machine(cpu=mcpu, features=features,
                                             opt=opt_level(target), reloc="pic",
                                             codemodel="default")


def opt_level(target: Any) -> int:
    """The target's ``-opt-level`` (default 3), clamped to LLVM's 0-3."""
    opt_level = getattr(target, "opt_level", 3) if target is not None else 3
    return min(max(opt_level, 0), 3)


def parse_and_optimize(module: Any, tm: Any, target: Any, context: Any = None):
    """The verified, optimized llvmlite ModuleRef of the llvmlite IR ``module`` (or its
    text, or a tuple of module texts linked into one), in LLVM's global context or
    ``context``."""
    _, llvm = initialized_llvm()
    parts = module if isinstance(module, tuple) else (module,)
    ref = None
    try:
        ref = llvm.parse_assembly(str(parts[0]), context)
        for part in parts[1:]:
            ref.link_in(llvm.parse_assembly(part, context))  # link_in frees the part
        ref.verify()
    except RuntimeError as err:
        if ref is not None:  # now, before its context closes (freed after: a crash)
            ref.close()
        raise TVMError(f"LLVM codegen produced invalid IR: {err}\n"
                       + "\n".join(map(str, parts))) from None
    optimize(llvm, ref, tm, opt_level(target))
    return ref


@functools.cache
def _host_cpu() -> tuple[str, str]:
    """The host CPU's name and feature string (asked once: every LLVM call waits for the LLVM
    thread's lock)."""
    _, llvm = initialized_llvm()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def object_cache_path(ir_text: str, target: Any) -> Any:
    """Where the object file of this unoptimized IR for this target is cached: the key covers
    the IR (with its triple and data layout), the target string, the host CPU and features
    (what ``-mcpu=native`` or no ``-mcpu`` select) and the LLVM version."""
    import hashlib

    from kiln.runtime import config

    _, llvm = initialized_llvm()
    key = hashlib.sha256("\0".join([
        ir_text, str(target), *_host_cpu(), str(opt_level(target)),
        str(llvm.llvm_version_info)]).encode()).hexdigest()
    return config.cache_dir() / "llvm" / key


# kiln's LLVM threads. Each works in an LLVMContext and TargetMachine of its own (LLVM is
# thread-safe across contexts), so two kernels optimize at once while Python lowers the next:
# llvmlite's process-wide lock around every LLVM call, which would make them take turns, is
# passed by these threads only (see _WorkerBypassLock).
LLVM_THREADS = 2
# (pid, executor): a forked child makes its own (the parent's threads do not exist there)
_LLVM_POOL: tuple[int, Any] | None = None
_WORKER = threading.local()  # .isolated: this thread touches only its own LLVM objects


class _WorkerBypassLock:
    """Stands in for the RLock inside llvmlite's lock: kiln's LLVM threads pass (they touch
    only their own context, machine and modules); every other thread locks as before. A
    fork takes llvmlite's lock, then waits until no LLVM thread is inside a call and lets
    none in until it is done, so the child finds LLVM idle and the lock free."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gate = threading.Condition()
        self.inside = 0  # LLVM threads inside a call now
        self.forking = False

    def acquire(self, *args: Any, **kwargs: Any) -> bool:
        if not getattr(_WORKER, "isolated", False):
            return self.inner.acquire(*args, **kwargs)
        with self.gate:
            while self.forking:
                self.gate.wait()
            self.inside += 1
        return True

    def release(self) -> None:
        if not getattr(_WORKER, "isolated", False):
            self.inner.release()
            return
        with self.gate:
            self.inside -= 1
            self.gate.notify_all()

    def before_fork(self) -> None:
        # llvmlite's lock first: an LLVM thread printing a module holds it across two calls
        # (see _print_module), and shutting the gate first left that thread waiting at the
        # gate for its second call while the fork waited for the lock it held
        self.inner.acquire()
        with self.gate:
            self.forking = True
            while self.inside:
                self.gate.wait()

    def after_fork_in_parent(self) -> None:
        with self.gate:
            self.forking = False
            self.gate.notify_all()
        self.inner.release()

    def after_fork_in_child(self) -> None:
        self.gate = threading.Condition()  # the parent's LLVM threads do not exist here
        self.inside, self.forking = 0, False
        self.inner.release()  # taken by this thread before the fork


def _bypass_llvmlite_lock() -> bool:
    """Install :class:`_WorkerBypassLock` in llvmlite's lock (once); False when this llvmlite
    keeps its lock elsewhere (its LLVM calls then take turns on one thread)."""
    from llvmlite.binding import ffi

    llvm_lock = getattr(getattr(ffi, "lib", None), "_lock", None)
    inner = getattr(llvm_lock, "_lock", None)
    if inner is None or not hasattr(inner, "acquire"):
        return False
    if not isinstance(inner, _WorkerBypassLock):
        bypass = _WorkerBypassLock(inner)
        llvm_lock._lock = bypass
        os.register_at_fork(before=bypass.before_fork,
                            after_in_parent=bypass.after_fork_in_parent,
                            after_in_child=bypass.after_fork_in_child)
    return True


def _print_module(ref: Any) -> str:
    """``str(ref)`` on one of kiln's LLVM threads, under llvmlite's own lock.

    llvmlite's module printer sets the process's locale to "C" and back around its work
    (setlocale is process-wide, not per thread): two threads printing at once can leave the
    whole process in "C", and Python then decodes every file it reads as ASCII. So printing
    takes turns with every other LLVM call, as it would without kiln's LLVM threads.
    """
    from llvmlite.binding import ffi

    inner = getattr(getattr(getattr(ffi, "lib", None), "_lock", None), "_lock", None)
    lock = inner.inner if isinstance(inner, _WorkerBypassLock) else None
    if lock is None or not getattr(_WORKER, "isolated", False):
        return str(ref)  # a thread that takes llvmlite's lock in the call itself
    with lock:
        return str(ref)


def _isolate_worker() -> None:
    _WORKER.isolated = True
    _WORKER.machines = {}


def _llvm_pool() -> Any:
    global _LLVM_POOL
    from concurrent.futures import ThreadPoolExecutor

    if _LLVM_POOL is None or _LLVM_POOL[0] != os.getpid():
        initialized_llvm()  # targets registered before any thread runs unlocked
        threads = LLVM_THREADS if _bypass_llvmlite_lock() else 1
        _LLVM_POOL = (os.getpid(), ThreadPoolExecutor(
            threads, thread_name_prefix="kiln-llvm",
            initializer=_isolate_worker if threads > 1 else None))
    return _LLVM_POOL[1]


def llvm_thread_count() -> int:
    """How many threads kiln's LLVM work runs on in this process (:data:`LLVM_THREADS`, or 1
    when this llvmlite's lock cannot be passed)."""
    return _llvm_pool()._max_workers


def _worker_machine(tm: Any, target: Any) -> Any:
    """The calling LLVM thread's own TargetMachine for ``target`` (``tm`` when the thread
    shares llvmlite's lock: then no two threads use it at once)."""
    if not getattr(_WORKER, "isolated", False):
        return tm
    key = str(target)
    if key not in _WORKER.machines:
        _WORKER.isolated = False  # target lookup may register targets: under the lock
        try:
            _WORKER.machines[key] = host_target_machine(target)
        finally:
            _WORKER.isolated = True
    return _WORKER.machines[key]


def compile_in_background(ir_text: str | tuple[str, ...], tm: Any, target: Any
                          ) -> Callable[[], tuple[bytes, str]]:
    """Start optimizing ``ir_text`` (one module's text, or a tuple of texts linked into one
    module) and emitting its object on kiln's LLVM threads; return a function that waits and
    gives ``(object bytes, optimized IR text)`` (or raises the TVMError of invalid IR). A
    module compiled before for the same target and host is read from the disk cache and
    starts nothing."""
    from kiln.runtime import disk_cache

    key = ir_text if isinstance(ir_text, str) else "\0".join(ir_text)
    path = object_cache_path(key, target)
    try:
        found = path.with_suffix(".o").read_bytes(), path.with_suffix(".ll").read_text()
        # checked before use: the object may be linked in process, where JITLink trusts its
        # headers (a damaged one aborts the process); a mismatch is a miss, compiled again
        if path.with_suffix(".sum").read_text() == _entry_digest(*found):
            disk_cache.touch(path.with_suffix(".o"))  # used: the cache's size cap keeps it
            return lambda: found
    except (OSError, UnicodeDecodeError):
        pass
    return _llvm_pool().submit(_compile_and_store, ir_text, tm, target, path).result


def compile_cached(module: Any, tm: Any, target: Any) -> tuple[bytes, str]:
    """``(object bytes, optimized IR text)`` of the llvmlite IR ``module``, from the disk cache
    when this exact module was compiled before (LLVM's optimization and object emission are
    most of a build's codegen)."""
    return compile_in_background(str(module), tm, target)()


# CPU seconds the LLVM threads have spent optimizing and emitting (KILN_DEBUG=1's breakdown
# reads how much a build added)
_THREAD_SECONDS = [0.0]
_THREAD_SECONDS_LOCK = threading.Lock()


def llvm_thread_seconds() -> float:
    """CPU seconds kiln's LLVM threads have worked in this process so far (all together)."""
    return _THREAD_SECONDS[0]


def _compile_and_store(ir_text: Any, tm: Any, target: Any, path: Any) -> tuple[bytes, str]:
    """Optimize and emit one module (on an LLVM thread) and store the result in the cache."""
    import time

    start = time.thread_time()
    try:
        return _compile_and_store_timed(ir_text, tm, target, path)
    finally:
        with _THREAD_SECONDS_LOCK:
            _THREAD_SECONDS[0] += time.thread_time() - start


def _compile_and_store_timed(ir_text: Any, tm: Any, target: Any, path: Any
                             ) -> tuple[bytes, str]:
    import tempfile

    _, llvm = initialized_llvm()
    tm = _worker_machine(tm, target)
    context = llvm.create_context()  # this module's own: freed with it, shared with no one
    try:
        ref = parse_and_optimize(ir_text, tm, target, context)
        try:
            obj = tm.emit_object(ref)
            # -O0 transforms nothing: the text given is the IR compiled, and printing the
            # module again cost a jit build's glue (300 KB of wrappers) ~4 ms of 35
            optimized = ir_text if opt_level(target) == 0 and isinstance(ir_text, str) \
                else _print_module(ref)
        finally:
            ref.close()  # before its context
    finally:
        context.close()
    obj_path, ir_path = path.with_suffix(".o"), path.with_suffix(".ll")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the IR and digest first and the object last, each renamed into place: a reader
        # finding the object finds its IR complete
        for final, data in ((ir_path, optimized.encode()),
                            (path.with_suffix(".sum"), _entry_digest(obj, optimized).encode()),
                            (obj_path, obj)):
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
    except OSError:
        pass  # a read-only cache only costs the next build its time
    from kiln.runtime import disk_cache

    disk_cache.stored()
    return obj, optimized


def _entry_digest(obj: bytes, ir_text: str) -> str:
    """A cache entry's lengths and CRC-32s (stored as ``<key>.sum``): catches truncated or
    flipped bytes for a fraction of a millisecond."""
    ir = ir_text.encode()
    return f"{len(obj)}:{zlib.crc32(obj):08x} {len(ir)}:{zlib.crc32(ir):08x}"


class LinkedIR:
    """The IR texts of several modules (``parts``) linked into one module's text, made when
    first asked for: a library's ``get_source("ll")``. Linking and printing a library's IR
    cost 20-30 ms of LLVM (the jit MLP's 10 modules) that every build waited for at its end.

    Example
    -------
    >>> ll = LinkedIR(["define i32 @one() { ret i32 1 }",
    ...                "declare i32 @one() define i32 @two() { ret i32 2 }"])
    >>> text = ll()
    >>> "@one()" in text and "@two()" in text and ll() is text
    True
    """

    def __init__(self, parts: Sequence[str]) -> None:
        self.parts = list(parts)
        self._text: str | None = None
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if self._text is None:
                self._text = self.parts[0] if len(self.parts) == 1 else self._link()
            return self._text

    def _link(self) -> str:
        _, llvm = initialized_llvm()
        context = llvm.create_context()
        try:
            whole = llvm.parse_assembly(self.parts[0], context)
            for text in self.parts[1:]:
                whole.link_in(llvm.parse_assembly(text, context))  # link_in frees the part
            text = str(whole)
            whole.close()
            return text
        finally:
            context.close()


def optimize(llvm, ref, tm, opt_level: int) -> None:
    """Run LLVM's O<n> pipeline with loop and SLP vectorization (at O2 and O3). The loop
    unroller follows the ``llvm.loop.unroll.*`` option :mod:`.codegen_llvm` puts on a loop."""
    vectorize = opt_level >= 2
    if hasattr(llvm, "create_pass_builder"):  # llvmlite >= 0.44: the new pass manager
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        tuning.loop_vectorization = vectorize
        tuning.slp_vectorization = vectorize
        tuning.loop_unrolling = vectorize
        passes = llvm.create_pass_builder(tm, tuning)
        passes.getModulePassManager().run(ref, passes)
        return
    builder = llvm.create_pass_manager_builder()  # older llvmlite: the legacy one
    builder.opt_level = opt_level
    builder.loop_vectorize = vectorize
    builder.slp_vectorize = vectorize
    manager = llvm.create_module_pass_manager()
    tm.add_analysis_passes(manager)
    builder.populate(manager)
    manager.run(ref)
