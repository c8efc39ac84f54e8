"""Heterogeneous execution on the graph executor: PlanDevices, relay.build with a target dict,
graph JSON device attributes and __copy nodes, and running on two CPU devices.

kiln has one device type with memory here (the CPU), so the second device is ``cpu(1)``:
virtual devices are (type, id) pairs, so cpu(0) and cpu(1) regions are planned, copied
between and allocated apart exactly as a CPU/GPU split would be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.build_module import parse_targets
from kiln.relay.transform.plan_devices import analyze_devices

CPU0, CPU1 = tvm.cpu(0), tvm.cpu(1)
TARGET = {"cpu": "c"}
RNG = np.random.default_rng(7)


def _on(expr, device, **kwargs):
    return relay.annotation.on_device(expr, device, **kwargs)


def _build(func, params=None, target=None, opt_level=1):
    with tvm.transform.PassContext(opt_level=opt_level):
        return relay.build(tvm.IRModule.from_expr(func), target or TARGET, params=params)


def _run(lib, devices, **inputs):
    m = graph_executor.GraphModule(lib["default"](*devices))
    for name, value in inputs.items():
        m.set_input(name, value)
    m.run()
    return m, [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def _interpret(func, *args):
    result = relay.create_executor("debug", tvm.IRModule.from_expr(func)).evaluate()(*args)
    fields = result if isinstance(result, list | tuple) else [result]
    return [np.asarray(getattr(f, "numpy", lambda f=f: f)()) for f in fields]


def _graph(lib):
    return json.loads(lib.get_graph_json())


def _entry_devices(graph):
    attrs = graph["attrs"]
    return list(zip(attrs["device_index"][1], attrs["device_id"][1]))


def _assert_storage_not_shared_across_devices(graph):
    owner = {}
    for sid, device in zip(graph["attrs"]["storage_id"][1], _entry_devices(graph)):
        assert owner.setdefault(sid, device) == device, f"storage {sid} spans devices"


def _ops(graph):
    return [(n["attrs"]["func_name"], n["inputs"]) for n in graph["nodes"] if n["op"] != "null"]


# ---- the seed's example: add on the second device, log on the first ----------------------


def _seed_function():
    x = relay.var("x", shape=(1, 5))
    y = relay.var("y", shape=(1, 5))
    return relay.Function([x, y], relay.log(_on(relay.add(x, y), CPU1)))


@pytest.fixture(scope="module")
def seed_build():
    x = RNG.random((1, 5), dtype="float32")
    y = RNG.random((1, 5), dtype="float32")
    return _build(_seed_function(), params={"x": x, "y": y}), x, y


def test_seed_graph_has_device_index_per_entry_and_a_copy_node(seed_build):
    lib, _, _ = seed_build
    graph = _graph(lib)
    # p0, p1, add, __copy, log: the params follow the add onto cpu(1) (as TVM's [4,4,4,1,1])
    assert [n["op"] for n in graph["nodes"]] == ["null", "null", "tvm_op", "tvm_op", "tvm_op"]
    assert graph["nodes"][3]["attrs"]["func_name"] == "__copy"
    assert graph["nodes"][3]["inputs"] == [[2, 0, 0]]
    assert graph["nodes"][4]["inputs"] == [[3, 0, 0]]
    assert graph["attrs"]["device_index"] == ["list_int", [1, 1, 1, 1, 1]]
    assert graph["attrs"]["device_id"] == ["list_int", [1, 1, 1, 0, 0]]
    _assert_storage_not_shared_across_devices(graph)


def test_seed_runs_on_two_cpu_devices(seed_build):
    lib, x, y = seed_build
    m, (out,) = _run(lib, [CPU0, CPU1])
    np.testing.assert_allclose(out, np.log(x + y), rtol=1e-6)
    assert m.module.get_input("p0").device == CPU1
    assert m.get_output(0).device == CPU0


def test_seed_entries_live_on_their_planned_devices(seed_build):
    lib, _, _ = seed_build
    m, _ = _run(lib, [CPU1, CPU0])  # the order of the given devices does not matter
    devices = [m.module.entry_array(e).device for e in range(5)]
    assert devices == [CPU1, CPU1, CPU1, CPU0, CPU0]


def test_one_given_device_of_the_type_takes_every_entry(seed_build):
    lib, x, y = seed_build
    m, (out,) = _run(lib, [CPU0])
    np.testing.assert_allclose(out, np.log(x + y), rtol=1e-6)
    assert {m.module.entry_array(e).device for e in range(5)} == {CPU0}


def test_inputs_are_copied_to_their_device_and_match_the_interpreter():
    func = _seed_function()
    lib = _build(func)
    x = RNG.random((1, 5), dtype="float32")
    y = RNG.random((1, 5), dtype="float32")
    m, (out,) = _run(lib, [CPU0, CPU1], x=x, y=y)
    assert m.module.get_input("x").device == CPU1
    np.testing.assert_allclose(out, _interpret(func, x, y)[0], rtol=1e-6)


# ---- shapes of heterogeneous programs -----------------------------------------------------


def _diamond():
    """exp on cpu(0) -> copy to cpu(1) for sqrt -> copy back to cpu(0) to add with exp."""
    x = relay.var("x", shape=(4, 8))
    a = relay.exp(x)
    s = _on(relay.sqrt(_on(a, CPU0)), CPU1)
    return relay.Function([x], relay.add(s, a))


def test_diamond_copies_both_ways():
    func = _diamond()
    lib = _build(func)
    graph = _graph(lib)
    copies = [i for i, n in enumerate(graph["nodes"]) if n.get("attrs", {}).get("func_name")
              == "__copy"]
    devices = _entry_devices(graph)
    assert len(copies) == 2
    directions = [(devices[graph["nodes"][i]["inputs"][0][0]], devices[i]) for i in copies]
    assert sorted(directions) == [((1, 0), (1, 1)), ((1, 1), (1, 0))]
    _assert_storage_not_shared_across_devices(graph)
    x = RNG.random((4, 8), dtype="float32")
    _, (out,) = _run(lib, [CPU0, CPU1], x=x)
    np.testing.assert_allclose(out, np.sqrt(np.exp(x)) + np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(out, _interpret(func, x)[0], rtol=1e-5)


def _middle_on_second_device(annotate=True):
    x = relay.var("x", shape=(2, 16))
    h = relay.nn.relu(relay.multiply(x, relay.const(2.0)))
    boundary = _on(h, CPU0) if annotate else h
    middle = relay.tanh(relay.add(relay.exp(boundary), relay.const(1.0)))
    middle = _on(middle, CPU1) if annotate else middle
    out = relay.sigmoid(relay.subtract(middle, relay.const(0.5)))
    return relay.Function([x], out)


def test_fusion_stops_at_device_boundaries():
    plain = _graph(_build(_middle_on_second_device(False), opt_level=3))
    split = _build(_middle_on_second_device(True), opt_level=3)
    graph = _graph(split)
    kernels = [f for f, _ in _ops(graph) if f != "__copy"]
    assert len([f for f, _ in _ops(plain)]) == 1  # unannotated: one fused kernel
    assert len(kernels) == 3  # head on cpu(0), middle on cpu(1), tail on cpu(0)
    devices = _entry_devices(graph)
    kernel_devices = [devices[i] for i, n in enumerate(graph["nodes"])
                      if n["op"] == "tvm_op" and n["attrs"]["func_name"] != "__copy"]
    assert kernel_devices == [(1, 0), (1, 1), (1, 0)]
    _assert_storage_not_shared_across_devices(graph)


def test_middle_subgraph_on_second_device_matches_numpy_and_interpreter():
    func = _middle_on_second_device()
    lib = _build(func, opt_level=3)
    x = RNG.standard_normal((2, 16), dtype="float32")
    _, (out,) = _run(lib, [CPU0, CPU1], x=x)
    h = np.maximum(x * 2, 0)
    expected = 1 / (1 + np.exp(-(np.tanh(np.exp(h) + 1) - 0.5)))
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    np.testing.assert_allclose(out, _interpret(func, x)[0], rtol=1e-5)


def test_tuple_fields_cross_devices():
    x = relay.var("x", shape=(3,))
    y = relay.var("y", shape=(3,))
    func = relay.Function([x, y], relay.Tuple([_on(relay.exp(x), CPU1), relay.log(y)]))
    lib = _build(func)
    graph = _graph(lib)
    devices = _entry_devices(graph)
    heads = [h[0] for h in graph["heads"]]
    assert graph["nodes"][heads[0]]["attrs"]["func_name"] == "__copy"
    assert devices[heads[0]] == devices[heads[1]] == (1, 0)
    xv, yv = RNG.random(3, dtype="float32") + 0.5, RNG.random(3, dtype="float32") + 0.5
    _, (a, b) = _run(lib, [CPU0, CPU1], x=xv, y=yv)
    np.testing.assert_allclose(a, np.exp(xv), rtol=1e-6)
    np.testing.assert_allclose(b, np.log(yv), rtol=1e-6)


def test_a_tuple_value_is_copied_per_tensor():
    x = relay.var("x", shape=(4, 6))
    parts = _on(relay.split(relay.exp(x), 2, axis=1).astuple(), CPU1)
    func = relay.Function([x], relay.add(relay.TupleGetItem(parts, 0),
                                         relay.TupleGetItem(parts, 1)))
    lib = _build(func)
    graph = _graph(lib)
    assert [f for f, _ in _ops(graph)].count("__copy") == 2
    _assert_storage_not_shared_across_devices(graph)
    xv = RNG.random((4, 6), dtype="float32")
    _, (out,) = _run(lib, [CPU0, CPU1], x=xv)
    np.testing.assert_allclose(out, np.exp(xv[:, :3]) + np.exp(xv[:, 3:]), rtol=1e-6)


def test_constants_follow_their_consumer_onto_the_device():
    x = relay.var("x", shape=(5,))
    weight = np.arange(5, dtype="float32")
    func = relay.Function([x], relay.exp(_on(relay.multiply(x, relay.const(weight)), CPU1)))
    lib = _build(func)
    graph = _graph(lib)
    devices = _entry_devices(graph)
    const_node = [i for i, n in enumerate(graph["nodes"]) if n["name"] == "p0"][0]
    assert devices[const_node] == (1, 1)
    m, (out,) = _run(lib, [CPU0, CPU1], x=np.ones(5, "float32"))
    assert m.module.get_input("p0").device == CPU1
    np.testing.assert_allclose(out, np.exp(weight), rtol=1e-6)


def test_constrain_result_fixes_the_annotated_value():
    x = relay.var("x", shape=(3,))
    body = _on(relay.exp(x), CPU1, constrain_result=True)
    mod = relay.transform.PlanDevices(CPU0)(tvm.IRModule.from_expr(relay.Function([x], body)))
    main = mod["main"]
    assert main.attrs["result_virtual_device"] == CPU1
    assert tuple(main.attrs["param_virtual_devices"]) == (CPU1,)
    assert "device_copy" not in str(main) and "on_device" not in str(main)


def test_plan_devices_records_devices_and_replaces_annotations():
    mod = relay.transform.PlanDevices(CPU0)(tvm.IRModule.from_expr(_seed_function()))
    main = mod["main"]
    assert tuple(main.attrs["param_virtual_devices"]) == (CPU1, CPU1)
    assert main.attrs["result_virtual_device"] == CPU0
    copy = main.body.args[0]
    assert copy.op.name == "device_copy"
    assert (copy.attrs.src_virtual_device, copy.attrs.dst_virtual_device) == (CPU1, CPU0)
    devices = analyze_devices(mod, CPU0)
    assert devices.device_of(copy.args[0]) == CPU1 and devices.device_of(main.body) == CPU0


def test_if_and_let_share_their_devices_with_branches_and_bodies():
    x = relay.var("x", shape=(2,))
    v = relay.var("v")
    cond = relay.greater(relay.sum(x), relay.const(0.0))
    branch = relay.If(cond, relay.exp(x), relay.negative(x))
    body = relay.Let(v, _on(branch, CPU1), relay.add(v, relay.const(1.0)))
    mod = relay.transform.PlanDevices(CPU0)(tvm.IRModule.from_expr(relay.Function([x], body)))
    devices = analyze_devices(mod, CPU0)
    let = mod["main"].body
    assert devices.device_of(let.value.args[0]) == CPU1  # the if, under the copy
    assert devices.device_of(let.value.args[0].true_branch) == CPU1
    assert devices.device_of(let.body) == CPU0


# ---- targets, devices lists, export -------------------------------------------------------


def test_target_forms_map_device_types_to_targets():
    by_name, host = parse_targets({"cpu": "c", "opencl": "opencl"})
    assert sorted(by_name) == [1, 4] and host.kind.name == "c"
    by_type, _ = parse_targets({1: "c"})
    as_list, _ = parse_targets([tvm.target.Target("c")])
    assert list(by_type) == list(as_list) == [1]
    _, host = parse_targets({"opencl": "opencl"}, target_host="c")
    assert host.kind.name == "c"


def test_build_with_a_plain_target_and_a_target_key_dict(seed_build):
    x = RNG.random((1, 5), dtype="float32")
    y = RNG.random((1, 5), dtype="float32")
    for target in ("c", {tvm.target.Target("c"): "c"}):
        lib = _build(_seed_function(), target=target)
        _, (out,) = _run(lib, [CPU0, CPU1], x=x, y=y)
        np.testing.assert_allclose(out, np.log(x + y), rtol=1e-6)


def test_contrib_create_with_a_device_list(seed_build):
    lib, x, y = seed_build
    m = graph_executor.create(lib.get_graph_json(), lib.get_lib(), [CPU0, CPU1])
    m.set_input(**lib.get_params())
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), np.log(x + y), rtol=1e-6)
    assert m.module.entry_array(2).device == CPU1


def test_export_then_load_in_a_fresh_process_keeps_devices(seed_build, tmp_path):
    lib, x, y = seed_build
    path = tmp_path / "hetero.so"
    lib.export_library(str(path))
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.contrib import graph_executor
        lib = kiln.runtime.load_module({str(path)!r})
        m = graph_executor.GraphModule(lib["default"](kiln.cpu(0), kiln.cpu(1)))
        m.run()
        assert m.module.entry_array(2).device == kiln.cpu(1)
        assert m.module.entry_array(4).device == kiln.cpu(0)
        np.save({str(tmp_path / "out.npy")!r}, m.get_output(0).numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), np.log(x + y), rtol=1e-6)


# ---- bad input ----------------------------------------------------------------------------


def test_on_device_with_an_unknown_device_name_is_an_error():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.exp(_on(x, "tpu")))
    with pytest.raises(tvm.TVMError, match="unknown device type"):
        _build(func)


def test_on_device_without_a_device_is_an_error():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.exp(_on(x, None)))
    with pytest.raises(tvm.TVMError, match="virtual_device"):
        _build(func)


def test_a_device_without_a_target_is_an_error():
    x = relay.var("x", shape=(2,))
    func = relay.Function([x], relay.log(_on(relay.exp(x), tvm.cuda(0))))
    with pytest.raises(tvm.TVMError, match="no target for device type 2"):
        _build(func)


def test_conflicting_constraints_are_an_error():
    x = relay.var("x", shape=(2,))
    pinned0 = _on(x, CPU0, constrain_result=True)
    pinned1 = _on(x, CPU1, constrain_result=True)
    func = relay.Function([x], relay.add(pinned0, pinned1))
    with pytest.raises(tvm.TVMError, match="conflicting device constraints"):
        _build(func)


def test_bad_target_dicts_are_errors():
    with pytest.raises(tvm.TVMError, match="empty"):
        parse_targets({})
    with pytest.raises(tvm.TVMError, match="two targets for device type 1"):
        parse_targets({"cpu": "c", 1: "llvm"})
    with pytest.raises(tvm.TVMError, match="keyed by device names"):
        parse_targets({3.5: "c"})


def test_a_graph_whose_storage_spans_devices_is_refused(seed_build):
    lib, _, _ = seed_build
    graph = _graph(lib)
    graph["attrs"]["storage_id"][1][3] = graph["attrs"]["storage_id"][1][2]  # copy's output
    with pytest.raises(tvm.TVMError, match="cannot span devices"):
        graph_executor.create(json.dumps(graph), lib.get_lib(), [CPU0, CPU1])


def test_a_negative_device_id_is_refused(seed_build):
    lib, _, _ = seed_build
    graph = _graph(lib)
    graph["attrs"]["device_id"][1][0] = -1
    with pytest.raises(tvm.TVMError, match="device_id"):
        graph_executor.create(json.dumps(graph), lib.get_lib(), [CPU0, CPU1])


def test_an_input_on_an_opencl_device_is_copied_through_its_device_api():
    x = relay.var("x", shape=(2, 3))
    func = relay.Function([x], relay.exp(_on(x, tvm.opencl(0))))
    lib = _build(func, target={"cpu": "c", "opencl": "opencl"})
    graph = _graph(lib)
    assert graph["attrs"]["device_index"] == ["list_int", [4, 1, 1]]
    assert graph["nodes"][1]["attrs"]["func_name"] == "__copy"
    xv = RNG.random((2, 3), dtype="float32")
    m, (out,) = _run(lib, [CPU0, tvm.opencl(0)], x=xv)
    assert m.module.get_input("x").device == tvm.opencl(0)
    np.testing.assert_allclose(out, np.exp(xv), rtol=1e-6)
