"""A pool of persistent worker processes whose calls can time out or crash independently.

Entry points: :class:`WorkerPool` (``run(calls, timeout)``).

Builders and runners need what ``concurrent.futures`` does not give: a call that hangs is
killed (its worker restarts) while the other workers keep their state, and a call that
crashes its process (a kernel's segfault) is reported as a crash, not as a broken pool.
Workers are fresh Python processes (TVM's PopenPool idea: no forked copy of the caller's
threads or LLVM state, and no re-import of the caller's ``__main__`` script, so unguarded
scripts work) talking pickles over two pipes; they live until :meth:`WorkerPool.close`, so
each pays the import of kiln once. They see the caller's ``sys.path``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["WorkerPool"]

# seconds a new worker may take to import kiln (a loaded 2-core machine is slow)
_STARTUP_TIMEOUT = 120.0


def _serve(conn: Any) -> None:
    """The worker loop: receive ``(func, args)``, send back ``("ok", value)`` or
    ``("error", message)``."""
    while True:
        try:
            func, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", func(*args))
        except BaseException as err:  # reported to the caller, the worker lives on
            reply = ("error", f"{type(err).__name__}: {err}"[:1024])
        conn.send(reply)


def main(read_fd: int, write_fd: int) -> None:
    """Entry of a worker process: serve calls over the two inherited pipe ends."""
    conn = _Duplex(Connection(read_fd, writable=False), Connection(write_fd, readable=False))
    conn.send(("ready", None))  # imports done: call timeouts start counting now
    _serve(conn)


class _Duplex:
    """Two one-way pipe connections used as one."""

    def __init__(self, reader: Connection, writer: Connection) -> None:
        self.reader, self.writer = reader, writer

    def recv(self) -> Any:
        return self.reader.recv()

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class _Worker:
    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        code = (f"from kiln.autotvm.measure.worker import main; "
                f"main({to_child_r}, {from_child_w})")
        self.proc = subprocess.Popen([sys.executable, "-c", code], env=env,
                                     pass_fds=(to_child_r, from_child_w),
                                     stdin=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self.conn = _Duplex(Connection(from_child_r, writable=False),
                            Connection(to_child_w, readable=False))
        self.ready = False

    def wait_ready(self, timeout: float = _STARTUP_TIMEOUT) -> None:
        """Block until the worker has imported kiln (or raise if it died or hung)."""
        if self.ready:
            return
        if not self.conn.reader.poll(timeout):
            self.kill()
            raise TVMError(f"an AutoTVM worker process did not start in {timeout:g} s")
        try:
            self.conn.recv()
        except (EOFError, OSError):
            raise TVMError(f"an AutoTVM worker process exited at startup (exit code "
                           f"{self.proc.wait(5)})") from None
        self.ready = True

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        self.proc.kill()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # SIGKILL is pending: a loaded machine may take
            pass                           # a while to reap it, and it cannot survive
        self.conn.close()


class WorkerPool:
    """``n`` worker processes; :meth:`run` spreads calls over them."""

    def __init__(self, n: int) -> None:
        self.n = max(1, int(n))
        self._workers: list[_Worker] = []

    def _ensure(self) -> None:
        self._workers = [w for w in self._workers if w.alive]
        while len(self._workers) < self.n:
            self._workers.append(_Worker())
        for worker in self._workers:  # started together, so their imports overlap
            worker.wait_ready()

    def run(self, calls: list[tuple[Any, tuple]], timeout: float) -> list[tuple[str, Any]]:
        """Run ``func(*args)`` for each call; per call ``("ok", value)``, ``("error",
        message)``, ``("timeout", seconds)`` or ``("crash", exit code)``, in order."""
        self._ensure()
        results: list[tuple[str, Any] | None] = [None] * len(calls)
        pending = list(enumerate(calls))
        busy: dict[int, tuple[_Worker, int, float]] = {}  # id(reader) -> worker, call, deadline
        idle = list(self._workers)
        while pending or busy:
            while idle and pending:
                worker = idle.pop()
                worker.wait_ready()
                index, (func, args) = pending.pop(0)
                worker.conn.send((func, args))
                busy[id(worker.conn.reader)] = (worker, index, time.monotonic() + timeout)
            next_deadline = min(d for _, _, d in busy.values())
            ready = wait([w.conn.reader for w, _, _ in busy.values()],
                         max(0.0, next_deadline - time.monotonic()))
            for reader in ready:
                worker, index, _ = busy.pop(id(reader))
                try:
                    results[index] = reader.recv()
                    idle.append(worker)
                except (EOFError, OSError):
                    worker.proc.wait(5)
                    results[index] = ("crash", worker.exitcode)
                    worker.conn.close()
                    idle.append(self._replace(worker))
            now = time.monotonic()
            for key, (worker, index, deadline) in list(busy.items()):
                if now >= deadline:
                    del busy[key]
                    worker.kill()
                    results[index] = ("timeout", timeout)
                    idle.append(self._replace(worker))
        return [r if r is not None else ("crash", None) for r in results]

    def _replace(self, worker: _Worker) -> _Worker:
        fresh = _Worker()
        self._workers = [fresh if w is worker else w for w in self._workers]
        return fresh

    def close(self) -> None:
        """Stop every worker."""
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the daemon processes die with it
            pass
