"""relay.transform.FastMath: exact ops become their fast twins, at opt level 4 or on request."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor


def _model():
    x = relay.var("x", shape=(3, 8), dtype="float32")
    body = relay.nn.softmax(relay.add(relay.tanh(x), relay.erf(relay.exp(x))), axis=-1)
    return kiln.IRModule.from_expr(relay.Function([x], body))


def _ops(mod) -> set[str]:
    names = set()

    def visit(node):
        if isinstance(node, relay.Call) and hasattr(node.op, "name"):
            names.add(node.op.name)

    relay.analysis.post_order_visit(mod["main"], visit)
    return names


def test_rewrites_exp_tanh_erf_softmax_at_opt_level_4():
    with kiln.transform.PassContext(opt_level=4):
        mod = relay.transform.FastMath()(_model())
    assert _ops(mod) == {"fast_exp", "fast_tanh", "fast_erf", "nn.fast_softmax", "add"}


@pytest.mark.parametrize("ctx_args, fast", [({"opt_level": 3}, False),
                                            ({"opt_level": 4}, True),
                                            ({"opt_level": 3, "required_pass": ["FastMath"]},
                                             True)])
def test_pipeline_runs_it_only_when_enabled(ctx_args, fast):
    pipeline = kiln.transform.Sequential([relay.transform.FastMath()])
    with kiln.transform.PassContext(**ctx_args):
        mod = pipeline(_model())
    assert ("fast_tanh" in _ops(mod)) is fast
    assert ("tanh" in _ops(mod)) is not fast


def test_relay_build_at_opt_level_4_matches_numpy():
    data = np.random.default_rng(3).standard_normal((3, 8)).astype("float32")
    with kiln.transform.PassContext(opt_level=4):
        lib = relay.build(_model(), target="c")
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    module.set_input("x", data)
    module.run()
    inner = np.tanh(data) + np.vectorize(math.erf)(np.exp(data))
    want = np.exp(inner - inner.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=1e-5, atol=1e-6)
