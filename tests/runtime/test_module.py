"""Module: load .so/.tar, export_library, the module blob, system lib, time_evaluator."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kiln.contrib import cc
from kiln.runtime import module as module_lib
from kiln.runtime import ndarray
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError
from kiln.runtime.module import (
    DSOModule,
    Module,
    ModuleProperty,
    deserialize_module_blob,
    load_module,
    serialize_module_blob,
    system_lib,
)
from kiln.runtime.registry import register_func, remove_global_func

ADD_C = r"""
#include <tvm/runtime/c_backend_api.h>

const char __tvm_main__[] = "add_f32";

int add_f32(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  if (n != 3) { TVMAPISetLastError("add_f32: expected 3 arguments"); return -1; }
  DLTensor* a = (DLTensor*)args[0].v_handle;
  DLTensor* b = (DLTensor*)args[1].v_handle;
  DLTensor* c = (DLTensor*)args[2].v_handle;
  int64_t size = 1;
  for (int i = 0; i < a->ndim; ++i) size *= a->shape[i];
  for (int64_t i = 0; i < size; ++i)
    ((float*)c->data)[i] = ((const float*)a->data)[i] + ((const float*)b->data)[i];
  return 0;
}
"""


class CSourceModule(Module):
    """A DSO-exportable module holding C source (what the C codegen produces)."""

    type_key = "c"
    _property_mask = ModuleProperty.RUNNABLE | ModuleProperty.DSO_EXPORTABLE

    def __init__(self, code: str) -> None:
        super().__init__()
        self.code = code

    def export_objects(self, workspace_dir: str) -> list[str]:
        path = os.path.join(workspace_dir, "kernels.c")
        Path(path).write_text(self.code)
        return [path]

    def link_options(self) -> list[str]:
        return ["-lm"]

    def get_source(self, fmt: str = "") -> str:
        return self.code


class OffsetModule(Module):
    """A binary-serializable module: it stores one float and adds it through its import."""

    type_key = "test.Offset"
    _property_mask = ModuleProperty.RUNNABLE | ModuleProperty.BINARY_SERIALIZABLE

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset

    def _get_function(self, name: str):
        if name == "offset":
            return lambda: self.offset
        return None

    def save_to_binary(self) -> bytes:
        return struct.pack("<d", self.offset)


def load_offset(data: bytes) -> OffsetModule:
    if len(data) != 8:
        raise TVMError(f"test.Offset blob must be 8 bytes, got {len(data)}")
    return OffsetModule(struct.unpack("<d", data)[0])


register_func("runtime.module.loadbinary_test.Offset", load_offset, override=True)


@pytest.fixture
def operands(rng):
    a_np, b_np = rng.standard_normal(7, dtype=np.float32), rng.standard_normal(7, np.float32)
    return a_np, b_np, ndarray.array(a_np), ndarray.array(b_np), ndarray.empty((7,), "float32")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """Export once per module: a plain .so, a .tar, and a .so with a module blob."""
    out = tmp_path_factory.mktemp("export")
    paths = {"so": out / "plain.so", "tar": out / "plain.tar", "blob": out / "with_blob.so"}
    CSourceModule(ADD_C).export_library(paths["so"])
    CSourceModule(ADD_C).export_library(paths["tar"])
    root = OffsetModule(1.5)
    root.import_module(CSourceModule(ADD_C))
    root.export_library(paths["blob"])
    return paths


def test_exported_so_loads_and_runs(exported, operands) -> None:
    a_np, b_np, a, b, c = operands
    lib = load_module(exported["so"])
    assert isinstance(lib, DSOModule) and lib.type_key == "library" and lib.format == "so"
    assert lib.read_blob() is None  # a lone DSO-exportable root needs no blob
    lib["add_f32"](a, b, c)
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)


def test_exported_tar_links_on_load_and_runs(exported, operands) -> None:
    a_np, b_np, a, b, c = operands
    lib = load_module(exported["tar"])
    lib.entry_func(a, b, c)  # __tvm_main__ names add_f32
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)


def test_blob_rebuilds_the_import_tree(exported, operands) -> None:
    a_np, b_np, a, b, c = operands
    root = load_module(exported["blob"])
    assert isinstance(root, OffsetModule) and root["offset"]() == 1.5
    (library,) = root.imports
    assert isinstance(library, DSOModule)
    root.get_function("add_f32", query_imports=True)(a, b, c)
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)
    with pytest.raises(AttributeError, match="Module has no function 'add_f32'"):
        root["add_f32"]


def test_blob_round_trips_in_a_fresh_process_importing_only_runtime(exported) -> None:
    script = textwrap.dedent(
        f"""
        import struct, sys
        import numpy as np
        from kiln.runtime import ndarray
        from kiln.runtime.module import Module, ModuleProperty, load_module
        from kiln.runtime.registry import register_func, remove_global_func

        class OffsetModule(Module):
            type_key = "test.Offset"
            _property_mask = ModuleProperty.RUNNABLE | ModuleProperty.BINARY_SERIALIZABLE
            def __init__(self, offset):
                super().__init__()
                self.offset = offset
            def _get_function(self, name):
                return (lambda: self.offset) if name == "offset" else None

        register_func("runtime.module.loadbinary_test.Offset",
                      lambda data: OffsetModule(struct.unpack("<d", data)[0]))
        root = load_module({str(exported["blob"])!r})
        a = ndarray.array(np.arange(7, dtype="float32"))
        c = ndarray.empty((7,), "float32")
        root.get_function("add_f32", query_imports=True)(a, a, c)
        others = sorted(m for m in sys.modules
                        if m.startswith("kiln.")
                        and not m.startswith(("kiln.runtime", "kiln._lazy")))
        print(root["offset"](), c.numpy().tolist(), others)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = f"1.5 {[2.0 * i for i in range(7)]} []"
    assert proc.stdout.strip() == expected


ENV_C = r"""
#include <tvm/runtime/c_backend_api.h>

void* __tvm_module_ctx = NULL;

/* Call the function "offset" found through the module environment. */
int call_offset(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* res) {
  TVMFunctionHandle f;
  if (TVMBackendGetFuncFromEnv(__tvm_module_ctx, "offset", &f) != 0) return -1;
  return TVMFuncCall(f, NULL, NULL, 0, ret, ret_code);
}
"""


def test_kernel_env_lookup_prefers_imports_over_the_registry(tmp_path: Path) -> None:
    root = CSourceModule(ENV_C)
    root.import_module(OffsetModule(2.5))
    root.export_library(tmp_path / "env.so")
    register_func("offset", lambda: -1.0, override=True)
    try:
        lib = load_module(tmp_path / "env.so")
        assert isinstance(lib, DSOModule) and isinstance(lib.imports[0], OffsetModule)
        assert lib["call_offset"]() == 2.5
        lone = CSourceModule(ENV_C)
        lone.export_library(tmp_path / "env_lone.so")
        assert load_module(tmp_path / "env_lone.so")["call_offset"]() == -1.0
    finally:
        remove_global_func("offset")


def test_serialize_blob_matches_tvm_layout_by_hand() -> None:
    root = OffsetModule(2.0)
    root.import_module(CSourceModule(ADD_C))

    def string(s: bytes) -> bytes:
        return struct.pack("<Q", len(s)) + s

    expected = (
        struct.pack("<Q", 3)
        + string(b"test.Offset")
        + string(struct.pack("<d", 2.0))
        + string(b"_lib")
        + string(b"_import_tree")
        + struct.pack("<Q", 3) + struct.pack("<3Q", 0, 1, 1)
        + struct.pack("<Q", 1) + struct.pack("<Q", 1)
    )
    assert serialize_module_blob(root) == expected


def test_nested_import_tree_round_trips_in_memory() -> None:
    root, middle, leaf = OffsetModule(1.0), OffsetModule(2.0), OffsetModule(3.0)
    middle.import_module(leaf)
    root.import_module(middle)
    root.import_module(leaf)  # shared import stays one module
    rebuilt = deserialize_module_blob(serialize_module_blob(root))
    assert [m.offset for m in rebuilt.imports] == [2.0, 3.0]
    assert rebuilt.imports[0].imports[0] is rebuilt.imports[1]


def test_custom_fcompile_and_workspace_dir(tmp_path: Path, operands) -> None:
    calls = []

    def fcompile(output, files, options=None):
        calls.append((output, list(files), list(options)))
        return cc.create_shared(output, files, options)

    work = tmp_path / "work"
    CSourceModule(ADD_C).export_library(tmp_path / "custom.so", fcompile=fcompile,
                                        workspace_dir=str(work))
    (output, files, options), = calls
    assert output.endswith("custom.so") and "-lm" in options
    assert all(Path(f).is_relative_to(work) for f in files)
    a_np, b_np, a, b, c = operands
    load_module(tmp_path / "custom.so")["add_f32"](a, b, c)
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)


def test_time_evaluator_reports_statistics(exported, operands) -> None:
    _, _, a, b, c = operands
    lib = load_module(exported["so"])
    timer = lib.time_evaluator("add_f32", cpu(0), number=4, repeat=3)
    result = timer(a, b, c)
    assert len(result.results) == 3 and all(t > 0 for t in result.results)
    assert result.mean == pytest.approx(np.mean(result.results))
    assert result.median == pytest.approx(np.median(result.results))


def test_function_lookup_is_cached_and_checked(exported) -> None:
    lib = load_module(exported["so"])
    assert lib["add_f32"] is lib.get_function("add_f32")
    with pytest.raises(AttributeError, match="Module has no function 'nope'"):
        lib["nope"]
    with pytest.raises(AttributeError, match="Module has no function 'printf'"):
        lib["printf"]  # libc symbols are not this library's functions
    with pytest.raises(ValueError, match="string"):
        lib[3]


def test_implements_function_and_enabled_targets(exported) -> None:
    lib = load_module(exported["so"])
    assert lib.implements_function("add_f32") and not lib.implements_function("nope")
    assert module_lib.enabled("llvm -mcpu=znver3") and module_lib.enabled("c")
    assert not module_lib.enabled("cuda") and not module_lib.enabled("")


def test_property_masks_and_unsupported_base_operations() -> None:
    source, offset = CSourceModule(ADD_C), OffsetModule(0.0)
    assert (source.is_dso_exportable, source.is_binary_serializable) == (True, False)
    assert (offset.is_dso_exportable, offset.is_binary_serializable) == (False, True)
    assert source.get_source() == ADD_C
    for call in (offset.get_source, Module().save_to_binary, lambda: offset.save("x")):
        with pytest.raises(TVMError, match="does not support"):
            call()


def test_exporting_a_non_exportable_module_fails(tmp_path: Path, exported) -> None:
    root = OffsetModule(0.0)
    root.import_module(load_module(exported["so"]))
    with pytest.raises(TVMError, match=r"Module\[library\] is neither"):
        root.export_library(tmp_path / "x.so")


SYSTEM_LIB_C = r"""
#include <tvm/runtime/c_backend_api.h>

static int add_one(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* r) {
  ret->v_int64 = args[0].v_int64 + 1;
  *ret_code = kTVMArgInt;
  return 0;
}

__attribute__((constructor)) static void register_symbols(void) {
  TVMBackendRegisterSystemLibSymbol("kilntest_add_one", (void*)add_one);
}
"""


class SystemLibSource(CSourceModule):
    """C source that registers its kernels in the system library (prefix "kilntest_")."""

    def _get_function(self, name: str):
        answers = {"__tvm_is_system_module": True, "__tvm_get_system_lib_prefix": "kilntest_"}
        return (lambda: answers[name]) if name in answers else None


def test_system_lib_finds_registered_symbols_and_blob(tmp_path: Path) -> None:
    root = OffsetModule(4.0)
    root.import_module(SystemLibSource(SYSTEM_LIB_C))
    root.export_library(tmp_path / "system.so")
    load_module(tmp_path / "system.so")  # runs the constructors that register symbols
    rebuilt = system_lib("kilntest_")
    assert isinstance(rebuilt, OffsetModule) and rebuilt["offset"]() == 4.0
    assert rebuilt.get_function("add_one", query_imports=True)(41) == 42
    assert system_lib("kilntest_") is rebuilt
    with pytest.raises(AttributeError):
        system_lib("kilntest_absent_")["add_one"]


# ---- bad input ---------------------------------------------------------------------------


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TVMError, match="no such file"):
        load_module(tmp_path / "absent.so")


def test_non_library_file_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "fake.so"
    fake.write_text("this is not an ELF file")
    with pytest.raises(TVMError, match="cannot load shared library"):
        load_module(fake)


def test_truncated_library_is_a_clear_error(tmp_path: Path, exported) -> None:
    data = exported["so"].read_bytes()
    cut = tmp_path / "cut.so"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(TVMError, match="cannot load shared library"):
        load_module(cut)


def test_garbage_tar_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(os.urandom(300))
    with pytest.raises(TVMError, match="not a valid tar archive"):
        load_module(junk)


def test_tar_with_unsafe_or_missing_members_is_rejected(tmp_path: Path) -> None:
    source = tmp_path / "k.c"
    source.write_text("int k(void) { return 1; }\n")
    with tarfile.open(tmp_path / "escape.tar", "w") as tar:
        tar.add(source, arcname="../k.c")
    with pytest.raises(TVMError, match="member '../k.c' has a '..' component"):
        load_module(tmp_path / "escape.tar")
    notes = tmp_path / "notes.txt"
    notes.write_text("no code here")
    with tarfile.open(tmp_path / "empty.tar", "w") as tar:
        tar.add(notes, arcname="notes.txt")
    with pytest.raises(TVMError, match="no object or source files"):
        load_module(tmp_path / "empty.tar")


def test_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    odd = tmp_path / "model.weird"
    odd.write_text("x")
    with pytest.raises(TVMError, match="no loader for format 'weird'"):
        load_module(odd)


def _library_with_blob_array(length_prefix: int, payload: bytes) -> Path:
    data = struct.pack("<Q", length_prefix) + payload
    body = ", ".join(str(b) for b in data)
    source = (
        '__attribute__((visibility("default")))\n'
        f"const unsigned char __tvm_dev_mblob[{len(data)}] = {{{body}}};\n"
    )
    return cc.cached_shared_library({"blob.c": source})


def test_blob_length_beyond_the_symbol_is_rejected() -> None:
    with pytest.raises(TVMError, match="truncated or tampered"):
        load_module(_library_with_blob_array(1 << 40, b"\x01\x00"))


def test_tampered_blob_content_is_rejected() -> None:
    good = serialize_module_blob(OffsetModule(1.0))
    tampered = good[:8] + struct.pack("<Q", 1 << 50) + good[16:]  # first key's length
    with pytest.raises(TVMError, match="bad module blob"):
        load_module(_library_with_blob_array(len(tampered), tampered))
    with pytest.raises(TVMError, match="bad module blob"):
        load_module(_library_with_blob_array(len(good) - 5, good[:-5]))


def test_blob_with_unregistered_module_kind_is_rejected() -> None:
    class Unknown(OffsetModule):
        type_key = "test.NoLoader"

    blob = serialize_module_blob(Unknown(1.0))
    with pytest.raises(TVMError, match="runtime.module.loadbinary_test.NoLoader"):
        load_module(_library_with_blob_array(len(blob), blob))


def test_loader_failure_on_tampered_module_bytes_is_a_tvm_error() -> None:
    register_func("runtime.module.loadbinary_test.Fragile", lambda data: struct.unpack("<d", data))

    class Fragile(OffsetModule):
        type_key = "test.Fragile"

        def save_to_binary(self) -> bytes:
            return b"\x01\x02\x03"

    try:
        with pytest.raises(TVMError, match="loadbinary_test.Fragile failed: error"):
            deserialize_module_blob(serialize_module_blob(Fragile(0.0)))
    finally:
        remove_global_func("runtime.module.loadbinary_test.Fragile")


def test_blob_reader_imports_the_module_that_registers_a_known_loader(
    tmp_path: Path, monkeypatch
) -> None:
    (tmp_path / "kiln_probe_loader.py").write_text(
        "import struct\n"
        "from kiln.runtime.module import Module\n"
        "from kiln.runtime.registry import register_func\n"
        "class LazyModule(Module):\n"
        "    type_key = 'test.Lazy'\n"
        "def load(data):\n"
        "    module = LazyModule()\n"
        "    module.offset = struct.unpack('<d', data)[0] * 10\n"
        "    return module\n"
        "register_func('runtime.module.loadbinary_test.Lazy', load)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(module_lib.BINARY_LOADER_MODULES, "test.Lazy", "kiln_probe_loader")

    class Lazy(OffsetModule):
        type_key = "test.Lazy"

    try:
        assert deserialize_module_blob(serialize_module_blob(Lazy(0.5))).offset == 5.0
    finally:
        remove_global_func("runtime.module.loadbinary_test.Lazy")


def test_bad_import_tree_is_rejected() -> None:
    blob = bytearray(serialize_module_blob(OffsetModule(1.0)))
    blob[-8:] = struct.pack("<Q", 9)  # row_ptr end beyond child indices
    with pytest.raises(TVMError, match="import tree"):
        deserialize_module_blob(bytes(blob))
