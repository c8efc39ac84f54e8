"""Randomized differential test: random static dataflow programs (elementwise, broadcast,
reductions, layout ops, fusion boundaries, several parameters read in any order) on the graph
executor and the VM at opt_level 0-3, parameters as run-time inputs and bound as constants,
each against the Relay interpreter (kiln.relay.testing.executors)."""

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.relay.testing.executors import check_executors_agree

UNARY = [relay.nn.relu, relay.tanh, relay.sigmoid, relay.negative, relay.abs]
BINARY = [relay.add, relay.subtract, relay.multiply, relay.maximum, relay.minimum]
PARAMS = {"x": (2, 3, 4), "y": (3, 1), "z": (4,), "w": (3, 4)}


@st.composite
def programs(draw):
    """A random DAG over the PARAMS inputs; returns (params, outputs)."""
    params = [relay.var(name, shape=shape) for name, shape in PARAMS.items()]
    values = list(zip(params, PARAMS.values()))
    for _ in range(draw(st.integers(2, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "reduce", "transpose",
                                     "concat"]))
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
    return params, outputs


# KILN_DIFFERENTIAL=full (benchmarks/differential_executors.py): a long soak instead
EXAMPLES = 300 if os.environ.get("KILN_DIFFERENTIAL") == "full" else 8


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from([["y", "z", "w"], list(PARAMS)]))
def test_every_executor_matches_the_interpreter(program, bind):
    params, outputs = program
    body = outputs[0] if len(outputs) == 1 else relay.Tuple(outputs)
    mod = tvm.IRModule.from_expr(relay.Function(params, body))
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype("float32") for shape in PARAMS.values()]
    check_executors_agree(mod, args, bind=bind)
