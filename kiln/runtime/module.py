"""Module: a unit of compiled code holding PackedFuncs, loadable from and exportable to files.

Entry points: :class:`Module`, :class:`DSOModule`, :class:`InProcessLibrary`,
:class:`SystemLibModule`, :func:`load_module`, :func:`system_lib`, :func:`enabled`,
:func:`serialize_module_blob`, :func:`deserialize_module_blob`.

Writing a Module subclass (the contract other runtime and codegen modules follow)
----------------------------------------------------------------------------------
* Set the class attribute ``type_key`` to the module kind TVM uses (``"library"``, ``"c"``,
  ``"llvm"``, ``"GraphExecutorFactory"``, ``"VMExecutable"``). Subclasses are not registered
  with ``register_object``; they are all ``runtime.Module`` objects to the type system.
* Call ``super().__init__()``, then set attributes freely (modules are mutable runtime state).
* Implement ``_get_function(name)`` returning a :class:`PackedFunc` (or any Python callable,
  which is wrapped) or None when the module has no such function.
* Set ``_property_mask`` from :class:`ModuleProperty` bits: BINARY_SERIALIZABLE (0b001),
  RUNNABLE (0b010), DSO_EXPORTABLE (0b100).
* Binary-serializable modules implement ``save_to_binary() -> bytes`` and register a loader
  ``runtime.module.loadbinary_<type_key>`` taking those bytes and returning the module
  (``register_func`` from :mod:`kiln.runtime.registry`). ``export_library`` stores such modules
  in the module blob, and ``load_module`` rebuilds them with that loader.
* DSO-exportable modules (C source, LLVM) implement ``export_objects(workspace_dir) ->
  list[str]`` (paths of ``.c``/``.o`` files to compile and link; C files may include
  ``<tvm/runtime/c_backend_api.h>``) and ``link_options() -> list[str]`` (e.g.
  ``["-fopenmp"]``). All of them are compiled and linked into one shared library.
* A DSO module whose code registers its kernels with ``TVMBackendRegisterSystemLibSymbol``
  (a system library) has functions ``__tvm_is_system_module`` (returns True) and optionally
  ``__tvm_get_system_lib_prefix``; the exported blob then registers itself as
  ``<prefix>__tvm_dev_mblob`` so :func:`system_lib` rebuilds the tree.
* Optional: ``get_source(fmt)``, ``save(path, fmt)``, ``format``.

Module blob (``__tvm_dev_mblob``, TVM's layout): ``u64 n``, then ``n`` entries, each a
``string`` key — ``"_lib"`` (the shared library itself), ``"_import_tree"`` followed by
``vector<u64> row_ptr`` and ``vector<u64> child_indices`` (CSR over entries, root at 0), or a
module's ``type_key`` followed by its ``save_to_binary()`` bytes as a ``string`` (u64 length +
bytes: the framing lets the reader check every length). The shared library holds it as a
``const unsigned char __tvm_dev_mblob[]`` whose first 8 bytes are the blob's length.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import importlib
import importlib.util
import os
import re
import struct
import tarfile
import tempfile
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kiln.runtime import cc
from kiln.runtime.archive import extracted
from kiln.runtime.binary import BinaryReader, BinaryWriter
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object
from kiln.runtime.packed_func import PackedFunc, object_handle, runtime_library
from kiln.runtime.registry import get_global_func, register_func
from kiln.runtime.shared_library import (
    check_elf,
    read_blob_at,
    read_c_string,
    symbol_info,
)

__all__ = [
    "Module",
    "ModuleProperty",
    "DSOModule",
    "InProcessLibrary",
    "SystemLibModule",
    "load_module",
    "system_lib",
    "serialize_module_blob",
    "deserialize_module_blob",
    "enabled",
]

_BLOB_SYMBOL = "__tvm_dev_mblob"
_MODULE_CTX_SYMBOL = "__tvm_module_ctx"
_ENTRY_SYMBOL = "__tvm_main__"
_LINK_OPTIONS_FILE = "kiln_link_options.txt"
_OBJECT_SUFFIXES = (".c", ".cc", ".cpp", ".o", ".obj", ".S", ".s")


class ModuleProperty:
    """Bits of ``Module._property_mask`` (TVM's ``ModulePropertyMask``)."""

    BINARY_SERIALIZABLE = 0b001
    RUNNABLE = 0b010
    DSO_EXPORTABLE = 0b100


@register_object("runtime.Module")
class Module(Object):
    """Base class of compiled-code containers (TVM's ``runtime.Module``).

    Example
    -------
    >>> class Adder(Module):
    ...     type_key = "example.Adder"
    ...     def _get_function(self, name):
    ...         return (lambda a, b: a + b) if name == "add" else None
    >>> Adder()["add"](2, 3)
    5
    """

    _extra_slots = ("__dict__",)
    _property_mask = ModuleProperty.RUNNABLE

    def __init__(self) -> None:
        self._imports: list[Module] = []
        self._function_cache: dict[tuple[str, bool], PackedFunc] = {}
        self._env_cache: dict[str, PackedFunc] = {}

    # Modules are runtime state (imports, caches), not immutable IR.
    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        object.__delattr__(self, name)

    def _state(self, name: str, factory: Callable[[], Any]) -> Any:
        # Subclasses that forgot super().__init__() still get their caches.
        state = self.__dict__
        if name not in state:
            state[name] = factory()
        return state[name]

    def _get_function(self, name: str) -> Callable[..., Any] | None:
        """Subclass hook: this module's own function ``name``, or None."""
        return None

    # ---- functions ----

    def get_function(self, name: str, query_imports: bool = False) -> PackedFunc:
        """The function ``name`` (cached); with ``query_imports``, search imports depth-first.

        Raises AttributeError ``Module has no function 'name'`` when absent.
        """
        cache = self._state("_function_cache", dict)
        key = (name, bool(query_imports))
        func = cache.get(key)
        if func is None:
            func = self._find_function(name, query_imports)
            if func is None:
                raise AttributeError(f"Module has no function '{name}'")
            cache[key] = func
        return func

    def _find_function(self, name: str, query_imports: bool) -> PackedFunc | None:
        found = self._get_function(name)
        if found is not None:
            return found if isinstance(found, PackedFunc) else PackedFunc(found, name)
        if query_imports:
            for imported in self.imports:
                found = imported._find_function(name, True)
                if found is not None:
                    return found
        return None

    def __getitem__(self, name: str) -> PackedFunc:
        if not isinstance(name, str):
            raise ValueError(f"Can only take string as function name, got {type(name).__name__}")
        return self.get_function(name)

    def __call__(self, *args: Any) -> Any:
        return self.entry_func(*args)

    entry_name = _ENTRY_SYMBOL

    def implements_function(self, name: str, query_imports: bool = False) -> bool:
        """Whether ``get_function(name, query_imports)`` would succeed."""
        return self._find_function(name, query_imports) is not None

    @property
    def entry_func(self) -> PackedFunc:
        """The module's entry function (``__tvm_main__``)."""
        return self.get_function(_ENTRY_SYMBOL)

    def get_function_from_env(self, name: str) -> PackedFunc:
        """What ``TVMBackendGetFuncFromEnv`` finds: imports first, then the global registry."""
        cache = self._state("_env_cache", dict)  # imports only: the registry may change
        func = cache.get(name)
        if func is None:
            for imported in self.imports:
                func = imported._find_function(name, True)
                if func is not None:
                    cache[name] = func
                    return func
            func = get_global_func(name, allow_missing=True)
            if func is None:
                raise TVMError(
                    f"Cannot find function {name} in the imported modules or global registry"
                )
        return func

    # ---- imports ----

    @property
    def imports(self) -> list[Module]:
        """The imported modules (a copy of the list)."""
        return list(self._state("_imports", list))

    imported_modules = imports

    def import_module(self, module: Module) -> None:
        """Add ``module`` to this module's imports."""
        if not isinstance(module, Module):
            raise TypeError(f"import_module expects a Module, got {type(module).__name__}")
        self._state("_imports", list).append(module)
        self._state("_env_cache", dict).clear()
        self._state("_function_cache", dict).clear()

    # ---- properties ----

    @property
    def format(self) -> str:
        """The file format of this module's code ("" when it has none)."""
        return ""

    @property
    def is_binary_serializable(self) -> bool:
        return bool(self._property_mask & ModuleProperty.BINARY_SERIALIZABLE)

    @property
    def is_runnable(self) -> bool:
        return bool(self._property_mask & ModuleProperty.RUNNABLE)

    @property
    def is_dso_exportable(self) -> bool:
        return bool(self._property_mask & ModuleProperty.DSO_EXPORTABLE)

    def save_to_binary(self) -> bytes:
        """Serialize a binary-serializable module (its ``loadbinary_`` loader reads it back)."""
        raise TVMError(f"Module[{self.type_key}] does not support save_to_binary")

    def get_source(self, fmt: str = "") -> str:
        raise TVMError(f"Module[{self.type_key}] does not support get_source")

    def save(self, file_name: str | os.PathLike, fmt: str = "") -> None:
        raise TVMError(f"Module[{self.type_key}] does not support save")

    def export_objects(self, workspace_dir: str) -> list[str]:
        raise TVMError(f"Module[{self.type_key}] is not DSO exportable")

    def link_options(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        return f"Module({self.type_key}, {id(self):x})"

    # ---- timing ----

    def time_evaluator(
        self,
        func_name: str,
        dev: Any,
        number: int = 10,
        repeat: int = 1,
        min_repeat_ms: float = 0,
        limit_zero_time_iterations: int = 100,
        cooldown_interval_ms: float = 0,
        repeats_to_cooldown: int = 1,
        cache_flush_bytes: int = 0,
        f_preproc: str = "",
    ) -> Callable[..., Any]:
        """A function that runs ``func_name`` and returns timing statistics (seconds).

        Each of ``repeat`` measurements is the mean over ``number`` calls; ``number`` grows
        until a measurement lasts ``min_repeat_ms``. The result has ``.mean``, ``.median``,
        ``.results``. A repeat timed as zero is retried up to ``limit_zero_time_iterations``
        times; every ``repeats_to_cooldown`` repeats sleep ``cooldown_interval_ms``. ``dev``,
        ``cache_flush_bytes`` and ``f_preproc`` are accepted for TVM compatibility (kiln times
        host functions here; an RPC module's evaluator honours them on the server). Arguments
        a C int could not hold raise TVMError at once.

        Example
        -------
        >>> class M(Module):
        ...     def _get_function(self, name):
        ...         return lambda: None
        >>> timer = M().time_evaluator("f", None, number=3, repeat=2)
        >>> len(timer().results)
        2
        """
        from kiln.runtime.profiling import check_timing_args, time_repeats

        check_timing_args(number, repeat, min_repeat_ms, limit_zero_time_iterations,
                          cooldown_interval_ms, repeats_to_cooldown, cache_flush_bytes)
        func = self.get_function(func_name, query_imports=True)

        def evaluator(*args: Any) -> Any:
            call = func.prepare(*args)

            def run(times: int) -> None:
                for _ in range(times):
                    call()

            return time_repeats(run, repeat=repeat, number=number, min_repeat_ms=min_repeat_ms,
                                limit_zero_time_iterations=limit_zero_time_iterations,
                                cooldown_interval_ms=cooldown_interval_ms,
                                repeats_to_cooldown=repeats_to_cooldown)

        return evaluator

    # ---- export ----

    def export_library(
        self,
        file_name: str | os.PathLike,
        fcompile: Callable[..., Any] | None = None,
        addons: Sequence[str] | None = None,
        workspace_dir: str | None = None,
        options: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Write this module and its imports as a shared library (``.so``) or a ``.tar``.

        DSO-exportable modules are compiled and linked together; every other module of the
        import tree goes into the module blob, so :func:`load_module` rebuilds the whole tree.
        """
        file_name = os.fspath(file_name)
        modules = _collect_modules(self)
        for module in modules:
            if not (module.is_dso_exportable or module.is_binary_serializable):
                raise TVMError(
                    f"Module[{module.type_key}] is neither DSO exportable nor binary "
                    "serializable, so it cannot be exported"
                )
        with tempfile.TemporaryDirectory() as scratch:
            workdir = workspace_dir or scratch
            os.makedirs(workdir, exist_ok=True)
            files: list[str] = [os.fspath(a) for a in addons or ()]
            link_options: list[str] = []
            for index, module in enumerate(m for m in modules if m.is_dso_exportable):
                module_dir = os.path.join(workdir, f"lib{index}")
                os.makedirs(module_dir, exist_ok=True)
                files += [os.fspath(p) for p in module.export_objects(module_dir)]
                link_options += [o for o in module.link_options() if o not in link_options]
            if not self.is_dso_exportable or self.imports:
                blob_c = os.path.join(workdir, "devc.c")
                prefix = _system_lib_prefix(modules)
                Path(blob_c).write_text(_blob_c_source(serialize_module_blob(self), prefix))
                files.append(blob_c)
            if file_name.endswith(".tar") and fcompile is None:
                _create_tar(file_name, files, link_options)
                return
            fcompile = fcompile or cc.create_shared
            opts = list(cc.default_options() if options is None else options) + link_options
            fcompile(file_name, files, options=opts, **kwargs)


def _collect_modules(root: Module) -> list[Module]:
    """Every module of the import tree, breadth-first from ``root``, each once."""
    order, seen, queue = [], set(), [root]
    while queue:
        module = queue.pop(0)
        if id(module) in seen:
            continue
        seen.add(id(module))
        order.append(module)
        queue.extend(module.imports)
    return order


# ---- module blob ---------------------------------------------------------------------------


def serialize_module_blob(root: Module) -> bytes:
    """The module blob of ``root``'s import tree (layout in the module docstring).

    All DSO-exportable modules share one ``"_lib"`` entry: they become one shared library.
    """
    modules = _collect_modules(root)
    group_of: dict[int, int] = {}
    groups: list[Module | None] = []  # None stands for the "_lib" group
    lib_group = None
    for module in modules:
        if module.is_dso_exportable:
            if lib_group is None:
                lib_group = len(groups)
                groups.append(None)
            group_of[id(module)] = lib_group
        else:
            group_of[id(module)] = len(groups)
            groups.append(module)
    children: list[list[int]] = [[] for _ in groups]
    for module in modules:
        parent = group_of[id(module)]
        for imported in module.imports:
            child = group_of[id(imported)]
            if child != parent and child not in children[parent]:
                children[parent].append(child)
    writer = BinaryWriter()
    writer.u64(len(groups) + 1)
    for module in groups:
        if module is None:
            writer.string("_lib")
        else:
            writer.string(module.type_key)
            data = module.save_to_binary()
            if not isinstance(data, (bytes, bytearray)):
                raise TVMError(f"Module[{module.type_key}].save_to_binary must return bytes")
            writer.string(bytes(data))
    row_ptr = [0]
    for child_list in children:
        row_ptr.append(row_ptr[-1] + len(child_list))
    writer.string("_import_tree")
    writer.u64_vector(row_ptr)
    writer.u64_vector([c for child_list in children for c in child_list])
    return writer.getvalue()


# Runtime modules that register a loadbinary_ loader when imported. A fresh process that
# only calls load_module has not imported them yet, so the blob reader imports on demand.
BINARY_LOADER_MODULES = {
    "GraphExecutorFactory": "kiln.runtime.executor_factory",
    "VMExecutable": "kiln.runtime.vm",
    "opencl": "kiln.runtime.opencl",
}


def _binary_loader(key: str) -> PackedFunc:
    name = f"runtime.module.loadbinary_{key}"
    loader = get_global_func(name, allow_missing=True)
    if loader is None and key in BINARY_LOADER_MODULES:
        importlib.import_module(BINARY_LOADER_MODULES[key])
        loader = get_global_func(name, allow_missing=True)
    if loader is None:
        raise TVMError(
            f"module blob holds a Module[{key}] but no loader is registered: register {name}"
        )
    return loader


def deserialize_module_blob(blob: bytes, library: Module | None = None) -> Module:
    """Rebuild the module tree from a blob; ``library`` stands in for ``"_lib"`` entries."""
    reader = BinaryReader(blob, what="module blob")
    count = reader.count(8, "module blob entry count")
    modules: list[Module] = []
    row_ptr: list[int] = []
    child_indices: list[int] = []
    for _ in range(count):
        key = reader.string("module type key")
        if key == "_lib":
            if library is None:
                raise TVMError("module blob refers to a host library ('_lib') but none is loaded")
            modules.append(library)
        elif key == "_import_tree":
            row_ptr = reader.u64_vector("import tree row_ptr")
            child_indices = reader.u64_vector("import tree child indices")
        else:
            data = reader.string_bytes(f"binary of module {key!r}")
            loader = _binary_loader(key)
            try:
                module = loader(data)
            except TVMError:
                raise
            except Exception as err:  # a loader fed tampered bytes may fail any which way
                raise TVMError(
                    f"runtime.module.loadbinary_{key} failed: {type(err).__name__}: {err}"
                ) from err
            if not isinstance(module, Module):
                raise TVMError(f"runtime.module.loadbinary_{key} returned a non-Module")
            modules.append(module)
    reader.expect_end()
    if not row_ptr:  # legacy layout: every module is an import of the library
        if library is None:
            raise TVMError("module blob has no import tree and no host library")
        for module in modules:
            library.import_module(module)
        return library
    if not modules or len(row_ptr) != len(modules) + 1 or row_ptr[0] != 0:
        raise TVMError(
            f"module blob import tree is malformed: {len(row_ptr)} row pointers "
            f"for {len(modules)} modules"
        )
    for index, module in enumerate(modules):
        begin, end = row_ptr[index], row_ptr[index + 1]
        if not begin <= end <= len(child_indices):
            raise TVMError(f"module blob import tree row {index} is out of range")
        for child in child_indices[begin:end]:
            if child >= len(modules):
                raise TVMError(f"module blob import tree names module {child} of {len(modules)}")
            module.import_module(modules[child])
    return modules[0]


def _system_lib_prefix(modules: Sequence[Module]) -> str | None:
    """The symbol prefix when the DSO modules build a system library, else None.

    A DSO module says so as TVM's do: a ``__tvm_is_system_module`` function returning true,
    and optionally ``__tvm_get_system_lib_prefix`` returning the prefix.
    """
    for module in modules:
        if not module.is_dso_exportable:
            continue
        is_system = module._get_function("__tvm_is_system_module")
        if is_system is not None and is_system():
            get_prefix = module._get_function("__tvm_get_system_lib_prefix")
            return str(get_prefix()) if get_prefix is not None else ""
    return None


def _blob_c_source(blob: bytes, system_lib_prefix: str | None = None) -> str:
    """C source defining ``__tvm_dev_mblob``: u64 length (little-endian) then the blob.

    For a system library the blob also registers itself as ``<prefix>__tvm_dev_mblob`` with
    ``TVMBackendRegisterSystemLibSymbol`` when the program starts, so :func:`system_lib`
    finds it.
    """
    data = struct.pack("<Q", len(blob)) + blob
    # Three-digit octal escapes: unlike hex escapes they never swallow the next character,
    # and a string literal compiles much faster than a list of integers.
    lines = [
        '  "' + "".join(f"\\{byte:03o}" for byte in data[i : i + 64]) + '"'
        for i in range(0, len(data), 64)
    ]
    source = (
        "/* Module blob generated by kiln export_library. */\n"
        '__attribute__((visibility("default")))\n'
        f"const unsigned char {_BLOB_SYMBOL}[{len(data)}] =\n" + "\n".join(lines) + ";\n"
    )
    if system_lib_prefix is not None:
        source += (
            "int TVMBackendRegisterSystemLibSymbol(const char* name, void* ptr);\n"
            "__attribute__((constructor)) static void kiln_register_module_blob(void) {\n"
            f'  TVMBackendRegisterSystemLibSymbol("{system_lib_prefix}{_BLOB_SYMBOL}", '
            f"(void*){_BLOB_SYMBOL});\n}}\n"
        )
    return source


def _create_tar(output: str, files: Sequence[str], link_options: Sequence[str]) -> None:
    names = set()
    with tarfile.open(output, "w") as tar:
        for path in files:
            name = os.path.basename(path)
            while name in names:
                name = "_" + name
            names.add(name)
            tar.add(path, arcname=name)
        if link_options:
            with tempfile.TemporaryDirectory() as tmp:
                options_file = os.path.join(tmp, _LINK_OPTIONS_FILE)
                Path(options_file).write_text("\n".join(link_options))
                tar.add(options_file, arcname=_LINK_OPTIONS_FILE)


# ---- shared libraries ----------------------------------------------------------------------


class _LibraryContext:
    """What a library's ``__tvm_module_ctx`` points at: every live DSOModule loaded from it.

    dlopen hands out one copy of a library per path however often it is loaded, so the
    context must outlive any single DSOModule: kernels find functions through the newest
    live module that has imports, else through the global registry.
    """

    def __init__(self) -> None:
        self._modules: list[weakref.ref] = []

    def add(self, module: Module) -> None:
        self._modules = [ref for ref in self._modules if ref() is not None]
        self._modules.append(weakref.ref(module))

    def get_function_from_env(self, name: str) -> PackedFunc:
        live = [module for module in (ref() for ref in self._modules) if module is not None]
        with_imports = [module for module in live if module.imports]
        # With no live module left, an empty Module searches just the registry.
        return (with_imports or live or [Module()])[-1].get_function_from_env(name)


_library_contexts: dict[str, _LibraryContext] = {}


class DSOModule(Module):
    """A shared library loaded with dlopen; functions are found by symbol name."""

    type_key = "library"
    _property_mask = ModuleProperty.RUNNABLE

    def __init__(self, path: str) -> None:
        super().__init__()
        runtime_library()  # kernels resolve TVMAPISetLastError & co. against the support library
        self.path = os.path.realpath(path)
        check_elf(self.path)
        try:
            self.lib = ctypes.CDLL(self.path, mode=ctypes.RTLD_LOCAL)
        except OSError as err:
            raise TVMError(f"cannot load shared library {path}: {err}") from None
        ctx = self._symbol_address(_MODULE_CTX_SYMBOL)
        if ctx is not None:
            context = _library_contexts.setdefault(self.path, _LibraryContext())
            context.add(self)
            ctypes.c_void_p.from_address(ctx).value = object_handle(context)

    @property
    def format(self) -> str:
        return "so"

    def _symbol_address(self, name: str) -> int | None:
        try:
            address = ctypes.cast(self.lib[name], ctypes.c_void_p).value
        except AttributeError:
            return None
        # dlsym also searches the library's dependencies (libc…); only our own symbols count.
        owner, _ = symbol_info(address)
        if owner and os.path.realpath(owner) != self.path:
            return None
        return address

    def _get_function(self, name: str) -> PackedFunc | None:
        if name == _ENTRY_SYMBOL:
            entry = self._symbol_address(_ENTRY_SYMBOL)
            if entry is None:
                return None
            name = read_c_string(entry, self.path)  # a char array naming the entry
        address = self._symbol_address(name)
        if address is None:
            if self._symbol_address("get_c_metadata") is None:
                return None
            # an AOT library: lib["default"](dev) creates its executor (as in TVM)
            from kiln.runtime.aot_executor import executor_creator

            return executor_creator(self, name)
        return PackedFunc.from_c_address(address, owner=self, name=name)

    def read_blob(self) -> bytes | None:
        """The module blob compiled into this library, checked against the symbol's size."""
        address = self._symbol_address(_BLOB_SYMBOL)
        if address is None:
            return None
        _, symbol_size = symbol_info(address)
        return read_blob_at(address, symbol_size, self.path)


class InProcessLibrary(DSOModule):
    """Kernels a linker placed in this process's memory (kiln's LLVM libraries that are not
    exported: :mod:`kiln.target.llvm_jit`); functions are found by symbol name among the
    addresses the linker exported. ``keepalive`` owns that memory: the code stays valid
    while this module (or a PackedFunc of it) lives."""

    def __init__(self, addresses: dict[str, int], keepalive: Any, name: str) -> None:
        Module.__init__(self)
        runtime_library()  # the kernels call TVMAPISetLastError & co.
        self.path = name  # what messages call this library
        self.addresses = dict(addresses)
        self.keepalive = keepalive
        ctx = self.addresses.get(_MODULE_CTX_SYMBOL)
        if ctx is not None:  # this code is this module's alone: so is its context
            self.context = _LibraryContext()
            self.context.add(self)
            ctypes.c_void_p.from_address(ctx).value = object_handle(self.context)

    @property
    def format(self) -> str:
        return "in-process"

    def _symbol_address(self, name: str) -> int | None:
        return self.addresses.get(name)

    def _get_function(self, name: str) -> PackedFunc | None:
        if name == _ENTRY_SYMBOL:
            entry = self.addresses.get(_ENTRY_SYMBOL)
            if entry is None:
                return None
            # kiln's own LLVM wrote this NUL-terminated name (no file to distrust here)
            name = ctypes.string_at(entry).decode()
        return super()._get_function(name)

    def read_blob(self) -> bytes | None:
        return None  # only an exported library carries a module blob


def _load_so(path: str, fmt: str = "so") -> Module:
    library = DSOModule(path)
    blob = library.read_blob()
    if blob is None:
        return library
    try:
        return deserialize_module_blob(blob, library)
    except TVMError as err:
        raise TVMError(f"{path}: bad module blob: {err}") from err


# Flags an archive's kiln_link_options.txt may carry: what export_library writes (the
# target's codegen flags). Anything else could write files (-o, -MF, -Wl,-Map), load code into
# the compiler (-fplugin, -B, -specs) or read arbitrary paths, so it is refused by name.
ARCHIVE_LINK_OPTIONS = frozenset({
    "-O0", "-O1", "-O2", "-O3", "-Os", "-fPIC", "-fopenmp", "-pthread", "-lm",
    "-std=c99", "-std=gnu99", "-std=c11", "-std=gnu11", "-std=c17", "-std=gnu17",
    "-fno-math-errno", "-fno-trapping-math", "-ffast-math",
})
_ARCHIVE_MACHINE_OPTION = re.compile(r"-m(?:arch|cpu|tune)=[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
_MAX_LINK_OPTIONS_BYTES = 4096


def check_archive_link_options(text: bytes, where: str) -> list[str]:
    """The link options stored in a module archive, each checked against the allow-list.

    Only :data:`ARCHIVE_LINK_OPTIONS` and ``-march=``/``-mcpu=``/``-mtune=`` with a plain
    CPU name pass; any other option raises :class:`TVMError` naming it.
    """
    if len(text) > _MAX_LINK_OPTIONS_BYTES:
        raise TVMError(f"{where}: {_LINK_OPTIONS_FILE} is {len(text)} bytes, more than "
                       f"{_MAX_LINK_OPTIONS_BYTES}")
    try:
        options = text.decode("ascii").split()
    except UnicodeDecodeError:
        raise TVMError(f"{where}: {_LINK_OPTIONS_FILE} is not ASCII text") from None
    for option in options:
        if option not in ARCHIVE_LINK_OPTIONS and not _ARCHIVE_MACHINE_OPTION.fullmatch(option):
            raise TVMError(
                f"{where}: {_LINK_OPTIONS_FILE} holds the option {option!r}, which is not "
                "allowed in a module archive (allowed: -march=/-mcpu=/-mtune=<cpu>, "
                f"{', '.join(sorted(ARCHIVE_LINK_OPTIONS))})"
            )
    return options


_C_COMMENT_OR_LITERAL = re.compile(
    rb"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|/\*.*?(?:\*/|\Z)|//[^\n]*""", re.S)
# Anywhere, not only at a line start: "/**/#include" is a directive too (comments are spaces
# by then). A string literal that merely mentions one is refused as well; kernels have none.
_INCLUDE_DIRECTIVE = re.compile(
    rb"(?:#|%:)[ \t]*(include|include_next|import|embed)\b[ \t]*(.*)$", re.M)
_SAFE_INCLUDE = re.compile(rb"""(?:<([A-Za-z0-9_./+-]+)>|"([A-Za-z0-9_./+-]+)")[ \t]*""")
_ASSEMBLER_FILE_DIRECTIVE = re.compile(rb"\.(?:incbin|include)\b")


def check_archive_source(data: bytes, where: str) -> None:
    """Refuse archive sources whose compilation would read files outside the compiler's
    include path: absolute or ``..`` includes, computed includes, ``#embed``, and the
    assembler's ``.incbin``/``.include`` (``#include "/dev/zero"`` makes gcc read forever).
    """
    text = data.replace(b"\\\n", b"").replace(b"\\\r\n", b"")  # line splices come first
    # Comments become spaces before directives are read; literals are kept as they are.
    text = _C_COMMENT_OR_LITERAL.sub(lambda m: m.group(1) or b" ", text)
    for match in _INCLUDE_DIRECTIVE.finditer(text):
        directive, rest = match.group(1).decode(), match.group(2)
        target = _SAFE_INCLUDE.fullmatch(rest)
        name = target and (target.group(1) or target.group(2)).decode()
        if directive == "embed" or not name or name.startswith("/") or ".." in name.split("/"):
            shown = rest.decode("utf-8", "replace")[:80]
            raise TVMError(f"{where}: '#{directive} {shown}' may read a file outside the "
                           "include path; module archives may include only headers by "
                           "relative name")
    if _ASSEMBLER_FILE_DIRECTIVE.search(text):
        raise TVMError(f"{where}: assembler .incbin/.include directives are not allowed in "
                       "a module archive")


def _load_tar(path: str, fmt: str = "tar") -> Module:
    """Link a ``.tar`` written by ``export_library`` into a cached library and load it.

    The archive is data: it is unpacked with :func:`kiln.runtime.archive.safe_extract`, its
    members must be plain top-level files, and its stored link options pass the allow-list
    of :func:`check_archive_link_options`; its sources include headers only by relative name
    (:func:`check_archive_source`). The sources it holds are compiled and then run,
    so an untrusted archive is as unsafe to load as an untrusted ``.so``.
    """
    with extracted(path) as root:
        names = []
        for entry in sorted(root.iterdir()):
            if not entry.is_file():
                raise TVMError(f"{path}: unexpected tar member {entry.name!r} (a directory; "
                               "a module archive holds only top-level files)")
            names.append(entry.name)
        sources = [str(root / n) for n in names if n.endswith(_OBJECT_SUFFIXES)]
        if not sources:
            raise TVMError(f"{path}: the archive holds no object or source files")
        for source in sources:
            if not source.endswith((".o", ".obj")):
                check_archive_source(Path(source).read_bytes(), f"{path}: {Path(source).name}")
        options = cc.default_options()
        if _LINK_OPTIONS_FILE in names:
            stored = check_archive_link_options((root / _LINK_OPTIONS_FILE).read_bytes(), path)
            options += [o for o in stored if o not in options]
        library = cc.cached_shared_library(sources, options)
    return _load_so(str(library))


def _compile_and_load(path: str, fmt: str) -> Module:
    return _load_so(str(cc.cached_shared_library([path])))


for _fmt, _loader in {
    "so": _load_so,
    "dll": _load_so,
    "dylib": _load_so,
    "tar": _load_tar,
    "o": _compile_and_load,
    "c": _compile_and_load,
}.items():
    register_func(f"runtime.module.loadfile_{_fmt}", _loader, override=True)


def load_module(path: str | os.PathLike, fmt: str = "",
                expected_sha256: str | None = None) -> Module:
    """Load a module from a file: ``.so`` (dlopen), ``.tar`` (link, then load), ``.o``/``.c``.

    The loader is the global function ``runtime.module.loadfile_<fmt>`` (``fmt`` defaults to
    the file's extension). A library's module blob is unpacked into its import tree.

    Loading a shared library runs its code (its constructors run inside ``dlopen``, and its
    kernels run when called), exactly as in TVM and every dlopen-based loader; a ``.tar``,
    ``.o`` or ``.c`` module is compiled into one first. **Never load a module from an
    untrusted source.** kiln checks file contents it parses itself (ELF headers, the module
    blob, archive members and link options) and raises :class:`TVMError` on tampering, but it
    cannot make a library's own code safe. For deployments, pass ``expected_sha256`` (the
    hex SHA-256 of the file you built): the file is read once, checked, and the checked bytes
    are what gets loaded (from a private copy), so a file swapped after the check is not run.

    Example
    -------
    >>> load_module("/no/such/lib.so")
    Traceback (most recent call last):
    ...
    kiln.runtime.error.TVMError: cannot load module: no such file '/no/such/lib.so'
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TVMError(f"cannot load module: no such file {path!r}")
    if not fmt:
        base = os.path.basename(path)
        fmt = base.rsplit(".", 1)[-1] if "." in base else ""
    loader = get_global_func(f"runtime.module.loadfile_{fmt}", allow_missing=True)
    if loader is None:
        raise TVMError(
            f"cannot load {path!r}: no loader for format {fmt!r} "
            f"(register runtime.module.loadfile_{fmt})"
        )
    if expected_sha256 is not None:
        path = _checked_copy(path, expected_sha256)
    return loader(path, fmt)


_checked_copies: list[tempfile.TemporaryDirectory] = []  # live as long as the process


def _checked_copy(path: str, expected_sha256: str) -> str:
    """A private copy of ``path`` whose bytes have the SHA-256 ``expected_sha256``."""
    if not isinstance(expected_sha256, str) or not re.fullmatch(r"[0-9a-fA-F]{64}",
                                                                expected_sha256):
        raise TVMError(f"expected_sha256 must be 64 hex digits, got {expected_sha256!r}")
    with open(path, "rb") as file:
        data = file.read()
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256.lower():
        raise TVMError(
            f"cannot load {path!r}: its SHA-256 is {actual}, expected {expected_sha256.lower()}"
        )
    # A loaded library must stay on disk (dlopen keeps one copy per path), so the private
    # directory lives until the interpreter exits.
    copy_dir = tempfile.TemporaryDirectory(prefix="kiln_checked_")
    _checked_copies.append(copy_dir)
    copy = os.path.join(copy_dir.name, os.path.basename(path))
    with open(copy, "xb") as file:
        file.write(data)
    return copy


_ENABLED_TARGETS = {"cpu": True, "c": True, "stackvm": True, "llvm": None}


def enabled(target: str) -> bool:
    """Whether kiln can build and run code for ``target`` here (TVM's ``runtime.enabled``).

    Host targets are enabled; ``llvm`` needs llvmlite; GPU back ends are not part of kiln.

    Example
    -------
    >>> enabled("c"), enabled("cuda")
    (True, False)
    """
    kind = target.split()[0] if target else ""
    status = _ENABLED_TARGETS.get(kind, False)
    if status is None:
        status = importlib.util.find_spec("llvmlite") is not None
    return status


# ---- system library ------------------------------------------------------------------------


class SystemLibModule(Module):
    """Functions registered by statically linked code via ``TVMBackendRegisterSystemLibSymbol``."""

    type_key = "library"
    _property_mask = ModuleProperty.RUNNABLE

    def __init__(self, prefix: str = "") -> None:
        super().__init__()
        self.prefix = prefix
        lib = runtime_library()
        ctx = lib.KilnSystemLibLookup((prefix + _MODULE_CTX_SYMBOL).encode())
        if ctx:
            ctypes.c_void_p.from_address(ctx).value = object_handle(self)

    def _lookup(self, name: str) -> int | None:
        return runtime_library().KilnSystemLibLookup((self.prefix + name).encode()) or None

    def _get_function(self, name: str) -> PackedFunc | None:
        address = self._lookup(name)
        return PackedFunc.from_c_address(address, owner=self, name=name) if address else None


_system_libs: dict[str, Module] = {}


def system_lib(prefix: str = "") -> Module:
    """The system library: kernels and blob registered by linked-in code (one per prefix).

    Example
    -------
    >>> lib = system_lib()
    >>> lib.type_key
    'library'
    """
    root = _system_libs.get(prefix)
    if root is None:
        library = SystemLibModule(prefix)
        root = library
        address = library._lookup(_BLOB_SYMBOL)
        if address is not None:
            blob = read_blob_at(address, symbol_info(address)[1], "system library")
            root = deserialize_module_blob(blob, library)
        _system_libs[prefix] = root
    return root

