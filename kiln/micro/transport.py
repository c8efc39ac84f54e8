"""Byte transports between the host and a microTVM device (TVM's ``tvm.micro.transport``).

A :class:`Transport` moves raw bytes (a UART, a pipe to a host process, a Project API server);
the framing and session layers (:mod:`kiln.micro.framing`, :mod:`kiln.micro.session_layer`)
run on top of it. :class:`SubprocessTransport` talks to a program over its stdin/stdout, as the
``crt`` template's host firmware does.

Entry points: :class:`Transport`, :class:`TransportTimeouts`, :class:`SubprocessTransport`,
:class:`IoTimeoutError`, :class:`TransportClosedError`, :func:`debug_transport_timeouts`.
"""

from __future__ import annotations

import abc
import collections
import os
import select
import subprocess
import time
from collections.abc import Sequence

from kiln.runtime.error import TVMError

#: How long the session layer waits (TVM's names): between StartSession retries, for the whole
#: handshake, and for each reply once established. 0 means "no limit" for the last two.
TransportTimeouts = collections.namedtuple(
    "TransportTimeouts",
    ["session_start_retry_timeout_sec", "session_start_timeout_sec",
     "session_established_timeout_sec"],
)


class IoTimeoutError(TVMError):
    """No data could be read (or not all data written) before the timeout."""


class TransportClosedError(TVMError):
    """The transport can no longer move bytes (the device exited, the pipe or port closed)."""


def debug_transport_timeouts(session_start_retry_timeout_sec: float = 0) -> TransportTimeouts:
    """Timeouts for a device under a debugger: wait forever once started."""
    return TransportTimeouts(session_start_retry_timeout_sec, 0, 0)


class Transport(abc.ABC):
    """A byte channel to a device; a context manager that opens and closes it."""

    def __enter__(self):
        self.open()
        return self

    def __exit__(self, exc_type, exc_value, exc_traceback):
        self.close()

    @abc.abstractmethod
    def timeouts(self) -> TransportTimeouts:
        """The timeouts suited to this link."""

    @abc.abstractmethod
    def open(self) -> None:
        """Acquire what the link needs (start a process, open a port)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the link; idempotent."""

    @abc.abstractmethod
    def read(self, n: int, timeout_sec: float | None) -> bytes:
        """Up to ``n`` bytes, at least one; :class:`IoTimeoutError` when none came in time
        (``None`` waits forever), :class:`TransportClosedError` when the link is gone."""

    @abc.abstractmethod
    def write(self, data: bytes, timeout_sec: float | None) -> int:
        """Write some of ``data`` (at least one byte); return how many were written."""


def write_all(transport: Transport, data: bytes, timeout_sec: float | None) -> None:
    """Write every byte of ``data`` through ``transport.write``."""
    view = memoryview(bytes(data))
    while view:
        view = view[transport.write(view.tobytes(), timeout_sec):]


def _wait(fd: int, for_write: bool, timeout_sec: float | None) -> bool:
    """Whether ``fd`` became ready before the timeout."""
    sets = ([], [fd], []) if for_write else ([fd], [], [])
    return bool(select.select(*sets, timeout_sec)[0 if not for_write else 1])


class SubprocessTransport(Transport):
    """A program's stdin/stdout as the link (the ``crt`` template's host firmware).

    ``args`` is the command line; the program's stderr is inherited so its crashes show.
    Reading after the program exited raises :class:`TransportClosedError`.
    """

    def __init__(self, args: Sequence[str], timeouts: TransportTimeouts | None = None,
                 cwd: str | None = None):
        self.args = list(args)
        self.cwd = cwd
        self._timeouts = timeouts or TransportTimeouts(1.0, 10.0, 0)
        self.proc: subprocess.Popen | None = None

    def timeouts(self) -> TransportTimeouts:
        return self._timeouts

    def open(self) -> None:
        if self.proc is not None:
            return
        try:
            self.proc = subprocess.Popen(
                self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=self.cwd,
                bufsize=0,
            )
        except OSError as err:
            raise TransportClosedError(f"cannot start {self.args[0]!r}: {err}") from None
        os.set_blocking(self.proc.stdout.fileno(), False)
        os.set_blocking(self.proc.stdin.fileno(), False)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _require(self) -> subprocess.Popen:
        if self.proc is None:
            raise TransportClosedError("transport is not open")
        return self.proc

    def read(self, n: int, timeout_sec: float | None) -> bytes:
        proc = self._require()
        fd = proc.stdout.fileno()
        if not _wait(fd, False, timeout_sec):
            raise IoTimeoutError(f"no data from {self.args[0]!r} within {timeout_sec} s")
        data = os.read(fd, n)
        if not data:
            code = proc.poll()
            raise TransportClosedError(
                f"{self.args[0]!r} closed its output"
                + (f" (exit code {code})" if code is not None else "")
            )
        return data

    def write(self, data: bytes, timeout_sec: float | None) -> int:
        proc = self._require()
        fd = proc.stdin.fileno()
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not _wait(fd, True, remaining):
                raise IoTimeoutError(f"{self.args[0]!r} did not accept data within "
                                     f"{timeout_sec} s")
            try:
                return os.write(fd, data)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError) as err:
                raise TransportClosedError(f"{self.args[0]!r} closed its input: {err}") from None
