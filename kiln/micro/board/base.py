"""What every standalone board shares: the toolchain call, the run protocol, the result.

Entry points: :class:`Board` (the base of :class:`~kiln.micro.board.host.HostBoard` and
:class:`~kiln.micro.board.qemu.CortexMBoard`), :class:`RunResult`, :class:`ExitCode`,
:class:`MicroBoardError`, :class:`SourceGroup`, :func:`compile_objects`, :func:`source_dir`,
:func:`run_process`.

A board program (C, written against ``src/common/kiln_board.h``) reads its inputs from files
``input_<i>.bin`` (or, after printing ``kiln-ready``, from the console), writes
``output_<i>.bin`` (or ``kiln-output <i> <offset> <hex>`` console lines), prints one line
``kiln-result status=0 ticks_hi=H ticks_lo=L ticks_per_second=F stack_bytes=S
heap_peak_bytes=P`` (``ticks=N`` also accepted) and exits with an :class:`ExitCode`.
:meth:`Board.run` drives that protocol in a fresh directory.
"""

from __future__ import annotations

import enum
import hashlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kiln.runtime import config, disk_cache
from kiln.runtime.cc import kill_process_group
from kiln.runtime.error import TVMError

__all__ = ["Board", "RunResult", "ExitCode", "MicroBoardError", "MicroTimeoutError",
           "SourceGroup", "source_dir",
           "run_process", "parse_result_line", "parse_console_outputs"]


class MicroBoardError(TVMError):
    """A board program failed to build or run: the message holds the command and its output."""


class MicroTimeoutError(MicroBoardError):
    """A board program (or its build) outlived its time limit and was killed."""


class ExitCode(enum.IntEnum):
    """Exit statuses of a board program (``KILN_EXIT_*`` in ``kiln_board.h``)."""

    OK = 0
    IO = 2
    RUN = 3
    ABORT = 4
    FAULT = 5
    INIT = 6


_EXIT_MEANING = {
    ExitCode.IO: "an input file is missing or has the wrong size, or an output failed",
    ExitCode.RUN: "the model's run function returned an error",
    ExitCode.ABORT: "the runtime called TVMPlatformAbort",
    ExitCode.FAULT: "the CPU took a fault exception",
    ExitCode.INIT: "the runtime or executor failed to initialize",
}


def source_dir() -> Path:
    """The directory of the board C sources (``common/``, ``host/``, ``cortex_m/``)."""
    return Path(__file__).resolve().parent / "src"


@dataclass
class RunResult:
    """One standalone run: outputs, the board's tick count for the model's run call, memory."""

    outputs: list[np.ndarray]
    ticks: int
    ticks_per_second: float
    stack_bytes: int = 0
    heap_peak_bytes: int = 0
    instructions: int | None = None  # exact under QEMU -icount shift=0, else None
    console: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """The run call's time on the board's clock (virtual time under QEMU)."""
        return self.ticks / self.ticks_per_second


def parse_result_line(console: str) -> dict[str, int]:
    """The ``key=value`` integers of the last ``kiln-result`` line printed by a program."""
    lines = [ln for ln in console.splitlines() if ln.startswith("kiln-result ")]
    if not lines:
        raise MicroBoardError("the board program printed no 'kiln-result' line; console:\n"
                              + console[-2000:])
    fields = {}
    for item in lines[-1].split()[1:]:
        key, _, value = item.partition("=")
        try:
            fields[key] = int(value)
        except ValueError:
            raise MicroBoardError(f"malformed 'kiln-result' field {item!r} in "
                                  f"{lines[-1][:80]!r}") from None
    return fields


def parse_console_outputs(console: str, sizes: Sequence[int]) -> list[bytes]:
    """The outputs a ``KILN_LINKED_IO`` program printed as ``kiln-output <i> <offset> <hex>``
    lines, each checked to arrive whole and in order."""
    chunks: list[bytearray] = [bytearray() for _ in sizes]
    for line in console.splitlines():
        if not line.startswith("kiln-output "):
            continue
        parts = line.split()
        try:
            index, offset = int(parts[1]), int(parts[2])
            data = bytes.fromhex(parts[3] if len(parts) > 3 else "")
        except (IndexError, ValueError):
            raise MicroBoardError(f"malformed console output line: {line[:60]!r}") from None
        if not 0 <= index < len(sizes) or offset != len(chunks[index]):
            raise MicroBoardError(f"console output line out of order: {line[:60]!r}")
        chunks[index] += data
    for i, (chunk, size) in enumerate(zip(chunks, sizes)):
        if len(chunk) != size:
            raise MicroBoardError(f"output {i}: {len(chunk)} bytes on the console, expected "
                                  f"{size}")
    return [bytes(c) for c in chunks]


READY_LINE = b"kiln-ready\n"


def run_process(cmd: Sequence[str], cwd: str | Path, timeout: float, what: str,
                feed: bytes | None = None) -> tuple[int, str, str]:
    """Run ``cmd`` in its own process group; kill the whole group on timeout or error.

    Returns (exit status, stdout, stderr). With ``feed``, the bytes go to the program's
    stdin once it prints ``kiln-ready`` (a UART drops bytes sent before the receiver is on).
    A program that outlives ``timeout`` seconds raises :class:`MicroBoardError` after it and
    its children are killed.
    """
    proc = subprocess.Popen(list(cmd), cwd=cwd,
                            stdin=subprocess.DEVNULL if feed is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        if feed is None:
            out, err = proc.communicate(timeout=timeout)
        else:
            out, err = _feed_when_ready(proc, feed, timeout)
    except (subprocess.TimeoutExpired, _FedTimeout) as expired:
        kill_process_group(proc)
        out, err = (expired.out, expired.err) if isinstance(expired, _FedTimeout) \
            else proc.communicate()
        raise MicroTimeoutError(f"{what} did not finish within {timeout:g} s (killed): "
                              f"{' '.join(map(str, cmd))}\n{_tail(out, err)}") from None
    except BaseException:
        kill_process_group(proc)
        proc.wait()
        raise
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _feed_when_ready(proc: subprocess.Popen, feed: bytes,
                     timeout: float) -> tuple[bytes, bytes]:
    """Collect stdout/stderr; write ``feed`` to stdin after the ready line appears."""
    out, err = bytearray(), bytearray()
    ready = threading.Event()

    def pump(stream, sink, watch):
        for chunk in iter(lambda: stream.read1(4096), b""):
            sink += chunk
            if watch and not ready.is_set() and READY_LINE in sink:
                ready.set()
        ready.set()  # the program ended without asking: stop waiting

    threads = [threading.Thread(target=pump, args=(proc.stdout, out, True), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, err, False), daemon=True)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        if not ready.wait(timeout):
            raise subprocess.TimeoutExpired(proc.args, timeout)
        try:
            proc.stdin.write(feed)
            proc.stdin.close()
        except BrokenPipeError:
            pass  # it exited first; its status and output say why
        proc.wait(max(deadline - time.monotonic(), 0.001))
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        proc.wait()
        for t in threads:
            t.join(5)
        raise _FedTimeout(bytes(out), bytes(err)) from None
    for t in threads:
        t.join(5)
    return bytes(out), bytes(err)


class _FedTimeout(Exception):
    def __init__(self, out: bytes, err: bytes) -> None:
        super().__init__("timeout")
        self.out, self.err = out, err


def _tail(out: bytes | str, err: bytes | str) -> str:
    def text(b):
        return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
    return (text(out)[-2000:] + text(err)[-2000:]).strip()


def compile_command(cmd: Sequence[str], cwd: Path, what: str) -> None:
    """Run a compiler/linker command; raise :class:`MicroBoardError` with its output on error."""
    code, out, err = run_process(cmd, cwd, timeout=config.compile_timeout(), what=what)
    if code != 0:
        raise MicroBoardError(f"{what} failed (exit {code}):\n{' '.join(map(str, cmd))}\n"
                              f"{(out + err)[-6000:]}")


@dataclass(frozen=True)
class SourceGroup:
    """C sources compiled with the same include directories and definitions.

    Objects are cached by the compile command, the source's text and the text of every header
    under ``include_dirs``: keep a model's own include directory out of the runtime's group, so
    that the runtime's objects are shared by every model.
    """

    sources: tuple[Path, ...]
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(sources: Sequence[Path], include_dirs: Sequence[Path] = (),
           defines: dict[str, str] | None = None) -> SourceGroup:
        return SourceGroup(tuple(Path(s).resolve() for s in sources),
                           tuple(Path(d).resolve() for d in include_dirs),
                           tuple(sorted((defines or {}).items())))

    def flags(self) -> list[str]:
        return [*(f"-I{d}" for d in self.include_dirs), *(f"-D{k}={v}" for k, v in self.defines)]

    def headers_digest(self) -> str:
        digest = hashlib.sha256()
        for directory in self.include_dirs:
            for header in sorted(directory.rglob("*.h")):
                digest.update(str(header.relative_to(directory)).encode())
                digest.update(header.read_bytes())
        return digest.hexdigest()


def compile_objects(compiler: str, flags: Sequence[str], groups: Sequence[SourceGroup],
                    what: str) -> list[Path]:
    """Compile every source of ``groups`` to an object in kiln's cache (a hit compiles
    nothing); return the objects in order."""
    cache = config.cache_dir() / "micro-objects"
    cache.mkdir(parents=True, exist_ok=True)
    objects = []
    for group in groups:
        headers = group.headers_digest()
        for source in group.sources:
            cmd = [compiler, *flags, *group.flags(), "-c", str(source)]
            # Include paths differ per build directory; the headers' text is what matters.
            stable = [part for part in cmd[:-1] if not part.startswith("-I")]
            key = hashlib.sha256("\0".join([*stable, source.name, headers]).encode())
            key.update(source.read_bytes())
            obj = cache / f"{source.stem}-{key.hexdigest()[:24]}.o"
            if not disk_cache.touch(obj):  # a hit is marked used for the cache's size cap
                tmp = obj.with_suffix(f".{os.getpid()}.tmp")
                compile_command([*cmd, "-o", str(tmp)], cache, f"{what} ({source.name})")
                os.replace(tmp, obj)  # atomic: parallel builds never see half an object
                disk_cache.stored()
            objects.append(obj)
    return objects


class Board:
    """A place a standalone kiln program runs: how to build it and how to run it.

    Subclasses set :attr:`name`, :attr:`target` (the kiln target string models for this board
    are built with) and implement :meth:`build` (with :func:`compile_objects`) and
    :meth:`execute`.
    """

    name = ""
    target = ""
    default_timeout = 60.0

    def build(self, groups: Sequence[SourceGroup], build_dir: Path) -> Path:
        """Compile ``groups`` (plus the board's own sources) and link a program in
        ``build_dir``; return its path."""
        raise NotImplementedError

    def execute(self, program: Path, io_dir: Path, timeout: float,
                feed: bytes | None = None) -> tuple[int, str]:
        """Run ``program`` with its input/output files in ``io_dir``: (exit status, console).
        ``feed`` goes to the console's input once the program prints ``kiln-ready``."""
        raise NotImplementedError

    def instructions(self, ticks: int) -> int | None:
        """The instruction count behind ``ticks``, where the board can know it exactly."""
        return None

    def run(self, program: Path, inputs: Sequence[bytes | np.ndarray],
            outputs: Sequence[tuple[tuple[int, ...], str]],
            timeout: float | None = None, console_outputs: bool = False,
            console_inputs: bool = False) -> RunResult:
        """Run ``program`` once on ``inputs`` (raw bytes or arrays, in the program's input
        order); ``outputs`` gives each output's (shape, dtype) for reading it back, from the
        output files or, with ``console_outputs``, from the console's hex lines. With
        ``console_inputs`` the inputs go over the console (stdin, the UART) instead of
        files."""
        with tempfile.TemporaryDirectory(prefix=f"kiln-{self.name}-") as tmp:
            io_dir = Path(tmp)
            raw = [v.tobytes() if isinstance(v, np.ndarray) else bytes(v) for v in inputs]
            if not console_inputs:
                for i, data in enumerate(raw):
                    (io_dir / f"input_{i}.bin").write_bytes(data)
            code, console = self.execute(Path(program), io_dir,
                                         timeout or self.default_timeout,
                                         b"".join(raw) if console_inputs else None)
            if code != ExitCode.OK:
                meaning = _EXIT_MEANING.get(code, "unknown exit status")  # type: ignore
                if code < 0:  # a host program killed by a signal
                    meaning = f"killed by {signal.Signals(-code).name}"
                raise MicroBoardError(f"board {self.name!r}: program exited with status "
                                      f"{int(code)} ({meaning}); console:\n"
                                      f"{console[-3000:]}")
            fields = parse_result_line(console)
            sizes = [int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                     for shape, dtype in outputs]
            printed = parse_console_outputs(console, sizes) if console_outputs else None
            arrays = []
            for i, (shape, dtype) in enumerate(outputs):
                path = io_dir / f"output_{i}.bin"
                if printed is None and not path.exists():
                    raise MicroBoardError(f"board {self.name!r}: output {i} was not written")
                raw = printed[i] if printed is not None else path.read_bytes()
                data = np.frombuffer(raw, dtype=dtype)
                want = int(np.prod(shape, dtype=np.int64))
                if data.size != want:
                    raise MicroBoardError(f"board {self.name!r}: output {i} has {data.size} "
                                          f"elements, expected {want} for shape {shape}")
                arrays.append(data.reshape(shape).copy())
        ticks = (fields["ticks_hi"] << 32) | fields["ticks_lo"] if "ticks_hi" in fields \
            else fields.get("ticks", 0)
        return RunResult(outputs=arrays, ticks=ticks,
                         ticks_per_second=float(fields.get("ticks_per_second", 1)),
                         stack_bytes=fields.get("stack_bytes", 0),
                         heap_peak_bytes=fields.get("heap_peak_bytes", 0),
                         instructions=self.instructions(ticks), console=console,
                         extra=fields)
