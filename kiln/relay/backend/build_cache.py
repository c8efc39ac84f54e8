"""The on-disk cache of whole ``relay.build`` results: a second build of a model compiles nothing.

Entry points: :func:`build_key`, :func:`load_build`, :func:`store_build`, :class:`CachedBuild`,
:func:`compile_context_key` (the part of the key that is not the model; the TE compiler's
on-disk cache of lowered kernels uses it too).

A graph-executor build (``Runtime("cpp")``, native ``llvm``/``c`` kernels) is stored under
``KILN_CACHE_DIR/build/<key>/``: the graph JSON, the lifted params (TVM's params blob) and the
kernel library's sources and objects, which are relinked through the C toolchain's own cache
(a hit there loads the ``.so`` that is already on disk). The key (:func:`build_key`) covers
everything a build's output depends on:

- the input module: its text without the constants' data (names, types, attributes: the
  structural hash ignores names and parameter types, and is a 64-bit hash besides), its
  structural hash (with each constant's CRC-32) and an Adler-32 of every constant's bytes;
- the ``params`` bound by name (names, dtypes, shapes, CRC-32 and Adler-32 of the bytes);
- the targets (device type -> target string), the host target, ``mod_name``;
- the ``PassContext`` (opt level, required and disabled passes, config);
- kiln itself: its version and a fingerprint of its source files (size and mtime of every
  file of the package), the host CPU (``-mcpu=native`` code) and the ``KILN_*``/``TVM_*``
  environment variables that may change generated code;
- op attributes and strategies registered from outside kiln (a test or a user overriding a
  strategy gets another key).

A build is not cached (neither looked up nor stored) when the pass context has instruments
(they expect to see the passes run), when tuning records are active (their configs decide the
kernels), or when ``KILN_BUILD_CACHE=0``. A cache entry that cannot be read (truncated,
tampered, written by another layout) is ignored with a warning and rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import tempfile
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.runtime import config, disk_cache
from kiln.runtime.error import TVMError

__all__ = ["build_key", "compile_context_key", "load_build", "store_build", "CachedBuild",
           "LAYOUT_VERSION"]

# bump when the stored layout changes: older entries then miss instead of failing to load
LAYOUT_VERSION = "kiln-build-cache-2"
# environment variables that never change what a build generates
_NEUTRAL_ENV = frozenset({"KILN_DEBUG", "KILN_CACHE_DIR", "KILN_BUILD_CACHE", "KILN_CC_TIMEOUT",
                          "KILN_NUM_THREADS", "TVM_NUM_THREADS"})


@dataclass
class CachedBuild:
    """What a cache hit gives back: enough to make a ``GraphExecutorFactoryModule``."""

    graph_json: str
    lib: Any
    params: dict
    stats: dict
    path: Path


# ---- the key -------------------------------------------------------------------------------

@functools.cache
def _kiln_fingerprint() -> str:
    """Size and mtime of every file of the kiln package: any edit of kiln changes the key."""
    import kiln

    root = Path(kiln.__file__).parent
    digest = hashlib.blake2b(kiln.__version__.encode(), digest_size=16)
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".so", ".o")):
                continue
            stat = os.stat(os.path.join(folder, name))
            rel = os.path.relpath(os.path.join(folder, name), root)
            digest.update(f"{rel}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


@functools.cache
def _host_fingerprint() -> str:
    """The machine code generated for ``-mcpu=native`` (or no ``-mcpu``) depends on it."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "flags", "Features")):
                    cpu += line
                if line.strip() == "":
                    break
    except OSError:
        pass
    return f"{platform.machine()}\0{platform.system()}\0{cpu}"


def _is_foreign(value: Any) -> bool:
    """Whether ``value`` is a function defined outside kiln (a user's or a test's override)."""
    module = getattr(value, "__module__", None) or ""
    return callable(value) and not (module == "kiln" or module.startswith("kiln."))


def _foreign_registrations() -> Iterator[str]:
    """Op attributes and strategies that code outside kiln registered. (Global functions
    are not looked at: a build calling one, an external codegen, makes a library this cache
    does not store.)"""
    from kiln.ir.op import registered_attrs
    from kiln.relay.op.strategy.registry import registered_strategy_functions

    def name_of(value: Any) -> str:
        func = getattr(value, "func", value)  # a functools.partial names its function
        return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"

    for attr, op_name, value, plevel in registered_attrs():
        if _is_foreign(value):
            yield f"attr {attr} {op_name} {plevel} {name_of(value)}"
    for where, value in registered_strategy_functions():
        if _is_foreign(value):
            yield f"strategy {where} {name_of(value)}"


def _array_checksum(array: np.ndarray) -> str:
    """Adler-32 of an array's bytes (without copying them) with its dtype and shape.

    The structural hash already has each constant's CRC-32; the Adler-32 makes the check 64
    bits wide, at a tenth of a second for ResNet-18's 45 MB of weights less than SHA-256
    would cost (the key is against accidental reuse, not an adversary: whoever can write
    the cache directory can change the libraries in it anyway)."""
    return f"{array.dtype}{array.shape}{zlib.adler32(_bytes_of(array)):08x}"


def _bytes_of(array: np.ndarray) -> np.ndarray:
    """The bytes of ``array`` as a uint8 view (a copy only when it is not contiguous; any
    dtype, bfloat16 included, which has no buffer format of its own)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def _constants_digest(mod: Any, digest: Any) -> None:
    """Feed the checksum of every constant of ``mod``'s Relay functions, in a fixed order."""
    from kiln.relay import expr as rx
    from kiln.relay.expr_functor import post_order_visit

    def visit(node: Any) -> None:
        if isinstance(node, rx.Constant):  # read in place: numpy() would copy the weights
            digest.update(_array_checksum(np.array(node.data, copy=False)).encode())

    for gvar in sorted(mod.functions, key=lambda g: g.name_hint):
        func = mod.functions[gvar]
        if isinstance(func, rx.Function):
            post_order_visit(func, visit)


def _params_digest(params: dict | None, digest: Any) -> None:
    for name in sorted(params or {}):
        value = params[name]
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        # params are not in the structural hash: both checksums here
        crc = zlib.crc32(_bytes_of(array))
        digest.update(f"\0{name}\0{_array_checksum(array)}{crc:08x}".encode())


def compile_context_key() -> str | None:
    """What besides its input a compilation's result depends on, as one string: the pass
    context, kiln's source fingerprint, the host CPU, the ``KILN_*``/``TVM_*`` environment
    and user-registered op attributes and strategies. None when nothing may be cached now
    (``KILN_BUILD_CACHE=0``, pass instruments, tuning records in effect)."""
    from kiln.ir.transform import PassContext
    from kiln.relay.op.strategy.registry import tuning_active

    if not config.build_cache_enabled():
        return None
    ctx = PassContext.current()
    if ctx.instruments or tuning_active():
        return None
    return "\0".join([
        str(ctx.opt_level), ",".join(sorted(ctx.required_pass)),
        ",".join(sorted(ctx.disabled_pass)), repr(sorted(ctx.config.items(), key=str)),
        _kiln_fingerprint(), _host_fingerprint(),
        repr(sorted((k, v) for k, v in os.environ.items()
                    if k.startswith(("KILN_", "TVM_")) and k not in _NEUTRAL_ENV)),
        "\n".join(sorted(_foreign_registrations()))])


def build_key(ir_mod: Any, params: dict | None, targets: dict[int, Any], host: Any,
              mod_name: str) -> str | None:
    """The cache key of ``relay.build(ir_mod, ...)`` under the current PassContext, or None
    when this build must not be cached (see the module docstring)."""
    from kiln.ir.structural import structural_hash

    context = compile_context_key()
    if context is None:
        return None
    digest = hashlib.blake2b(LAYOUT_VERSION.encode(), digest_size=20)
    try:
        text = ir_mod.astext(show_meta_data=False)
    except (TVMError, RecursionError):  # a module the printer cannot show is built uncached
        return None
    parts = [str(structural_hash(ir_mod)), text, mod_name,
             ";".join(f"{k}={targets[k]}" for k in sorted(targets)), str(host), context]
    digest.update("\0\0".join(parts).encode())
    _constants_digest(ir_mod, digest)
    _params_digest(params, digest)
    return digest.hexdigest()


# ---- store and load ------------------------------------------------------------------------

def _entry(key: str) -> Path:
    return config.cache_dir() / "build" / key


def _library_parts(lib: Any) -> list[dict] | None:
    """The stored description of ``lib`` and its imports, or None when some module is not a
    native kernel library this cache can rebuild (OpenCL, external codegen, foreign code)."""
    from kiln.target.build import NativeModule

    modules = [lib, *lib.imported_modules]
    if any(type(m) is not NativeModule or m.foreign_triple or m.imported_modules
           for m in modules):
        return None
    return [{"kind": m.type_key, "sources": m.sources, "objects": sorted(m.objects),
             "function_names": m.function_names, "options": m.options,
             "text": {fmt: text for fmt, text in m.text.items() if isinstance(text, str)},
             # LLVM IR not linked yet (kiln.target.llvm_toolchain.LinkedIR): its parts
             "ir_parts": getattr(m.text.get("ll"), "parts", None)}
            for m in modules]


def store_build(key: str, graph_json: str, lib: Any, params: dict, stats: dict) -> None:
    """Write one build under ``key`` (renamed into place whole: a reader sees all or nothing).
    A build whose library cannot be rebuilt from its parts, or a read-only cache, stores
    nothing."""
    from kiln.runtime.params import save_param_dict

    parts = _library_parts(lib)
    if parts is None:
        return
    final = _entry(key)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-"))
        files = {"params.bin": save_param_dict(params)}
        for index, module in enumerate([lib, *lib.imported_modules]):
            for name, data in module.objects.items():
                files[f"{index}_{name}"] = data
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        meta = {"layout": LAYOUT_VERSION, "graph_json": graph_json, "modules": parts,
                "stats": stats, "files": {name: _file_digest(data)
                                          for name, data in files.items()}}
        # meta.json last: its presence says the entry is complete
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.replace(tmp, final)
        except OSError:  # another process stored the same key first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass
    disk_cache.stored()


def _file_digest(data: bytes) -> str:
    """CRC-32 and length: catches truncation and flipped bits in tens of milliseconds."""
    return f"{len(data)}:{zlib.crc32(data):08x}"


def _read_checked(folder: Path, name: str, digests: dict) -> bytes:
    """A stored file's bytes, checked against the digest meta.json recorded for it."""
    data = (folder / name).read_bytes()
    if digests.get(name) != _file_digest(data):
        raise TVMError(f"{name} does not match its recorded digest ({len(data)} bytes)")
    return data


def _rebuild_module(index: int, part: dict, folder: Path, digests: dict, target: Any) -> Any:
    from kiln.target.build import NativeModule

    objects = {name: _read_checked(folder, f"{index}_{name}", digests)
               for name in part["objects"]}
    text: dict[str, Any] = dict(part["text"])
    ir_parts = part.get("ir_parts")
    if ir_parts is not None:
        if not isinstance(ir_parts, list) or not all(isinstance(p, str) for p in ir_parts):
            raise TVMError("ir_parts is not a list of IR texts")
        from kiln.target.llvm_toolchain import LinkedIR

        text["ll"] = text[""] = LinkedIR(ir_parts)
    if part["kind"] == "llvm" and "ll" in text:
        text["asm"] = _assembly_of(text["ll"], target)
    return NativeModule(part["kind"], part["sources"], objects, part["function_names"],
                        part["options"], text)


def _assembly_of(ir_text: str | Callable[[], str], target: Any) -> Callable[[], str]:
    """The module's assembly, made on request as a fresh build does (it costs as much as the
    object file)."""

    def make() -> str:
        from kiln.target.llvm_toolchain import host_target_machine, initialized_llvm

        llvm = initialized_llvm()[1]
        ir = ir_text() if callable(ir_text) else ir_text
        return host_target_machine(target).emit_assembly(llvm.parse_assembly(ir))

    return make


def load_build(key: str, target: Any) -> CachedBuild | None:
    """The build stored under ``key``, or None on a miss. An unreadable entry is removed with
    a warning (the caller then builds and stores it again)."""
    folder = _entry(key)
    with disk_cache.reading():  # no evictor moves the folder while it is read
        return _load_entry(folder, target)


def _load_entry(folder: Path, target: Any) -> CachedBuild | None:
    from kiln.runtime.params import load_param_dict

    meta_path = folder / "meta.json"
    if not meta_path.exists():
        return None
    disk_cache.touch(folder)  # used: the cache's size cap keeps it (kiln.runtime.disk_cache)
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("layout") != LAYOUT_VERSION:
            raise TVMError(f"layout {meta.get('layout')!r}, expected {LAYOUT_VERSION!r}")
        digests = meta["files"]
        params = load_param_dict(_read_checked(folder, "params.bin", digests))
        modules = [_rebuild_module(i, part, folder, digests, target)
                   for i, part in enumerate(meta["modules"])]
        graph_json, stats = meta["graph_json"], dict(meta["stats"])
        if not isinstance(graph_json, str):
            raise TVMError("graph_json is not a string")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, TVMError) as err:
        warnings.warn(f"kiln build cache: ignoring the unreadable entry {folder} "
                      f"({type(err).__name__}: {err}); building again", stacklevel=4)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    lib = modules[0]
    for module in modules[1:]:
        lib.import_module(module)
    return CachedBuild(graph_json, lib, params, stats, folder)
