"""The x86 schedules run a loop in parallel only when the kernel's work reaches
``tir.parallel_min_work``: small kernels stay on the calling thread, results are unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from topi_testlib import run_many

import kiln
from kiln import te, topi
from kiln.ir.transform import PassContext
from kiln.runtime.error import TVMError
from kiln.tir.stmt import For, ForKind
from kiln.tir.stmt_functor import post_order_visit
from kiln.topi.x86 import injective as x86_injective
from kiln.topi.x86 import nn as x86_nn
from kiln.topi.x86 import pool as x86_pool
from kiln.topi.x86 import reduction as x86_reduction
from kiln.topi.x86.parallel import parallel_min_work, static_work, worth_parallel

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def is_parallel(make, shapes, schedule) -> bool:
    """Whether the lowered TIR of ``make`` over placeholders of ``shapes`` has a parallel For."""
    holders = [te.placeholder(s, name=f"in{k}") for k, s in enumerate(shapes)]
    outs = make(*holders)
    outs = list(outs) if isinstance(outs, list | tuple) else [outs]
    mod = kiln.lower(schedule(outs), holders + outs)
    kinds = []
    for func in mod.functions.values():
        post_order_visit(func.body, lambda n: kinds.append(n.kind) if isinstance(n, For) else None)
    return ForKind.PARALLEL in kinds


def test_rule_default_override_and_symbolic():
    assert parallel_min_work() == 16384
    assert not worth_parallel(16383) and worth_parallel(16384)
    assert worth_parallel(None)
    with PassContext(config={"tir.parallel_min_work": 100}):
        assert parallel_min_work() == 100 and worth_parallel(100) and not worth_parallel(99)
    assert parallel_min_work() == 16384
    assert static_work([4, 8]) == 32 and static_work([4, te.var("n")]) is None


def test_config_value_must_be_an_int():
    with pytest.raises(TVMError, match="tir.parallel_min_work"):
        PassContext(config={"tir.parallel_min_work": "lots"})


# (name, compute, small input shapes, large input shapes, schedule, NumPy oracle)
CASES = [
    ("injective", topi.exp, [(4, 256)], [(256, 256)], x86_injective.schedule_injective,
     np.exp),
    ("opaque", topi.exp, [(4, 256)], [(256, 256)], x86_injective.schedule_opaque, np.exp),
    ("reduce", lambda x: topi.sum(x, axis=1), [(8, 64)], [(64, 1024)],
     x86_reduction.schedule_reduce, lambda a: a.sum(axis=1)),
    ("reduce_axis0", lambda x: topi.max(x, axis=0), [(8, 64)], [(512, 128)],
     x86_reduction.schedule_reduce, lambda a: a.max(axis=0)),
    ("softmax", x86_nn.softmax, [(4, 64)], [(512, 128)],
     lambda outs: x86_nn.schedule_softmax(outs, -1),
     lambda a: np.exp(a - a.max(1, keepdims=True)) / np.exp(a - a.max(1, keepdims=True)).sum(
         1, keepdims=True)),
    ("pool", lambda x: x86_pool.pool(x, (3, 3), 1, 1, 1, "max"), [(1, 4, 8, 8)],
     [(1, 16, 32, 32)], lambda outs: x86_pool.schedule_pool(outs, "NCHW"), None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_small_kernels_serial_large_parallel(case):
    _, make, small, large, schedule, _ = case
    assert not is_parallel(make, small, schedule)
    assert is_parallel(make, large, schedule)
    with PassContext(config={"tir.parallel_min_work": 1}):
        assert is_parallel(make, small, schedule)
    with PassContext(config={"tir.parallel_min_work": 1 << 40}):
        assert not is_parallel(make, large, schedule)


def max_pool_3x3_same(a: np.ndarray) -> np.ndarray:
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h, w = a.shape[2:]
    windows = [padded[:, :, i:i + h, j:j + w] for i in range(3) for j in range(3)]
    return np.max(windows, axis=0)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_serial_and_parallel_results_match_numpy(case):
    _, make, small, large, schedule, oracle = case
    oracle = oracle or max_pool_3x3_same
    inputs = [f32(*small[0]), f32(*large[0])]
    results = run_many([(make, [inputs[0]]), (make, [inputs[1]])], "llvm", schedule)
    for got, data in zip(results, inputs, strict=True):
        np.testing.assert_allclose(got[0], oracle(data), rtol=1e-5, atol=1e-5)


def test_relay_build_applies_the_pass_context_threshold():
    from kiln import relay

    x = relay.var("x", shape=(4, 256))
    func = relay.Function([x], relay.exp(x) + x)
    data = f32(4, 256)
    launches = []
    for config in ({}, {"tir.parallel_min_work": 1}):
        with PassContext(opt_level=3, config=config):
            lib = relay.build(kiln.IRModule.from_expr(func), target="llvm")
        launches.append("TVMBackendParallelLaunch" in lib.get_lib().get_source())
        runner = kiln.contrib.graph_executor.GraphModule(lib["default"](kiln.cpu()))
        runner.set_input("x", data)
        runner.run()
        np.testing.assert_allclose(runner.get_output(0).numpy(), np.exp(data) + data,
                                   rtol=1e-5, atol=1e-6)
    assert launches == [False, True]
