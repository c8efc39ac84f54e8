"""The graph executor against NumPy, with hand-written C kernels and hand-written graph JSON."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from graph_executor_testlib import (
    build_kernel_library,
    dumps,
    graph,
    input_node,
    op_node,
    relu_add_graph,
    reuse_graph,
)

from kiln.contrib import graph_executor
from kiln.runtime import ndarray as nd
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import GraphExecutor, parse_graph_json
from kiln.runtime.module import Module
from kiln.runtime.params import save_param_dict
from kiln.runtime.profiling import BenchmarkResult
from kiln.runtime.registry import get_global_func


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_kernel_library(tmp_path_factory.mktemp("graph_kernels"))


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    return rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal((2, 3)).astype(
        "float32")


def test_relu_add_matches_numpy(lib, data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    m.set_input("x", x)
    m.set_input(1, p0)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)


def test_run_with_keyword_inputs_and_graph_module_of_executor(lib, data):
    x, p0 = data
    m = graph_executor.GraphModule(GraphExecutor(dumps(relu_add_graph()), lib, [cpu(0)]))
    m.run(x=x, p0=nd.array(p0))
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    out = nd.empty((2, 3), "float32")
    m.get_output(0, out)
    np.testing.assert_allclose(out.numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    np.testing.assert_array_equal(m.get_input("x").numpy(), x)
    np.testing.assert_array_equal(m.get_input(1).numpy(), p0)


def test_keyword_inputs_not_in_the_graph_are_skipped_like_tvm(lib, data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    m.set_input(x=x, p0=p0, folded_constant=np.ones(3, "float32"))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)


def test_storage_reuse_gives_the_right_answer(lib):
    x = np.array([-1, 2, -3, 4], "float32")
    p0 = np.array([0.5, 0.5, 5, 1], "float32")
    m = graph_executor.create(dumps(reuse_graph()), lib, cpu(0))
    m.run(x=x, p0=p0)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0) * p0)


def test_two_output_node(lib, data):
    x, p0 = data
    nodes = [input_node("a"), input_node("b"),
             op_node("fused_addsub", "addsub_f32", [[0, 0], [1, 0]], num_outputs=2),
             op_node("fused_relu", "relu_f32", [[2, 1]])]
    g = graph(nodes, [[2, 0], [3, 0], [2, 1]], [[2, 3]] * 5, [0, 1, 2, 3, 4])
    m = graph_executor.create(dumps(g), lib, cpu(0))
    m.run(a=x, b=p0)
    assert m.get_num_outputs() == 3
    np.testing.assert_allclose(m.get_output(0).numpy(), x + p0, rtol=1e-6)
    np.testing.assert_allclose(m.get_output(1).numpy(), np.maximum(x - p0, 0), rtol=1e-6)
    np.testing.assert_allclose(m.get_output(2).numpy(), x - p0, rtol=1e-6)
    assert m.module.get_output_index("fused_addsub:1") == 2
    assert m.module.get_output_index("fused_relu") == 1
    assert m.module.get_output_index("nothing") == -1


def test_nop_reshape_shares_storage_and_makes_no_call(lib, data):
    x, p0 = data
    nodes = [input_node("x"), input_node("p0"),
             op_node("fused_add", "add_f32", [[0, 0], [1, 0]]),
             op_node("reshape_nop", "__nop", [[2, 0]]),
             op_node("fused_relu", "relu_f32", [[3, 0]])]
    g = graph(nodes, [[4, 0]], [[2, 3], [2, 3], [2, 3], [3, 2], [3, 2]], [0, 1, 2, 2, 3])
    m = graph_executor.create(dumps(g), lib, cpu(0))
    m.run(x=x, p0=p0)
    assert [op.func_name for op in m.module.op_execs] == ["add_f32", "relu_f32"]
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0).reshape(3, 2))


def test_flatten_data_passes_one_dimensional_tensors(lib, data):
    x, _ = data
    nodes = [input_node("x"), op_node("fused_double", "double_flat_f32", [[0, 0]], flatten="1")]
    m = graph_executor.create(dumps(graph(nodes, [[1, 0]], [[2, 3]] * 2, [0, 1])), lib, cpu(0))
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), 2 * x)
    assert m.get_output(0).shape == (2, 3)


def _two_device_graph() -> dict:
    """add on device type 1 pool A, __copy, relu: the TVM heterogeneous layout."""
    nodes = [input_node("x"), input_node("p0"),
             op_node("fused_add", "add_f32", [[0, 0], [1, 0]]),
             op_node("__copy", "__copy", [[2, 0]]),
             op_node("fused_relu", "relu_f32", [[3, 0]])]
    return graph(nodes, [[4, 0]], [[2, 3]] * 5, [0, 1, 2, 3, 4], device_index=[1, 1, 1, 1, 1])


@pytest.mark.parametrize("devices", [[cpu(0), cpu(1)], (cpu(1), cpu(0))])
def test_two_cpu_devices_with_copy(lib, data, devices):
    x, p0 = data
    m = graph_executor.create(dumps(_two_device_graph()), lib, devices)
    m.run(x=x, p0=p0)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    # TVM maps a device_index type to the first given device of that type.
    assert m.get_output(0).device == devices[0]


def test_global_create_accepts_device_type_id_pairs(lib, data):
    x, p0 = data
    fcreate = get_global_func("tvm.graph_executor.create")
    executor = fcreate(dumps(relu_add_graph()), lib, 1, 0, 1, 1)
    m = graph_executor.GraphModule(executor)
    m.run(x=x, p0=p0)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)


def test_module_functions_by_tvm_name(lib, data):
    x, p0 = data
    executor = GraphExecutor(dumps(relu_add_graph()), lib, cpu(0))
    assert executor.type_key == "GraphExecutor"
    executor["set_input"]("x", x)
    executor["set_input"]("p0", p0)
    executor["run"]()
    assert executor["get_num_outputs"]() == 1
    assert executor["get_input_index"]("p0") == 1
    np.testing.assert_allclose(executor["get_output"](0).numpy(), np.maximum(x + p0, 0))
    with pytest.raises(AttributeError, match="no_such_function"):
        executor["no_such_function"]


def test_input_output_metadata(lib):
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    assert m.get_num_inputs() == 2
    assert m.get_input_index("p0") == 1 and m.get_input_index("zzz") == -1
    shapes, dtypes = m.get_input_info()
    assert shapes == {"x": (2, 3), "p0": (2, 3)} and dtypes == {"x": "float32", "p0": "float32"}
    shapes, dtypes = m.get_output_info()
    assert shapes == {"fused_relu": (2, 3)} and dtypes == {"fused_relu": "float32"}


def test_load_params_sets_inputs_and_hides_them_from_input_info(lib, data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    m.load_params(save_param_dict({"p0": p0, "unused": np.zeros(2, "float32")}))
    assert m.get_input_info()[0] == {"x": (2, 3)}
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)


def test_share_params_uses_the_other_executors_memory(lib, data):
    x, p0 = data
    blob = save_param_dict({"p0": p0})
    first = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    first.load_params(blob)
    second = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    second.share_params(first, blob)
    assert second.get_input("p0").data_ptr == first.get_input("p0").data_ptr
    second.run(x=x)
    np.testing.assert_allclose(second.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    first.set_input("p0", np.ones((2, 3), "float32"))  # shared: the second sees the change
    second.run()
    np.testing.assert_allclose(second.get_output(0).numpy(), np.maximum(x + 1, 0), rtol=1e-6)


def test_zero_copy_input_and_output(lib, data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    x_arr, out_arr = nd.array(x), nd.empty((2, 3), "float32")
    m.set_input_zero_copy("x", x_arr)
    m.set_output_zero_copy(0, out_arr)
    m.set_input("p0", p0)
    m.run()
    np.testing.assert_allclose(out_arr.numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    x_arr.copyfrom(-x)  # no set_input: the executor reads x_arr directly
    m.run()
    np.testing.assert_allclose(out_arr.numpy(), np.maximum(-x + p0, 0), rtol=1e-6)
    assert m.get_output(0).data_ptr == out_arr.data_ptr


def test_zero_copy_input_propagates_through_nop_alias(lib, data):
    x, p0 = data
    nodes = [input_node("x"), op_node("reshape_nop", "__nop", [[0, 0]]),
             op_node("fused_relu", "relu_f32", [[1, 0]])]
    g = graph(nodes, [[2, 0]], [[2, 3], [3, 2], [3, 2]], [0, 0, 1])
    m = graph_executor.create(dumps(g), lib, cpu(0))
    m.set_input_zero_copy("x", nd.array(x))
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x, 0).reshape(3, 2))


def test_zero_copy_rejects_mismatches(lib):
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    with pytest.raises(TVMError, match=r"shape \(3, 2\) != \(2, 3\)"):
        m.set_input_zero_copy("x", nd.empty((3, 2), "float32"))
    with pytest.raises(TVMError, match="dtype int32 != float32"):
        m.set_output_zero_copy(0, nd.empty((2, 3), "int32"))
    with pytest.raises(TVMError, match="device cpu\\(1\\) != cpu\\(0\\)"):
        m.set_input_zero_copy("x", nd.empty((2, 3), "float32", cpu(1)))
    with pytest.raises(TVMError, match="needs an NDArray"):
        m.set_input_zero_copy("x", np.zeros((2, 3), "float32"))
    buffer = np.zeros(32, "float32")
    start = next(i for i in (1, 2) if buffer[i:].ctypes.data % 64)
    misaligned = nd.from_dlpack(buffer[start:start + 6].reshape(2, 3))  # a view, not a copy
    assert misaligned.data_ptr % 64
    with pytest.raises(TVMError, match="64-byte aligned"):
        m.set_input_zero_copy("x", misaligned)


def test_set_input_errors_name_the_problem(lib):
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    with pytest.raises(TVMError, match="Could not find 'y' in graph's inputs"):
        m.set_input("y", np.zeros((2, 3), "float32"))
    with pytest.raises(TVMError, match=r"set_input\('x'\): expected shape \(2, 3\)"):
        m.set_input("x", np.zeros((3, 2), "float32"))
    with pytest.raises(TVMError, match="dtype float32"):
        m.set_input("x", nd.array(np.zeros((2, 3), "int32")))
    with pytest.raises(TVMError, match="input index 5 is out of range"):
        m.set_input(5, np.zeros((2, 3), "float32"))
    with pytest.raises(TVMError, match="output index 1 is out of range"):
        m.get_output(1)
    with pytest.raises(TVMError, match="Could not find 'q' in graph's inputs"):
        m.get_input("q")
    with pytest.raises(TVMError, match="a name or an index, got 1.5"):
        m.set_input(1.5, np.zeros((2, 3), "float32"))
    with pytest.raises(TVMError, match="must be an int, got 'y'"):
        m.get_output("y")


def test_single_operator_entry_points_check_the_index(lib):
    executor = GraphExecutor(dumps(relu_add_graph()), lib, cpu(0))
    for bad in (-1, 2):
        with pytest.raises(TVMError, match=f"operator index {bad} is out of range"):
            executor.run_op(bad)
        with pytest.raises(TVMError, match=f"operator index {bad} is out of range"):
            executor.time_op(bad)
    with pytest.raises(TVMError, match="entry id 4 is out of range"):
        executor.entry_array(4)


def test_kernel_failure_names_the_node_and_carries_the_kernel_message(lib):
    nodes = [input_node("x"), op_node("bad_node", "always_fails", [[0, 0]])]
    m = graph_executor.create(dumps(graph(nodes, [[1, 0]], [[2]] * 2, [0, 1])), lib, cpu(0))
    with pytest.raises(TVMError, match="'bad_node'.*'always_fails'.*deliberate kernel failure"):
        m.run()


def test_unknown_function_is_named(lib):
    nodes = [input_node("x"), op_node("fused_mystery", "mystery_kernel", [[0, 0]])]
    with pytest.raises(TVMError, match="cannot find function 'mystery_kernel'.*fused_mystery"):
        graph_executor.create(dumps(graph(nodes, [[1, 0]], [[2]] * 2, [0, 1])), lib, cpu(0))


def test_run_does_no_per_op_python_work(lib, data):
    """One run is one call into C: the Python call count does not grow with the op count."""
    x, p0 = data

    def python_calls(m):
        calls = []
        sys.setprofile(lambda frame, event, arg: calls.append(event) if event == "call" else None)
        try:
            m.module.run()
        finally:
            sys.setprofile(None)
        return len(calls)

    small = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    nodes = [input_node("x"), input_node("p0")]
    for i in range(20):
        previous = 0 if i == 0 else len(nodes) - 1
        nodes.append(op_node(f"add{i}", "add_f32", [[previous, 0], [1, 0]]))
    big = graph_executor.create(dumps(graph(nodes, [[21, 0]], [[2, 3]] * 22,
                                            list(range(22)))), lib, cpu(0))
    big.run(x=x, p0=p0)
    np.testing.assert_allclose(big.get_output(0).numpy(), x + 20 * p0, rtol=1e-5)
    assert python_calls(big) == python_calls(small) <= 3


def test_benchmark_returns_benchmark_result(lib, data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    result = m.benchmark(cpu(0), repeat=3, number=4, x=x, p0=p0)
    assert isinstance(result, BenchmarkResult) and len(result.results) == 3
    assert 0 < result.min <= result.median <= result.max
    assert "Execution time summary" in str(result)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    e2e = m.benchmark(cpu(0), repeat=2, number=2, end_to_end=True)
    assert len(e2e.results) == 2
    timed = m.benchmark(cpu(0), func_name="get_num_outputs", repeat=1, number=1,
                        min_repeat_ms=1)
    assert timed.mean > 0
    with pytest.raises(AttributeError):
        m.benchmark(cpu(0), func_name="no_such_function")


# ---- malformed graph JSON: every problem is a clear TVMError, never a crash -------------------


def _good() -> dict:
    return relu_add_graph()


def _mutate(path: str, value):
    def apply(g):
        target = g
        keys = path.split("/")
        for key in keys[:-1]:
            target = target[int(key) if key.lstrip("-").isdigit() else key]
        last = keys[-1]
        key = int(last) if last.lstrip("-").isdigit() else last
        if value is _DELETE:
            del target[key]
        else:
            target[key] = value
        return g
    return apply


_DELETE = object()

BAD_GRAPHS = {
    "missing nodes": (_mutate("nodes", _DELETE), "missing required key 'nodes'"),
    "missing heads": (_mutate("heads", _DELETE), "missing required key 'heads'"),
    "missing node_row_ptr": (_mutate("node_row_ptr", _DELETE), "'node_row_ptr'"),
    "missing arg_nodes": (_mutate("arg_nodes", _DELETE), "'arg_nodes'"),
    "nodes not a list": (_mutate("nodes", {}), "nodes must be a list"),
    "input from a later node": (_mutate("nodes/2/inputs/0/0", 3), "not an earlier node"),
    "input node id out of range": (_mutate("nodes/2/inputs/0/0", 99), "not an earlier node"),
    "negative input id": (_mutate("nodes/2/inputs/0/0", -1), "must be an integer >= 0"),
    "input output index too big": (_mutate("nodes/2/inputs/0/1", 1), "has 1 outputs"),
    "bad edge": (_mutate("nodes/2/inputs/0", "x"), r"\[node_id, index, version\]"),
    "num_inputs mismatch": (_mutate("nodes/2/attrs/num_inputs", "3"), "num_inputs=3"),
    "num_inputs not int": (_mutate("nodes/2/attrs/num_inputs", "two"), "must be an integer"),
    "missing func_name": (_mutate("nodes/2/attrs/func_name", _DELETE), "'func_name'"),
    "missing flatten_data": (_mutate("nodes/3/attrs/flatten_data", _DELETE), "'flatten_data'"),
    "unknown op": (_mutate("nodes/2/op", "python_op"), "unknown op 'python_op'"),
    "node without name": (_mutate("nodes/0/name", _DELETE), "string 'name'"),
    "short node_row_ptr": (_mutate("node_row_ptr", [0, 1, 2]), "node_row_ptr must have 5"),
    "inconsistent node_row_ptr": (_mutate("node_row_ptr", [0, 1, 2, 4, 5]), "inconsistent"),
    "arg_nodes out of range": (_mutate("arg_nodes", [0, 9]), "arg_nodes item is 9"),
    "arg_nodes names an op": (_mutate("arg_nodes", [0, 2]), "which is not an input"),
    "head out of range": (_mutate("heads", [[7, 0, 0]]), "heads\\[0\\] node id is 7"),
    "head output index": (_mutate("heads", [[3, 2, 0]]), "fewer outputs"),
    "storage_id out of range": (_mutate("attrs/storage_id/1/2", 4), "storage_id 4 is out of"),
    "negative storage_id": (_mutate("attrs/storage_id/1/2", -1), "must be an integer >= 0"),
    "storage_id list short": (_mutate("attrs/storage_id/1", [0, 1]), "has 2 items"),
    "missing shape": (_mutate("attrs/shape", _DELETE), "attrs lacks 'shape'"),
    "bad shape tag": (_mutate("attrs/shape/0", "list_int"), r"\['list_shape', \[...\]\]"),
    "negative dim": (_mutate("attrs/shape/1/0", [2, -3]), "shape dim must be an integer >= 0"),
    "bad dltype": (_mutate("attrs/dltype/1/0", "floaty32"), "bad dltype 'floaty32'"),
    "unknown attr": (_mutate("attrs/fancy", ["list_str", []]), "unknown graph attribute 'fancy'"),
    "lone surrogate func_name": (_mutate("nodes/2/attrs/func_name", "\ud800"),
                                 r"not valid Unicode \(a lone surrogate"),
    "lone surrogate name": (_mutate("nodes/0/name", "x\udfff"), "not valid Unicode"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_malformed_graph_json_raises(lib, case):
    mutate, message = BAD_GRAPHS[case]
    text = dumps(mutate(_good()))
    with pytest.raises(TVMError, match=message):
        graph_executor.create(text, lib, cpu(0))


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"nodes": 3}', "\x00\xff",
                                  '{"nodes": ' + "[" * 100_000])
def test_garbage_graph_json_raises(lib, text):
    with pytest.raises(TVMError, match="invalid graph JSON"):
        graph_executor.create(text, lib, cpu(0))


def test_skippable_attrs_and_metadata_are_accepted():
    g = _good()
    g["attrs"]["extra_ints"] = ["list_int", [1, 2, 3]]
    g["metadata"] = {"anything": 1}
    parsed = parse_graph_json(json.dumps(g))
    assert [n.name for n in parsed.nodes] == ["x", "p0", "fused_add", "fused_relu"]
    assert parsed.entries[2].storage_id == 2 and parsed.entries[2].nbytes == 24


def test_absurd_shapes_fail_cleanly_at_allocation(lib):
    g = _good()
    g["attrs"]["shape"][1][2] = [1 << 40, 1 << 30]
    with pytest.raises(TVMError, match="cannot allocate storage_id 2"):
        graph_executor.create(dumps(g), lib, cpu(0))


def test_nop_must_share_its_inputs_storage(lib):
    nodes = [input_node("x"), op_node("reshape_nop", "__nop", [[0, 0]])]
    g = graph(nodes, [[1, 0]], [[2, 3], [3, 2]], [0, 1])
    with pytest.raises(TVMError, match="__nop node 'reshape_nop' must share"):
        graph_executor.create(dumps(g), lib, cpu(0))


def test_copy_sizes_must_match(lib):
    g = _two_device_graph()
    g["attrs"]["shape"][1][3] = [3, 3]
    with pytest.raises(TVMError, match="__copy node '__copy' copies 24 bytes into 36"):
        graph_executor.create(dumps(g), lib, cpu(0))


def test_storage_cannot_span_device_types(lib):
    g = _two_device_graph()
    g["attrs"]["storage_id"][1] = [0, 1, 2, 2, 4]
    g["attrs"]["device_index"][1] = [1, 1, 1, 12, 1]
    with pytest.raises(TVMError, match="cannot span devices"):
        graph_executor.create(dumps(g), lib, [cpu(0)])


def test_device_list_must_be_devices(lib):
    with pytest.raises(TVMError, match="at least one device"):
        graph_executor.create(dumps(relu_add_graph()), lib, [])
    with pytest.raises(TVMError, match="Device objects or"):
        graph_executor.create(dumps(relu_add_graph()), lib, ["cpu"])


def test_create_requires_a_string_and_a_module(lib):
    with pytest.raises(TVMError, match="must be a str"):
        graph_executor.create(42, lib, cpu(0))
    with pytest.raises(TVMError, match="kernel Module"):
        GraphExecutor(dumps(relu_add_graph()), "not a module", cpu(0))
    with pytest.raises(TVMError, match="wraps a GraphExecutor"):
        graph_executor.GraphModule(lib)


class _PythonKernels(Module):
    """Kernels written in Python: the executor calls them through their C trampolines."""

    type_key = "test.python_kernels"

    def _get_function(self, name):
        def add(a, b, out):
            out.copyfrom(a.numpy() + b.numpy())

        def relu(a, out):
            out.copyfrom(np.maximum(a.numpy(), 0))

        def broken(a, out):
            raise ValueError("python kernel exploded")

        return {"add_f32": add, "relu_f32": relu, "always_fails": broken}.get(name)


def test_python_function_kernels_run_through_trampolines(data):
    x, p0 = data
    m = graph_executor.create(dumps(relu_add_graph()), _PythonKernels(), cpu(0))
    m.run(x=x, p0=p0)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.maximum(x + p0, 0), rtol=1e-6)
    nodes = [input_node("x"), op_node("bad_node", "always_fails", [[0, 0]])]
    bad = graph_executor.create(dumps(graph(nodes, [[1, 0]], [[2]] * 2, [0, 1])),
                                _PythonKernels(), cpu(0))
    with pytest.raises(TVMError, match="'bad_node'.*python kernel exploded"):
        bad.run()


def test_kernels_found_in_imported_modules(lib, data):
    x, p0 = data
    holder = _PythonKernels()
    holder.import_module(lib)  # double_flat_f32 only exists in the C library
    nodes = [input_node("x"), op_node("fused_double", "double_flat_f32", [[0, 0]], flatten="1")]
    m = graph_executor.create(dumps(graph(nodes, [[1, 0]], [[2, 3]] * 2, [0, 1])), holder,
                              cpu(0))
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), 2 * x)


_FUZZ_VALUES = [0, 1, 2, 5, -1, 99, "0", "1", "x", None, [], {}, [0], [0, 0, 0], 1.5, True,
                "float32", "int8", [2, 3], [[0, 0, 0]]]


def _json_paths(value, prefix=()):
    if prefix:
        yield prefix
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(
        value, list) else ()
    for key, child in children:
        yield from _json_paths(child, prefix + (key,))


def test_randomly_corrupted_graphs_only_ever_raise_tvm_error(lib):
    """Seeded mutation fuzzing: a corrupted graph either runs or raises TVMError."""
    import copy
    import random

    rng = random.Random(1234)
    outcomes = {"ran": 0, "rejected": 0}
    for _ in range(400):
        g = rng.choice([relu_add_graph, reuse_graph])()
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(list(_json_paths(g)))
            parent = g
            for key in path[:-1]:
                parent = parent[key]
            if rng.random() < 0.2:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(rng.choice(_FUZZ_VALUES))
        try:
            executor = GraphExecutor(json.dumps(g), lib, cpu(0))
            for i in range(executor.get_num_inputs()):
                current = executor.get_input(i)
                executor.set_input(i, np.ones(current.shape, current.dtype))
            executor.run()
            outcomes["ran"] += 1
        except TVMError:
            outcomes["rejected"] += 1
    assert outcomes["rejected"] > 100 and outcomes["ran"] > 10, outcomes


def test_pool_entries_are_sized_by_the_largest_entry_per_storage_id(lib):
    """Entries of any dtype share a storage id; the pool buffer fits the biggest of them."""
    nodes = [input_node("a"), input_node("b"), input_node("c"), input_node("d")]
    g = graph(nodes, [[0, 0]], [[2, 3], [5], [2, 2], [3]], [0, 0, 0, 1],
              dtypes=["int8", "float32", "float32x4", "bool"])
    executor = GraphExecutor(dumps(g), lib, cpu(0))
    entries = executor.graph.entries
    assert [e.nbytes for e in entries] == [6, 20, 64, 3]  # int8, f32, 16-byte vectors, 1-byte bool
    arrays = [executor.entry_array(i) for i in range(4)]
    assert arrays[0].data_ptr == arrays[1].data_ptr == arrays[2].data_ptr
    assert arrays[2].shape == (2, 2) and arrays[2].dtype == "float32x4"
    assert arrays[0].data_ptr % 64 == 0 and arrays[3].data_ptr % 64 == 0
    executor.set_input("c", np.arange(16, dtype="float32").reshape(2, 2, 4))
    np.testing.assert_array_equal(executor.get_input("b").numpy(), np.arange(5, dtype="float32"))
    executor.set_input("d", [True, False, True])
    np.testing.assert_array_equal(executor.get_input("d").numpy(), [True, False, True])
