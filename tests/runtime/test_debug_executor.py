"""The debug executor: node-by-node timing, intermediate outputs and dumps, against NumPy."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from graph_executor_testlib import build_kernel_library, dumps, relu_add_graph, reuse_graph

from kiln.contrib.debugger import debug_executor
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError
from kiln.runtime.params import load_param_dict
from kiln.runtime.profiling import BenchmarkResult, Report

X = np.array([-1, 2, -3, 4], "float32")
P0 = np.array([0.5, 0.5, 5, 1], "float32")
ADD = X + P0
RELU = np.maximum(ADD, 0)
MUL = RELU * P0


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build_kernel_library(tmp_path_factory.mktemp("debug_kernels"))


@pytest.fixture
def debug_module(lib, tmp_path):
    m = debug_executor.create(dumps(reuse_graph()), lib, cpu(0), dump_root=str(tmp_path))
    m.set_input("x", X)
    m.set_input("p0", P0)
    return m


def test_run_prints_a_per_node_table_and_matches_normal_run(debug_module, capsys):
    debug_module.run()
    table = capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["Name", "Op", "Duration"]
    names_in_order = [line.split()[0] for line in lines[2:5]]
    assert names_in_order == ["fused_add", "fused_relu", "fused_mul"]  # graph order
    assert "[(4,)]" in lines[2]
    assert len(debug_module.node_times_us) == 3
    assert all(t >= 0 for t in debug_module.node_times_us)
    np.testing.assert_allclose(debug_module.get_output(0).numpy(), MUL)


def test_dump_holds_every_intermediate_despite_storage_reuse(debug_module, tmp_path):
    # fused_mul writes into fused_add's storage; the dump must still hold x + p0.
    debug_module.run()
    folder = tmp_path / "_tvmdbg_device_CPU_0"
    assert debug_module.dump_folder == str(folder)
    dumped = load_param_dict((folder / "output_tensors.params").read_bytes())
    np.testing.assert_allclose(dumped["fused_add:0"].numpy(), ADD)
    np.testing.assert_allclose(dumped["fused_relu:0"].numpy(), RELU)
    np.testing.assert_allclose(dumped["fused_mul:0"].numpy(), MUL)
    np.testing.assert_allclose(dumped["x:0"].numpy(), X)
    assert json.loads((folder / "_tvmdbg_graph_dump.json").read_text()) == reuse_graph()
    trace = json.loads((folder / "_tvmdbg_execution_trace.json").read_text())
    assert [t["name"] for t in trace] == ["fused_add", "fused_relu", "fused_mul"]
    np.testing.assert_allclose(debug_module.get_dumped_output("fused_add:0").numpy(), ADD)
    with pytest.raises(TVMError, match="no dumped output 'nope:0'"):
        debug_module.get_dumped_output("nope:0")


def test_debug_get_output_by_name_and_index(debug_module):
    np.testing.assert_allclose(debug_module.debug_get_output("fused_add").numpy(), ADD)
    np.testing.assert_allclose(debug_module.debug_get_output(3).numpy(), RELU)
    np.testing.assert_allclose(debug_module.debug_get_output("fused_mul").numpy(), MUL)
    np.testing.assert_allclose(debug_module.debug_get_output("p0").numpy(), P0)
    out = np.zeros(4, "float32")
    from kiln.runtime import ndarray as nd

    target = nd.array(out)
    debug_module.debug_get_output("fused_add", target)
    np.testing.assert_allclose(target.numpy(), ADD)


def test_debug_get_output_rejects_unknown_nodes(debug_module):
    with pytest.raises(TVMError, match="Could not find node 'nope'"):
        debug_module.debug_get_output("nope")
    with pytest.raises(TVMError, match="node index 9 is out of range"):
        debug_module.debug_get_output(9)


def test_profile_returns_a_report_with_one_row_per_operator(debug_module):
    report = debug_module.profile(number=3)
    assert isinstance(report, Report)
    assert [c["Name"] for c in report.calls] == ["fused_add", "fused_relu", "fused_mul"]
    assert [c["Op"] for c in report.calls] == ["add_f32", "relu_f32", "mul_f32"]
    assert sum(c["Percent"] for c in report.calls) == pytest.approx(100.0)
    assert "fused_relu" in report.table()


def test_run_individual_and_single_node_benchmark(debug_module):
    times = debug_module.run_individual(number=5, repeat=2)
    assert len(times) == 3 and all(t >= 0 for t in times)
    times = debug_module.run_individual(number=1, min_repeat_ms=1)
    assert len(times) == 3
    result = debug_module.run_individual_node(1, number=3, repeat=2)
    assert isinstance(result, BenchmarkResult) and len(result.results) == 2
    with pytest.raises(TVMError, match="operator index 3 is out of range"):
        debug_module.run_individual_node(3)
    with pytest.raises(TVMError, match="must be >= 1"):
        debug_module.run_individual(number=0)


def test_profile_report_before_run_is_an_error(debug_module):
    with pytest.raises(TVMError, match="no timings yet"):
        debug_module.profile_report()


def test_temporary_dump_root_is_removed_by_exit(lib, capsys):
    m = debug_executor.create(dumps(relu_add_graph()), lib, cpu(0))
    m.run(x=np.ones((2, 3), "float32"), p0=np.ones((2, 3), "float32"))
    assert os.path.isdir(m.dump_folder)
    np.testing.assert_allclose(m.get_output(0).numpy(), np.full((2, 3), 2.0))
    m.exit()
    assert not os.path.exists(m.dump_root)


def test_kernel_failure_in_debug_run_names_the_node(lib, capsys):
    from graph_executor_testlib import graph, input_node, op_node

    nodes = [input_node("x"), op_node("bad_node", "always_fails", [[0, 0]])]
    m = debug_executor.create(dumps(graph(nodes, [[1, 0]], [[2]] * 2, [0, 1])), lib, cpu(0))
    with pytest.raises(TVMError, match="'bad_node'.*deliberate kernel failure"):
        m.run()
    with pytest.raises(TVMError, match="'bad_node'.*deliberate kernel failure"):
        m.profile()
    m.exit()


def test_create_requires_a_graph_json_string(lib):
    with pytest.raises(TVMError, match="must be a str"):
        debug_executor.create(None, lib, cpu(0))
