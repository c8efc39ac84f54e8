"""kiln.relay.testing.executors: the cross-executor differential helper itself."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.testing.executors import ExecutorConfig, all_configs, check_executors_agree
from kiln.runtime.error import TVMError


def tuple_program() -> kiln.IRModule:
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(3,))
    return kiln.IRModule.from_expr(relay.Function([x, y], relay.Tuple([
        relay.exp(x) + y, relay.Tuple([relay.sum(x, axis=1), relay.negative(y)])])))


def test_all_configs_is_the_16_combinations():
    configs = all_configs()
    assert len(set(configs)) == 16
    assert {c.executor for c in configs} == {"graph", "vm"}
    assert {c.opt_level for c in configs} == {0, 1, 2, 3}
    assert {c.binding for c in configs} == {"inputs", "constants"}


def test_nested_tuple_results_flatten_in_order_and_match_numpy():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 3)).astype("float32"), rng.standard_normal(3).astype(
        "float32")
    configs = [ExecutorConfig("graph", 1, "inputs"), ExecutorConfig("vm", 2, "constants")]
    outs = check_executors_agree(tuple_program(), [x, y], configs=configs, bind=["y"])
    for got, want in zip(outs, [np.exp(x) + y, x.sum(1), -y]):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(outs) == 3


def test_bad_requests_raise_clear_errors():
    mod = tuple_program()
    x, y = np.zeros((2, 3), "float32"), np.zeros(3, "float32")
    with pytest.raises(TVMError, match="takes 2 parameters"):
        check_executors_agree(mod, [x])
    with pytest.raises(TVMError, match="unknown configuration"):
        check_executors_agree(mod, [x, y], configs=[ExecutorConfig("aot", 0, "inputs")])
    a, b = relay.var("a", shape=(2,)), relay.var("a", shape=(2,))
    twins = kiln.IRModule.from_expr(relay.Function([a, b], a + b))
    with pytest.raises(TVMError, match="distinct names"):
        check_executors_agree(twins, [np.zeros(2, "float32")] * 2)
