"""GraphExecutorFactory: TVM's functions, its binary layout (checked byte by byte), export."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from graph_executor_testlib import KERNELS_C, build_kernel_library, dumps, relu_add_graph

from kiln.contrib import graph_executor
from kiln.contrib.debugger import debug_executor
from kiln.runtime import ndarray as nd
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError
from kiln.runtime.executor_factory import GraphExecutorFactory, load_factory, save_factory
from kiln.runtime.graph_executor import GraphExecutor
from kiln.runtime.module import DSOModule, Module, ModuleProperty
from kiln.runtime.registry import get_global_func

P0 = np.arange(6, dtype="float32").reshape(2, 3) - 2.5
X = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
EXPECTED = np.maximum(X + P0, 0)
GRAPH_JSON = dumps(relu_add_graph())


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_kernel_library(tmp_path_factory.mktemp("factory_kernels"))


@pytest.fixture
def factory(lib):
    return GraphExecutorFactory(GRAPH_JSON, lib, "default", {"p0": P0})


def _ndarray_blob(array: np.ndarray) -> bytes:
    """TVM's SaveDLTensor bytes for a float32 array, written from the spec (section 2.4)."""
    header = struct.pack("<QQiiiBBH", 0xDD5E40F096B4A13F, 0, 1, 0, array.ndim, 2, 32, 1)
    shape = struct.pack(f"<{array.ndim}q", *array.shape)
    return header + shape + struct.pack("<q", array.nbytes) + array.tobytes()


def _string(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def test_save_to_binary_is_tvms_layout(factory):
    expected = (
        _string(GRAPH_JSON.encode())
        + struct.pack("<Q", 1)  # n
        + struct.pack("<Q", 1) + _string(b"p0")  # vector<string> names
        + _ndarray_blob(P0)
        + _string(b"default")
    )
    assert factory.save_to_binary() == expected
    assert save_factory(factory) == expected


def test_binary_round_trip_then_run(lib, factory):
    loaded = get_global_func("runtime.module.loadbinary_GraphExecutorFactory")(
        factory.save_to_binary())
    assert isinstance(loaded, GraphExecutorFactory)
    assert loaded.type_key == "GraphExecutorFactory"
    assert loaded.get_graph_json() == GRAPH_JSON and loaded.module_name == "default"
    np.testing.assert_array_equal(loaded.get_graph_params()["p0"].numpy(), P0)
    loaded.import_module(lib)
    m = graph_executor.GraphModule(loaded["default"](cpu(0)))
    m.run(x=X)
    np.testing.assert_allclose(m.get_output(0).numpy(), EXPECTED)


def test_default_function_creates_an_executor_with_params_set(factory):
    executor = factory["default"](cpu(0))
    assert isinstance(executor, GraphExecutor)
    np.testing.assert_array_equal(executor.get_input("p0").numpy(), P0)
    m = graph_executor.GraphModule(executor)
    m.run(x=X)
    np.testing.assert_allclose(m.get_output(0).numpy(), EXPECTED)
    # A second executor from the same factory is independent.
    other = graph_executor.GraphModule(factory["default"](cpu(0)))
    other.run(x=-X)
    np.testing.assert_allclose(other.get_output(0).numpy(), np.maximum(-X + P0, 0))
    np.testing.assert_allclose(m.get_output(0).numpy(), EXPECTED)


def test_factory_functions_by_tvm_name(factory, lib):
    assert factory["get_graph_json"]() == GRAPH_JSON
    assert list(factory["get_graph_params"]()) == ["p0"]
    stripped = factory["remove_params"]()
    assert isinstance(stripped, GraphExecutorFactory) and stripped.get_graph_params() == {}
    assert stripped.imports[0] is lib and factory.get_graph_params()
    with pytest.raises(AttributeError, match="no function 'other_name'"):
        factory["other_name"]


def test_debug_create_feeds_the_debug_executor(factory, tmp_path, capsys):
    executor = factory["debug_create"]("default", cpu(0))
    m = debug_executor.GraphModuleDebug(executor, [cpu(0)], factory.get_graph_json(),
                                        str(tmp_path))
    m.run(x=X)
    np.testing.assert_allclose(m.debug_get_output("fused_add").numpy(), X + P0)
    np.testing.assert_allclose(m.get_output(0).numpy(), EXPECTED)
    with pytest.raises(TVMError, match="builds module 'default', not 'other'"):
        factory.debug_create("other", cpu(0))


def test_custom_module_name_and_global_create(lib):
    create = get_global_func("tvm.graph_executor_factory.create")
    factory = create(GRAPH_JSON, lib, "mynet", "p0", nd.array(P0))
    m = graph_executor.GraphModule(factory["mynet"](cpu(0)))
    m.run(x=X)
    np.testing.assert_allclose(m.get_output(0).numpy(), EXPECTED)
    assert load_factory(factory.save_to_binary()).module_name == "mynet"
    with pytest.raises(TVMError, match="name/value pairs"):
        create(GRAPH_JSON, lib, "mynet", "p0")


def test_bad_construction_arguments(lib):
    with pytest.raises(TVMError, match="graph_json must be a str"):
        GraphExecutorFactory(b"{}", lib)
    with pytest.raises(TVMError, match="module_name must be a non-empty str"):
        GraphExecutorFactory(GRAPH_JSON, lib, "")
    with pytest.raises(TVMError, match="no kernel library"):
        GraphExecutorFactory(GRAPH_JSON, None)["default"](cpu(0))


def test_truncated_blobs_raise(factory):
    blob = factory.save_to_binary()
    for cut in (0, 4, 8, 20, len(GRAPH_JSON) + 8, len(GRAPH_JSON) + 20, len(blob) - 100,
                len(blob) - 7, len(blob) - 1):
        with pytest.raises(TVMError, match="truncated or corrupt"):
            load_factory(blob[:cut])


def test_tampered_blobs_raise(factory):
    blob = factory.save_to_binary()
    n_at = 8 + len(GRAPH_JSON)
    tampered = blob[:n_at] + struct.pack("<Q", 2) + blob[n_at + 8:]
    with pytest.raises(TVMError, match="2 params but 1 names"):
        load_factory(tampered)
    with pytest.raises(TVMError, match="trailing bytes"):
        load_factory(blob + b"\x00")
    magic_at = n_at + 8 + 8 + 8 + 2
    bad_magic = blob[:magic_at] + b"\x00" * 8 + blob[magic_at + 8:]
    with pytest.raises(TVMError):
        load_factory(bad_magic)
    huge_length = struct.pack("<Q", 1 << 60) + blob[8:]
    with pytest.raises(TVMError, match="truncated or corrupt"):
        load_factory(huge_length)
    with pytest.raises(TVMError):
        load_factory("not bytes")


class _KernelSourceModule(Module):
    """A DSO-exportable module of the test kernels (stands in for a codegen result)."""

    type_key = "c"
    _property_mask = ModuleProperty.RUNNABLE | ModuleProperty.DSO_EXPORTABLE

    def __init__(self, dso: DSOModule) -> None:
        super().__init__()
        self.dso = dso

    def _get_function(self, name):
        return self.dso._get_function(name)

    def export_objects(self, workspace_dir: str) -> list[str]:
        path = os.path.join(workspace_dir, "kernels.c")
        with open(path, "w") as f:
            f.write(KERNELS_C)
        return [path]


def test_export_library_then_load_in_a_fresh_process(lib, tmp_path):
    kernels = _KernelSourceModule(lib)
    factory = GraphExecutorFactory(GRAPH_JSON, kernels, "default", {"p0": P0})
    path = tmp_path / "model.so"
    factory.export_library(str(path))
    np.save(tmp_path / "x.npy", X)
    script = textwrap.dedent(f"""
        import numpy as np
        import kiln
        import kiln.runtime.executor_factory  # registers the GraphExecutorFactory loader
        from kiln.contrib import graph_executor
        lib = kiln.runtime.load_module({str(path)!r})
        assert lib.type_key == "GraphExecutorFactory", lib.type_key
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
        m.run(x=np.load({str(tmp_path / "x.npy")!r}))
        np.save({str(tmp_path / "y.npy")!r}, m.get_output(0).numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), EXPECTED)
