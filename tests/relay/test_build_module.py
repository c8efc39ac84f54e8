"""relay.build for the graph executor: TVM's graph JSON, memory plan, and numerics against the
reference interpreter."""

import json
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.runtime.error import TVMError


def _seed_chain():
    a = relay.var("a", shape=(1, 10), dtype="float32")
    b = relay.var("b", shape=(1, 10), dtype="float32")
    out = relay.add(relay.add(relay.add(a, b), a), b)
    return relay.Function([a, b], out)


def test_seed_004_graph_json_and_storage_ids():
    mod = tvm.IRModule.from_expr(_seed_chain())
    with tvm.transform.PassContext(opt_level=0):
        with pytest.warns(DeprecationWarning, match="legacy graph executor"):
            graph, lib, params = relay.build(mod, target="c", params=None)
    g = json.loads(graph)
    assert [n["op"] for n in g["nodes"]] == ["null", "null", "tvm_op", "tvm_op", "tvm_op"]
    assert [n["name"] for n in g["nodes"][2:]] == [
        "tvmgen_default_fused_add", "tvmgen_default_fused_add1", "tvmgen_default_fused_add2"]
    assert {n["attrs"]["func_name"] for n in g["nodes"][2:]} == {"tvmgen_default_fused_add"}
    assert g["nodes"][3]["inputs"] == [[2, 0, 0], [0, 0, 0]]
    assert g["arg_nodes"] == [0, 1] and g["heads"] == [[4, 0, 0]]
    assert g["attrs"]["storage_id"] == ["list_int", [0, 1, 2, 3, 2]]
    assert g["attrs"]["dltype"] == ["list_str", ["float32"] * 5]
    assert g["attrs"]["shape"] == ["list_shape", [[1, 10]] * 5]
    assert g["node_row_ptr"] == [0, 1, 2, 3, 4, 5]
    assert all(isinstance(v, str) for n in g["nodes"][2:] for v in n["attrs"].values())
    assert params == {}
    assert "tvmgen_default_fused_add" in lib.get_source()


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_seed_004_graph_executor_result(target):
    x, y = np.ones((1, 10), "float32"), np.full((1, 10), 2.0, "float32")
    ex = relay.create_executor("graph", device=tvm.cpu(0), target=target)
    out = ex.evaluate(_seed_chain())(x, y)
    np.testing.assert_allclose(out.numpy(), 2 * x + 2 * y)


def _mlp(batch=1):
    x = relay.var("x", shape=(batch, 64))
    w1, b1 = relay.var("w1", shape=(32, 64)), relay.var("b1", shape=(32,))
    w2, b2 = relay.var("w2", shape=(10, 32)), relay.var("b2", shape=(10,))
    h = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w1), b1))
    y = relay.nn.softmax(relay.nn.bias_add(relay.nn.dense(h, w2), b2))
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((32, 64)).astype("float32") * 0.1,
              "b1": rng.standard_normal(32).astype("float32"),
              "w2": rng.standard_normal((10, 32)).astype("float32") * 0.1,
              "b2": rng.standard_normal(10).astype("float32")}
    return tvm.IRModule.from_expr(relay.Function([x, w1, b1, w2, b2], y)), params


def _reference(mod, params, *inputs):
    ex = relay.create_executor("debug", mod=mod, params=params)
    return ex.evaluate()(*inputs).numpy()


def test_mlp_with_params_matches_interpreter_and_fuses():
    mod, params = _mlp()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    assert lib.stats["kernels"] == 3  # dense+bias+relu, dense+bias, softmax
    assert sorted(lib.get_params()) == ["p0", "p1", "p2", "p3"]
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    x = np.random.default_rng(1).standard_normal((1, 64)).astype("float32")
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), _reference(mod, params, x), rtol=1e-5,
                               atol=1e-6)


def test_export_and_load_in_a_fresh_process(tmp_path):
    mod, params = _mlp()
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", params=params)
    path = tmp_path / "model.so"
    lib.export_library(str(path))
    x = np.random.default_rng(2).standard_normal((1, 64)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys, numpy as np
        import kiln.runtime as rt
        from kiln.runtime.graph_executor import GraphExecutor
        m = rt.load_module({str(path)!r})["default"](rt.cpu(0))
        m.set_input("x", np.load({str(tmp_path / 'x.npy')!r}))
        m.run()
        np.save({str(tmp_path / 'y.npy')!r}, m.get_output(0).numpy())
        leaked = [k for k in sys.modules if k.startswith("kiln.") and not
                  (k.startswith("kiln.runtime") or k == "kiln._lazy")]
        assert not leaked, leaked
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _reference(mod, params, x),
                               rtol=1e-5, atol=1e-6)


def test_second_build_is_deterministic():
    mod, params = _mlp()
    with tvm.transform.PassContext(opt_level=3):
        first = relay.build(mod, target="c", params=params)
        second = relay.build(mod, target="c", params=params)
    assert first.graph_json == second.graph_json
    assert first.get_lib().get_source() == second.get_lib().get_source()


def test_dynamic_shape_is_refused_with_a_hint():
    x = relay.var("x", shape=(relay.Any(), 4))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x)))
    with pytest.raises(TVMError, match="symbolic tensor shape.*use the VM"):
        relay.build(mod, target="c")


def test_bad_inputs_to_build_are_named():
    with pytest.raises(TVMError, match="IRModule or a relay.Function"):
        relay.build("not a module", target="c")
    with pytest.raises(TVMError, match="unknown executor"):
        relay.backend.Executor("nope")


def test_kiln_debug_1_prints_the_build_stage_breakdown(monkeypatch, capfd):
    monkeypatch.setenv("KILN_DEBUG", "1")
    x = relay.var("x", shape=(4, 8))
    w = relay.var("w", shape=(16, 8))
    mod = tvm.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))))
    with tvm.transform.PassContext(opt_level=3):
        relay.build(mod, target="c")
    line = [ln for ln in capfd.readouterr().err.splitlines() if "relay.build stages" in ln]
    assert len(line) == 1
    stages = dict(re.findall(r"(passes|lower|codegen|cc|other|total) (-?[\d.]+) s", line[0]))
    assert set(stages) == {"passes", "lower", "codegen", "cc", "other", "total"}
    assert "(1 kernels)" in line[0]
    parts = sum(float(stages[k]) for k in ("passes", "lower", "codegen", "cc", "other"))
    assert abs(parts - float(stages["total"])) < 0.05
