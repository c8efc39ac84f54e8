"""Randomized differential test: relay.build + the graph executor against the interpreter on
random static dataflow programs (elementwise, broadcast, reductions, layout ops, fusion
boundaries)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor

UNARY = [relay.nn.relu, relay.tanh, relay.sigmoid, relay.negative, relay.abs]
BINARY = [relay.add, relay.subtract, relay.multiply, relay.maximum, relay.minimum]


@st.composite
def programs(draw):
    """A random DAG over a (2, 3, 4) input and a (3, 1) input; returns (params, outputs)."""
    x = relay.var("x", shape=(2, 3, 4))
    y = relay.var("y", shape=(3, 1))
    values = [(x, (2, 3, 4)), (y, (3, 1))]
    for _ in range(draw(st.integers(2, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "transpose", "concat"]))
        a, sa = values[draw(st.integers(0, len(values) - 1))]
        if kind == "unary":
            values.append((draw(st.sampled_from(UNARY))(a), sa))
        elif kind == "binary":
            b, sb = values[draw(st.integers(0, len(values) - 1))]
            try:
                shape = np.broadcast_shapes(sa, sb)
            except ValueError:
                continue
            values.append((draw(st.sampled_from(BINARY))(a, b), shape))
        elif kind == "reduce" and len(sa) > 1:
            axis = draw(st.integers(0, len(sa) - 1))
            keep = draw(st.booleans())
            op = draw(st.sampled_from([relay.sum, relay.max, relay.mean]))
            shape = tuple(1 if i == axis else d for i, d in enumerate(sa)) if keep else \
                tuple(d for i, d in enumerate(sa) if i != axis)
            values.append((op(a, axis=axis, keepdims=keep), shape))
        elif kind == "transpose":
            perm = draw(st.permutations(range(len(sa))))
            values.append((relay.transpose(a, perm), tuple(sa[p] for p in perm)))
        elif kind == "concat" and len(sa) >= 1:
            values.append((relay.concatenate([a, a], axis=0), (2 * sa[0], *sa[1:])))
    outputs = [v for v, _ in values[-draw(st.integers(1, 2)):]]
    return [x, y], outputs


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([0, 3]))
def test_graph_executor_matches_interpreter(program, opt_level):
    params, outputs = program
    body = outputs[0] if len(outputs) == 1 else relay.Tuple(outputs)
    mod = tvm.IRModule.from_expr(relay.Function(params, body))
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 3, 4)).astype("float32")
    yv = rng.standard_normal((3, 1)).astype("float32")
    expected = relay.create_executor("debug", mod=mod).evaluate()(xv, yv)
    expected = [expected] if len(outputs) == 1 else list(expected)
    with tvm.transform.PassContext(opt_level=opt_level):
        lib = relay.build(mod, target="c")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=xv, y=yv)
    assert m.get_num_outputs() == len(expected)
    for i, want in enumerate(expected):
        np.testing.assert_allclose(m.get_output(i).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
