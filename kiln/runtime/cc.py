"""The one C toolchain driver: find the compiler, compile, link, and cache builds on disk.

Entry points: :func:`create_shared`, :func:`compile_object`, :func:`create_staticlib`,
:func:`link_objects`, :func:`cached_shared_library`, :func:`cross_compiler`,
:func:`find_compiler`, :func:`default_options`, :func:`include_dirs`. Public as
``kiln.contrib.cc`` (TVM's path).

The compiler is ``$CC`` if set, else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``.
Host kernels build with ``-O3 -march=native -fPIC`` plus ``-fopenmp`` when a probe shows
OpenMP works with this compiler. A failing command raises :class:`TVMError` whose message
holds the command line and the compiler's output verbatim.

:func:`cached_shared_library` keys a build by the sources' text, the contents of the headers
they include (:mod:`kiln.runtime.cc_headers`), the flags and the compiler's version string;
the library is written to a temporary name and renamed into place, so parallel processes
(pytest-xdist workers) never see a half-written file.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kiln.runtime import cc_headers, config, disk_cache
from kiln.runtime.error import TVMError

__all__ = [
    "compile_in_background",
    "find_compiler",
    "compiler_accepts",
    "compiler_version",
    "openmp_available",
    "default_options",
    "run_compiler",
    "kill_process_group",
    "include_dirs",
    "compile_object",
    "create_shared",
    "link_objects",
    "create_staticlib",
    "cross_compiler",
    "cached_shared_library",
]

_SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".S", ".s")


def include_dirs() -> list[str]:
    """Directories holding ``dlpack/dlpack.h`` and ``tvm/runtime/c_*_api.h``."""
    return [str(Path(__file__).resolve().parent / "include")]


def find_compiler() -> str:
    """The C compiler command: ``$CC``, else ``cc``, ``gcc`` or ``clang`` from ``PATH``."""
    from_env = os.environ.get("CC")
    if from_env:
        return from_env
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return path
    raise TVMError("no C compiler found: set $CC or install cc, gcc or clang")


@functools.cache
def compiler_accepts(options: tuple[str, ...], cc: str | None = None) -> bool:
    """Whether the C compiler takes ``options`` (a ``-march=`` name it may not know: gcc 12
    has no ``znver4``); asked once per process."""
    cc = cc or find_compiler()
    try:
        run_compiler([cc, *options, "-E", "-x", "c", os.devnull, "-o", os.devnull],
                     "Probing compiler options")
    except TVMError:
        return False
    return True


@functools.cache
def compiler_version(cc: str | None = None) -> str:
    """First line of ``cc --version`` (part of every cache key)."""
    cc = cc or find_compiler()
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, check=False,
                              timeout=config.compile_timeout())
    except OSError as err:
        raise TVMError(f"cannot run the C compiler {cc!r}: {err}") from None
    except subprocess.TimeoutExpired:
        raise TVMError(f"'{cc} --version' did not finish (KILN_CC_TIMEOUT)") from None
    lines = (proc.stdout or proc.stderr).splitlines()
    return lines[0] if lines else cc


@functools.cache
def openmp_available(cc: str | None = None) -> bool:
    """Whether ``cc -fopenmp`` builds and links a shared library that uses OpenMP.

    A success is remembered in the cache directory (per compiler and version): the probe
    costs a compiler run, a fifth of a second, in every process that loads kiln's runtime.
    A failure is not (it may be a timeout on a loaded machine)."""
    cc = cc or find_compiler()
    try:
        version = compiler_version(cc)
    except TVMError:  # a compiler that does not even answer --version: build without
        return False
    key = hashlib.sha256(f"{cc}\0{version}".encode()).hexdigest()[:24]
    marker = config.cache_dir() / "cc" / f"openmp_ok_{key}"
    if marker.exists():
        return True
    probe = "#include <omp.h>\nint kiln_probe(void) { return omp_get_max_threads(); }\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.c")
        src.write_text(probe)
        cmd = [cc, "-fopenmp", "-fPIC", "-shared", str(src), "-o", str(Path(tmp, "probe.so"))]
        try:
            run_compiler(cmd, "OpenMP probe")
        except TVMError:  # no OpenMP (or a compiler that hangs on it): build without
            return False
    with contextlib.suppress(OSError):  # a read-only cache only costs the next probe
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return True


def default_options(cc: str | None = None) -> list[str]:
    """Flags for host kernels: ``-O3 -march=native -fPIC`` (+ ``-fopenmp`` when it works)."""
    options = ["-O3", "-march=native", "-fPIC"]
    if openmp_available(cc):
        options.append("-fopenmp")
    return options


def kill_process_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group of ``proc`` (started with ``start_new_session=True``), so
    that its children (cc1/as/ld, QEMU) die with it."""
    with contextlib.suppress(ProcessLookupError):  # it may have just finished
        os.killpg(proc.pid, signal.SIGKILL)


def run_compiler(cmd: Sequence[str], what: str) -> None:
    """Run one compiler/archiver command; raise :class:`TVMError` with its output on failure.

    The command gets its own process group and ``KILN_CC_TIMEOUT`` seconds; past that the whole
    group is killed and :class:`TVMError` says so.
    """
    cmd = list(cmd)
    if config.debug_level() >= 4:
        print(f"[kiln cc] {' '.join(cmd)}", file=sys.stderr)
    timeout = config.compile_timeout()
    try:
        # Its own process group, so a timeout stops cc1/as/ld too, not just the gcc driver.
        # Diagnostics quote the source, which need not be UTF-8: never fail on decoding them.
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, encoding="utf-8",
                                errors="replace", start_new_session=True)
    except OSError as err:
        raise TVMError(f"{what} failed: cannot run {cmd[0]!r}: {err}") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        proc.communicate()
        raise TVMError(
            f"{what} did not finish within {timeout:.0f} s (KILN_CC_TIMEOUT).\n"
            f"command: {' '.join(cmd)}"
        ) from None
    except BaseException:  # interrupted: leave no compiler behind
        kill_process_group(proc)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise TVMError(
            f"{what} failed (exit code {proc.returncode}).\ncommand: {' '.join(cmd)}\n"
            f"{stdout}{stderr}"
        )


def _include_flags() -> list[str]:
    return [f"-I{d}" for d in include_dirs()]


def compile_object(
    output: str | os.PathLike,
    source: str | os.PathLike,
    options: Sequence[str] | None = None,
    cc: str | None = None,
) -> str:
    """Compile one C source file to a position-independent object file.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a.c").write_text("int one(void){return 1;}")
    24
    >>> compile_object(d / "a.o", d / "a.c").endswith("a.o")
    True
    """
    cc = cc or find_compiler()
    opts = list(default_options(cc) if options is None else options)
    cmd = [cc, "-c", *opts, "-fPIC", *_include_flags(), os.fspath(source), "-o", os.fspath(output)]
    run_compiler(cmd, "Compilation")
    return os.fspath(output)


# (pid, executor): the threads that wait for background compilers (compile_in_background),
# one per CPU; a forked child makes its own, the parent's threads do not exist there
_BACKGROUND: tuple[int, Any] | None = None
# object cache path -> the Future of a compile in flight: a second request for the same
# object (a library build asking for what a kernel builder started) waits for the first
_IN_FLIGHT: dict[Path, Any] = {}
_IN_FLIGHT_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's compiler threads: their futures would never
    finish there (a request for an object in flight in the parent waited forever), and the
    lock may have been copied held."""
    global _BACKGROUND, _IN_FLIGHT_LOCK
    _BACKGROUND = None
    _IN_FLIGHT.clear()
    _IN_FLIGHT_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def compile_in_background(source: str, options: Sequence[str], cc: str | None = None, *,
                          quote_dir: str | None = None, with_headers: bool = False
                          ) -> Callable[[], Any]:
    """Start compiling C ``source`` to an object file; return a function giving its bytes
    (``with_headers``: ``(bytes, the headers it read)``).

    The compiler runs while the caller goes on (LLVM's optimizer, or Python lowering the next
    kernel: both leave Python's lock free, so two cores both work); up to one compiler per
    CPU runs at once. The function waits for it and raises :class:`TVMError` as
    :func:`run_compiler` does. Objects are cached by source, flags, compiler version and the
    contents of the headers the source includes (``KILN_CACHE_DIR/cc/obj_<key>.o``,
    :mod:`kiln.runtime.cc_headers`): a hit starts nothing, and a request for an object
    whose compile is in flight waits for that one. ``quote_dir``: where ``#include "..."``
    looks first (the directory of a source file).
    """
    result = _compile_cached(source, options, cc, quote_dir)
    return result if with_headers else lambda: result()[0]


def _compile_cached(source: str, options: Sequence[str], cc: str | None,
                    quote_dir: str | None) -> Callable[[], tuple[bytes, tuple[str, ...]]]:
    global _BACKGROUND
    from concurrent.futures import ThreadPoolExecutor

    cc = cc or find_compiler()
    options = [*options, *([f"-iquote{quote_dir}"] if quote_dir else [])]
    digest = hashlib.sha256()
    for part in (compiler_version(cc), *options, *include_dirs(), source):
        digest.update(part.encode() + b"\0")
    folder, key = config.cache_dir() / "cc", digest.hexdigest()[:32]
    found = _cached_object(folder, key)
    if found is not None:
        return lambda: found

    def build() -> tuple[bytes, tuple[str, ...]]:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as tmp:
                src, depfile = Path(tmp, "source.c"), Path(tmp, "source.d")
                src.write_text(source)
                obj = Path(compile_object(Path(tmp, "source.o"), src,
                                          [*options, *cc_headers.depfile_flags(depfile)], cc))
                headers = cc_headers.read_depfile(depfile, src)
                data = obj.read_bytes()
                full_key = cc_headers.keyed_by_headers(key, headers)
                if full_key is not None:  # a header removed during the compile: keep none
                    digest = Path(tmp, "source.sum")
                    digest.write_text(_object_digest(data))
                    os.replace(digest, folder / f"obj_{full_key}.sum")
                    os.replace(obj, folder / f"obj_{full_key}.o")  # atomic, as the list
                    cc_headers.remember_headers(folder, key, headers)
            disk_cache.stored()
            return data, headers
        finally:
            with _IN_FLIGHT_LOCK:
                _IN_FLIGHT.pop(key, None)

    with _IN_FLIGHT_LOCK:
        future = _IN_FLIGHT.get(key)
        found = _cached_object(folder, key) if future is None else None
        if found is not None:  # finished since the look above
            return lambda: found
        if future is None:
            if _BACKGROUND is None or _BACKGROUND[0] != os.getpid():
                workers = max(1, os.cpu_count() or 1)
                _BACKGROUND = (os.getpid(), ThreadPoolExecutor(workers,
                                                               thread_name_prefix="kiln-cc"))
            future = _IN_FLIGHT[key] = _BACKGROUND[1].submit(build)
    return future.result


def _cached_object(folder: Path, key: str) -> tuple[bytes, tuple[str, ...]] | None:
    """The cached object compiled under ``key`` with the headers as they are now, and those
    headers (None: a miss), marked used."""
    headers = cc_headers.remembered_headers(folder, key)
    full_key = None if headers is None else cc_headers.keyed_by_headers(key, headers)
    if full_key is None:
        return None
    path = folder / f"obj_{full_key}.o"
    try:
        data = path.read_bytes()
        # checked before use: an llvm library links import_c objects in process, where
        # JITLink trusts their headers (a damaged one aborts the process); a mismatch is a miss
        if path.with_suffix(".sum").read_text() != _object_digest(data):
            return None
    except (OSError, UnicodeDecodeError):
        return None
    disk_cache.touch(path)
    disk_cache.touch(folder / f"headers_{key}.txt")
    return data, headers


def _object_digest(data: bytes) -> str:
    """A cached object's length and CRC-32 (``obj_<key>.sum``): catches truncated or flipped
    bytes for a fraction of a millisecond."""
    return f"{len(data)}:{zlib.crc32(data):08x}"


def create_shared(
    output: str | os.PathLike,
    objects: str | os.PathLike | Sequence[str | os.PathLike],
    options: Sequence[str] | None = None,
    cc: str | None = None,
) -> str:
    """Compile and link sources and/or object files into a shared library (TVM's signature).

    ``options`` replaces :func:`default_options` when given; ``-shared -fPIC`` and the kiln
    include directories are always added. Several C files compile in parallel, one cached
    object each, before the link. Compiler errors raise :class:`TVMError` with the
    compiler's output verbatim.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "a.c").write_text("int one(void){return 1;}")
    24
    >>> create_shared(d / "a.so", [d / "a.c"]).endswith("a.so")
    True
    """
    cc = cc or find_compiler()
    inputs = [objects] if isinstance(objects, (str, os.PathLike)) else list(objects)
    opts = list(default_options(cc) if options is None else options)
    with tempfile.TemporaryDirectory() as tmp:
        inputs = _compile_c_files(inputs, opts, cc, tmp)
        cmd = [cc, "-shared", "-fPIC", *opts, *_include_flags(), *map(os.fspath, inputs)]
        cmd += ["-o", os.fspath(output), "-lm", "-lpthread"]
        run_compiler(cmd, "Compilation")
    return os.fspath(output)


def _compile_c_files(inputs: list[Any], options: Sequence[str], cc: str,
                     folder: str) -> list[Any]:
    """``inputs`` with each C file replaced by its object when there are several (the
    ``export_library`` of a ``c`` library's units): compiled in parallel, each cached
    (:func:`compile_in_background`). One C file, or one that cannot be read as text or
    cached, leaves ``inputs`` to the single compiler call."""
    sources = [i for i, item in enumerate(inputs) if os.fspath(item).endswith(".c")]
    if len(sources) < 2:
        return inputs
    try:
        started = {i: compile_in_background(Path(inputs[i]).read_text(), options, cc,
                                            quote_dir=str(Path(inputs[i]).resolve().parent))
                   for i in sources}
    except (OSError, UnicodeDecodeError):
        return inputs
    compiled = list(inputs)
    for i, result in started.items():
        try:
            data = result()
        except TVMError as err:
            raise TVMError(f"compiling {os.fspath(inputs[i])}: {err}") from None
        except OSError:  # a cache folder that cannot be written: compile in the one call
            return inputs
        compiled[i] = Path(folder, f"{i}_{Path(inputs[i]).stem}.o")
        compiled[i].write_bytes(data)
    return compiled


create_shared.output_format = "so"  # read by export_library, as TVM's fcompile attributes are


def link_relocatable(
    output: str | os.PathLike,
    objects: Sequence[str | os.PathLike],
    cc: str | None = None,
) -> str:
    """Link object files into one relocatable object file (``cc -r``): what
    ``Module.save("k.o")`` writes for a library LLVM emitted as one object per kernel."""
    cc = cc or find_compiler()
    cmd = [cc, "-r", "-nostdlib", *map(os.fspath, objects), "-o", os.fspath(output)]
    run_compiler(cmd, "Linking")
    return os.fspath(output)


def create_staticlib(
    output: str | os.PathLike,
    inputs: Sequence[str | os.PathLike],
    options: Sequence[str] | None = None,
    cc: str | None = None,
) -> str:
    """Archive object files (sources are compiled first) into a static library with ``ar``."""
    ar = os.environ.get("AR") or shutil.which("ar")
    if not ar:
        raise TVMError("create_staticlib needs `ar` (binutils) on PATH or $AR")
    objects = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, item in enumerate(inputs):
            path = os.fspath(item)
            if path.endswith(_SOURCE_SUFFIXES):
                obj = os.path.join(tmp, f"{index}_{Path(path).stem}.o")
                compile_object(obj, path, options, cc)
                path = obj
            objects.append(path)
        if os.path.exists(output):
            os.remove(output)
        run_compiler([ar, "rcs", os.fspath(output), *objects], "Archiving")
    return os.fspath(output)


create_staticlib.output_format = "a"


def cross_compiler(
    compile_func: str | Callable[..., Any],
    options: Sequence[str] | None = None,
    output_format: str | None = None,
) -> Callable[..., Any]:
    """An ``fcompile`` for ``export_library`` that uses another compiler or extra flags.

    ``compile_func`` is a compiler command (e.g. ``"aarch64-linux-gnu-gcc"``) or a function
    with :func:`create_shared`'s signature; ``options`` are prepended to the caller's.

    Example
    -------
    >>> fcompile = cross_compiler("gcc", ["-O2"])
    >>> fcompile.output_format
    'so'
    """
    base_options = list(options or ())

    def compile_with(output, objects, options=None, **kwargs):
        merged = base_options + list(options or ())
        if isinstance(compile_func, str):
            return create_shared(output, objects, merged, cc=compile_func)
        return compile_func(output, objects, options=merged, **kwargs)

    compile_with.output_format = output_format or getattr(compile_func, "output_format", "so")
    return compile_with


@functools.cache
def _system_linker() -> str | None:
    """``$LD``, else ``ld`` from ``PATH`` (None where there is none)."""
    return os.environ.get("LD") or shutil.which("ld")


def link_objects(output: str | os.PathLike, objects: Sequence[str | os.PathLike],
                 options: Sequence[str] | None = None, cc: str | None = None) -> str:
    """Link object files that need only the C library and libm (LLVM's kernels and glue)
    into a shared library with the system linker itself: ``ld -shared`` takes a quarter of
    the time of the compiler driver, which starts collect2 and adds start files such a
    library does not use. Falls back to :func:`create_shared` where there is no ``ld`` or
    it fails."""
    ld = _system_linker()
    if ld is not None:
        cmd = [ld, "-shared", "--eh-frame-hdr", "-o", os.fspath(output),
               *map(os.fspath, objects), "-lm", "-lc"]
        try:
            run_compiler(cmd, "Linking")
            return os.fspath(output)
        except TVMError:
            pass  # e.g. an ld for another machine, or libraries it cannot find
    return create_shared(output, objects, options, cc)


def cached_shared_library(
    sources: Mapping[str, str] | Sequence[str | os.PathLike],
    options: Sequence[str] | None = None,
    cc: str | None = None,
    objects_only: bool = False,
) -> Path:
    """Build (or reuse) a shared library from C sources; return its path in the cache.

    ``sources`` is either ``{file name: C text}`` or a list of files (sources or objects).
    The cache key covers every file's content, the contents of the headers the C files
    include (:mod:`kiln.runtime.cc_headers`), the flags and the compiler version, so a hit
    never does any compilation. The C files compile in parallel, each to its own cached
    object (:func:`compile_in_background`), and link. ``objects_only``: the files are objects
    needing only libc and libm, linked by :func:`link_objects`.

    Example
    -------
    >>> lib = cached_shared_library({"k.c": "int answer(void) { return 42; }"})
    >>> lib.suffix
    '.so'
    """
    cc = cc or find_compiler()
    opts = list(default_options(cc) if options is None else options)
    folders: dict[str, str] = {}  # a source file's own directory
    if isinstance(sources, Mapping):
        files = {name: text.encode() for name, text in sources.items()}
    else:
        files = {}
        for index, item in enumerate(sources):
            path = Path(item)
            try:
                files[f"{index}_{path.name}"] = path.read_bytes()
            except OSError as err:
                raise TVMError(f"cannot read source {path}: {err}") from None
            folders[f"{index}_{path.name}"] = str(path.resolve().parent)
    digest = hashlib.sha256()
    for part in (compiler_version(cc), *opts, *include_dirs(), "ld" if objects_only else ""):
        digest.update(part.encode() + b"\0")
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    folder, key = config.cache_dir() / "cc", digest.hexdigest()[:32]
    # a hit needs the headers the sources read last time to be unchanged (cc_headers)
    headers = cc_headers.remembered_headers(folder, key)
    full_key = None if headers is None else cc_headers.keyed_by_headers(key, headers)
    if full_key is not None and disk_cache.touch(folder / f"lib_{full_key}.so"):
        disk_cache.touch(folder / f"headers_{key}.txt")  # a hit, marked used for the cap
        return folder / f"lib_{full_key}.so"
    folder.mkdir(parents=True, exist_ok=True)
    # Each C source compiles on its own, in parallel and cached with the headers it reads (a
    # kernel builder may have started it already); then all link. A file's own directory is
    # where its quoted includes look first, as when the compiler reads the file itself.
    started = {}
    for name, data in files.items():
        if name.endswith(".c"):
            with contextlib.suppress(UnicodeDecodeError):  # left to the link call
                started[name] = compile_in_background(data.decode(), opts, cc,
                                                      quote_dir=folders.get(name),
                                                      with_headers=True)
    read: set[str] = set()
    for name, result in started.items():
        files[name], found = result()
        files[f"{Path(name).stem}.o"] = files.pop(name)
        read.update(found)
    headers = tuple(sorted(read))
    target = folder / f"lib_{cc_headers.keyed_by_headers(key, headers) or key}.so"
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        inputs = []
        for name, data in files.items():
            path = Path(tmp, name)
            path.write_bytes(data)
            inputs.append(path)
        staged = Path(tmp, "lib.so")
        if objects_only:
            link_objects(staged, inputs, opts, cc)
        else:
            create_shared(staged, inputs, opts, cc)
        os.replace(staged, target)  # atomic: readers see nothing or the whole library
    cc_headers.remember_headers(folder, key, headers)
    disk_cache.stored()
    if config.debug_level() >= 4:
        print(f"[kiln cc] cached {target}", file=sys.stderr)
    return target
