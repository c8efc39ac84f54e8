"""PlanDevices on random programs: every operator gets a random device among cpu(0)/cpu(1),
every use of a value is a device boundary (``on_device(value, device of value)``), so the plan
is fully determined. The built graph must then run each kernel on one device with its inputs
there, copy only across devices, never share storage across devices, and compute what the
interpreter computes. Also: the pass's rules for globals and closures."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.transform.plan_devices import analyze_devices

DEVICES = (tvm.cpu(0), tvm.cpu(1))
UNARY = (relay.exp, relay.negative, relay.tanh, relay.sigmoid)
BINARY = (relay.add, relay.multiply, relay.subtract)


@st.composite
def programs(draw):
    """(function, device per op) of a random DAG over two inputs, 2-6 ops."""
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3))
    values = [(x, draw(st.integers(0, 1))), (y, draw(st.integers(0, 1)))]
    op_devices = []
    for _ in range(draw(st.integers(2, 6))):
        device = draw(st.integers(0, 1))
        arity = draw(st.integers(1, 2))
        picks = [values[draw(st.integers(0, len(values) - 1))] for _ in range(arity)]
        args = [relay.annotation.on_device(v, DEVICES[d]) for v, d in picks]
        op = draw(st.sampled_from(UNARY if arity == 1 else BINARY))
        values.append((relay.annotation.on_device(op(*args), DEVICES[device]), device))
        op_devices.append(device)
    outputs = [values[-1][0]]
    if draw(st.booleans()):
        outputs.append(values[-2][0])
    body = outputs[0] if len(outputs) == 1 else relay.Tuple(outputs)
    return relay.Function([x, y], body), op_devices


def _entry_devices(graph):
    attrs = graph["attrs"]
    if "device_index" not in attrs:
        return [(1, 0)] * len(attrs["storage_id"][1])
    return list(zip(attrs["device_index"][1], attrs["device_id"][1]))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_placements_keep_kernels_on_one_device_and_match_the_interpreter(program):
    func, op_devices = program
    with tvm.transform.PassContext(opt_level=3):  # CSE runs after the first planning
        lib = relay.build(tvm.IRModule.from_expr(func), {"cpu": "c"})
    graph = json.loads(lib.get_graph_json())
    devices = _entry_devices(graph)
    row = graph["node_row_ptr"]
    for nid, node in enumerate(graph["nodes"]):
        if node["op"] == "null":
            continue
        out = devices[row[nid]]
        ins = {devices[row[src] + index] for src, index, _ in node["inputs"]}
        if node["attrs"]["func_name"] == "__copy":
            assert ins != {out}, "a copy within one device"
        else:
            assert ins <= {out}, f"kernel {node['name']} reads another device's memory"
            assert out in {(1, d) for d in op_devices}
    owner = {}
    for sid, device in zip(graph["attrs"]["storage_id"][1], devices):
        assert owner.setdefault(sid, device) == device
    rng = np.random.default_rng(0)
    xv, yv = rng.random((2, 3), "float32"), rng.random((2, 3), "float32")
    m = graph_executor.GraphModule(lib["default"](*DEVICES))
    m.set_input("x", xv)
    m.set_input("y", yv)
    m.run()
    expected = relay.create_executor("debug", tvm.IRModule.from_expr(func)).evaluate()(xv, yv)
    expected = list(expected.fields) if hasattr(expected, "fields") else [expected]
    for i, value in enumerate(expected):
        np.testing.assert_allclose(m.get_output(i).numpy(), value.numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_a_global_function_takes_its_devices_from_its_call_site():
    a = relay.var("a", shape=(3,))
    mod = tvm.IRModule()
    helper = relay.GlobalVar("helper")
    mod[helper] = relay.Function([a], relay.exp(a))
    x = relay.var("x", shape=(3,))
    call = relay.annotation.on_device(helper(x), tvm.cpu(1))
    mod["main"] = relay.Function([x], relay.negative(call))
    planned = relay.transform.PlanDevices(tvm.cpu(0))(mod)
    assert tuple(planned["helper"].attrs["param_virtual_devices"]) == (tvm.cpu(1),)
    assert planned["helper"].attrs["result_virtual_device"] == tvm.cpu(1)
    assert planned["main"].body.args[0].op.name == "device_copy"


def test_a_closure_shares_its_domains_with_its_calls():
    x = relay.var("x", shape=(3,))
    p = relay.var("p", shape=(3,))
    f = relay.var("f")
    closure = relay.Function([p], relay.exp(p))
    body = relay.Let(f, closure, relay.annotation.on_device(f(x), tvm.cpu(1)))
    mod = relay.transform.PlanDevices(tvm.cpu(0))(
        tvm.IRModule.from_expr(relay.Function([x], relay.log(body))))
    devices = analyze_devices(mod, tvm.cpu(0))
    let = mod["main"].body.args[0]
    assert devices.device_of(let.value.body) == tvm.cpu(1)  # the closure's body
    assert devices.device_of(mod["main"].params[0]) == tvm.cpu(1)
    assert devices.device_of(mod["main"].body) == tvm.cpu(0)
