"""The C runtime (kiln/micro/crt): builds warning-free for host and Cortex-M, and its C unit
tests (allocators, registries, C API, NDArray and params blobs) pass under ASan + UBSan.

NDArray and params blobs are checked byte for byte against kiln.runtime's writer.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from crt_testlib import C_TEST_DIR, PLATFORM_TEMPLATE, build_program, run_program

import kiln as tvm
from kiln.micro import crt_build
from kiln.runtime.params import save_ndarray


@pytest.mark.parametrize(
    "cc, cflags",
    [("gcc", ()), ("arm-none-eabi-gcc", crt_build.CORTEX_M4_CFLAGS)],
    ids=["gcc", "arm-none-eabi-gcc"],
)
def test_crt_compiles_warning_free(tmp_path, cc, cflags):
    # A missing cross compiler fails here (CI installs it); it is not a reason to skip.
    sources = crt_build.crt_sources()
    if cc == "gcc":
        sources.append(PLATFORM_TEMPLATE)
    objects = crt_build.compile_objects(
        tmp_path, sources, cc=cc, cflags=(*crt_build.STRICT_CFLAGS, "-Os", *cflags)
    )
    assert len(objects) == len(sources)


def test_get_standalone_crt_dir_layout():
    root = tvm.micro.get_standalone_crt_dir()
    for rel in [
        "include/dlpack/dlpack.h",
        "include/tvm/runtime/c_runtime_api.h",
        "include/tvm/runtime/c_backend_api.h",
        "include/tvm/runtime/metadata_types.h",
        "include/tvm/runtime/crt/func_registry.h",
        "include/tvm/runtime/crt/graph_executor.h",
        "include/tvm/runtime/crt/aot_executor.h",
        "src/runtime/crt/common/crt_runtime_api.c",
        "src/runtime/crt/memory/page_allocator.c",
        "template/crt_config-template.h",
        "template/platform-template.c",
    ]:
        assert os.path.isfile(os.path.join(root, rel)), rel


def test_unknown_component_is_refused():
    with pytest.raises(tvm.TVMError, match="unknown CRT component 'rpc'.*common"):
        crt_build.crt_sources(["rpc"])


@pytest.fixture(scope="module")
def unit_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("crt_unit")


@pytest.mark.parametrize("name", ["test_memory", "test_common", "test_json"])
def test_c_unit_tests(unit_dir, name):
    components = ("common", "memory", "graph_executor")
    exe = build_program(unit_dir, name, [C_TEST_DIR / f"{name}.c"], components=components)
    proc = run_program(exe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and proc.stdout.count("ok ") >= 4


def test_c_aot_executor(unit_dir):
    exe = build_program(
        unit_dir,
        "test_aot",
        [C_TEST_DIR / "test_aot.c"],
        components=("common", "aot_executor", "aot_executor_module"),
        platform=C_TEST_DIR / "test_platform.c",
    )
    proc = run_program(exe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split()[1::2] == [
        "test_run_model",
        "test_bad_metadata",
        "test_long_module_name",
        "test_aot_executor_module",
    ]
    assert "FAIL" not in proc.stdout


def test_c_graph_executor_module(unit_dir):
    exe = build_program(
        unit_dir,
        "test_graph_module",
        [C_TEST_DIR / "test_graph_module.c"],
        components=("common", "graph_executor", "graph_executor_module"),
        platform=C_TEST_DIR / "test_platform.c",
    )
    proc = run_program(exe)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout and proc.stdout.count("ok ") == 4


@pytest.fixture(scope="module")
def params_tool(unit_dir):
    return build_program(
        unit_dir, "params_tool", [C_TEST_DIR / "params_tool.c"], components=("common", "memory")
    )


ARRAYS = [
    np.arange(12, dtype="float32").reshape(3, 4),
    np.array(3.5, dtype="float64"),
    np.zeros((0, 5), dtype="int8"),
    np.arange(-5, 5, dtype="int8"),
    np.arange(6, dtype="uint16").reshape(1, 2, 3),
    np.arange(6, dtype="int64").reshape(1, 1, 1, 1, 2, 3),
    np.array([True, False, True]),
    np.linspace(-1, 1, 7).astype("float16"),
]


def test_ndarray_blobs_roundtrip_byte_exact(params_tool, tmp_path):
    blob = b"".join(save_ndarray(a) for a in ARRAYS)
    (tmp_path / "in").write_bytes(blob)
    proc = run_program(params_tool, "ndarrays", str(tmp_path / "in"), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "out").read_bytes() == blob


def test_params_blob_matches_kiln_writer(params_tool, tmp_path):
    params = {f"p{i}": a for i, a in enumerate(ARRAYS)}
    params["a_much_longer_parameter_name"] = np.ones((2, 2), "float32")
    blob = tvm.runtime.save_param_dict(params)
    (tmp_path / "in").write_bytes(blob)
    proc = run_program(params_tool, "params", str(tmp_path / "in"), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded = tvm.runtime.load_param_dict(blob)
    assert proc.stdout.split() == list(loaded)
    expected = b"".join(save_ndarray(loaded[name].numpy()) for name in loaded)
    assert (tmp_path / "out").read_bytes() == expected


def _run_params(params_tool, tmp_path, blob, mode="params"):
    (tmp_path / "in").write_bytes(blob)
    proc = run_program(params_tool, mode, str(tmp_path / "in"), str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout + proc.stderr  # an error code, not a crash
    return proc.stdout


def _ndarray_header(ndim, code=2, bits=32, lanes=1, device=1):
    return struct.pack("<QQiiiBBH", 0xDD5E40F096B4A13F, 0, device, 0, ndim, code, bits, lanes)


@pytest.mark.parametrize(
    "blob, message",
    [
        (_ndarray_header(7) + struct.pack("<7q", *[1] * 7), "outside 0..6 (TVM_CRT_MAX_NDIM)"),
        (_ndarray_header(1) + struct.pack("<qq", -2, -8), "negative dimension"),
        (_ndarray_header(1) + struct.pack("<qq", 2, 9) + bytes(9), "data_byte_size 9 does not"),
        (_ndarray_header(1, device=2) + struct.pack("<qq", 1, 4), "device type 2"),
        (_ndarray_header(1, lanes=4) + struct.pack("<qq", 1, 16), "lanes 4"),
        (_ndarray_header(2) + struct.pack("<qqq", 1 << 40, 1 << 40, 16), "does not match"),
        (_ndarray_header(1) + struct.pack("<qq", 4, 16) + bytes(15), "truncated in data"),
        (b"\x00" * 8, "bad NDArray magic"),
    ],
    ids=["rank", "negative", "size", "device", "lanes", "overflow", "short-data", "magic"],
)
def test_corrupt_ndarray_is_an_error(params_tool, tmp_path, blob, message):
    assert message in _run_params(params_tool, tmp_path, blob, "ndarrays")


def test_every_truncation_of_a_params_blob_is_an_error(params_tool, tmp_path):
    blob = tvm.runtime.save_param_dict({"w": np.ones((2, 3), "float32"), "b": np.ones(3, "int8")})
    (tmp_path / "in").write_bytes(blob)
    proc = run_program(params_tool, "prefixes", str(tmp_path / "in"), str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # no sanitizer finding
    lines = proc.stdout.splitlines()
    assert len(lines) == len(blob)
    for cut, line in enumerate(lines):
        assert line.startswith(f"{cut} error 0x803: ") and "truncated" in line, line


def test_corrupt_params_header_is_an_error(params_tool, tmp_path):
    good = tvm.runtime.save_param_dict({"w": np.ones(3, "float32")})
    bad_magic = b"\x01" + good[1:]
    assert "bad params magic" in _run_params(params_tool, tmp_path, bad_magic)
    huge_count = good[:16] + struct.pack("<Q", 1 << 60) + good[24:]
    out = _run_params(params_tool, tmp_path, huge_count)
    assert "truncated: it claims 1152921504606846976 names" in out
    # One name, but the array count says two.
    name_end = 24 + 8 + 1
    two_arrays = good[:name_end] + struct.pack("<Q", 2) + good[name_end + 8 :]
    assert "1 names but 2 arrays" in _run_params(params_tool, tmp_path, two_arrays)


def test_too_long_param_name_is_refused_not_truncated(params_tool, tmp_path):
    blob = tvm.runtime.save_param_dict({"n" * 80: np.ones(1, "float32")})
    out = _run_params(params_tool, tmp_path, blob)
    assert "TVM_CRT_MAX_STRLEN_PARAM_NAME" in out and "80 characters" in out


@pytest.mark.parametrize("header", ["dlpack/dlpack.h", "tvm/runtime/metadata_types.h"])
def test_crt_abi_header_is_the_runtime_one(header):
    # The DLTensor and TVMMetadata ABIs must not drift between host code and the CRT: one
    # header, two copies (the CRT directory ships standalone, the runtime cannot depend on
    # kiln.micro).
    runtime_copy = os.path.join(os.path.dirname(tvm.runtime.__file__), "include", header)
    crt_copy = os.path.join(tvm.micro.get_standalone_crt_dir(), "include", header)
    with open(runtime_copy, "rb") as a, open(crt_copy, "rb") as b:
        assert a.read() == b.read()


def test_crt_build_kills_a_compiler_that_hangs(tmp_path, monkeypatch):
    # A compiler stuck on its input (e.g. `#include "/dev/zero"`) must not hang the build.
    hang = tmp_path / "hanging-cc"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setenv("KILN_CC_TIMEOUT", "0.5")
    with pytest.raises(tvm.TVMError, match=r"did not finish within .*KILN_CC_TIMEOUT"):
        crt_build.link_executable(tmp_path / "prog", [], cc=str(hang))
