"""USMP: no two live buffers overlap, whatever the algorithm; pools meet the live-set bound
where it is reachable; the AOT build reports both."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln as tvm
from kiln import relay
from kiln.relay.backend import Executor, Runtime
from kiln.relay.backend.aot.usmp import ALGORITHMS, BufferInfo, plan_pool


@st.composite
def _buffers(draw):
    count = draw(st.integers(1, 14))
    out = []
    for i in range(count):
        first = draw(st.integers(0, 12))
        out.append(BufferInfo(f"b{i}", draw(st.integers(1, 3000)), first,
                              first + draw(st.integers(0, 6))))
    return out


def _brute_force_live_peak(buffers):
    return max(sum(b.size for b in buffers if b.first <= t <= b.last)
               for t in range(-1, 20))


@settings(max_examples=60, deadline=None)
@given(buffers=_buffers(), algorithm=st.sampled_from(sorted(ALGORITHMS)),
       alignment=st.sampled_from([1, 4, 16, 64]))
def test_no_two_live_buffers_overlap(buffers, algorithm, alignment):
    plan = plan_pool(buffers, algorithm, alignment)
    for i, a in enumerate(buffers):
        lo_a = plan.offsets[a.name]
        assert lo_a % alignment == 0
        assert lo_a + a.size <= plan.size
        for b in buffers[i + 1:]:
            lo_b = plan.offsets[b.name]
            live_together = a.first <= b.last and b.first <= a.last
            disjoint = lo_a + a.size <= lo_b or lo_b + b.size <= lo_a
            assert disjoint or not live_together, (a, b, lo_a, lo_b)
    assert plan.lower_bound == _brute_force_live_peak(buffers)
    assert plan.lower_bound <= plan.size <= sum(-(-b.size // alignment) * alignment
                                                for b in buffers)


def test_hill_climb_never_worse_than_the_greedy_orders():
    rng = np.random.default_rng(3)
    for _ in range(5):
        buffers = [BufferInfo(f"b{i}", int(rng.integers(1, 500)), int(f), int(f) + int(d))
                   for i, (f, d) in enumerate(zip(rng.integers(0, 8, 12),
                                                  rng.integers(0, 4, 12)))]
        greedy = min(plan_pool(buffers, name).size for name in ("greedy_by_size",
                                                                "greedy_by_conflicts"))
        assert plan_pool(buffers, "hill_climb").size <= greedy


def test_a_chain_reuses_the_pool():
    # a -> b -> c -> d: only neighbours live together, so two slots suffice
    chain = [BufferInfo(n, 256, i, i + 1) for i, n in enumerate("abcd")]
    plan = plan_pool(chain)
    assert plan.size == plan.lower_bound == 512
    assert plan.offsets["a"] == plan.offsets["c"]


def test_bad_plans_are_refused():
    with pytest.raises(tvm.TVMError, match="unknown tir.usmp.algorithm 'best_fit'"):
        plan_pool([BufferInfo("a", 4, 0, 0)], "best_fit")
    with pytest.raises(tvm.TVMError, match="power of two, got 12"):
        plan_pool([BufferInfo("a", 4, 0, 0)], alignment=12)


def _softmax_chain(n=4, size=64):
    x = relay.var("x", shape=(1, size))
    y = x
    for _ in range(n):
        y = relay.nn.softmax(y)
    return tvm.IRModule.from_expr(relay.Function([x], y))


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_aot_build_reports_pool_and_lower_bound(algorithm):
    config = {"tir.usmp.algorithm": algorithm}
    with tvm.transform.PassContext(opt_level=3, config=config):
        lib = relay.build(_softmax_chain(), "c", runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c",
                                                    "unpacked-api": True}))
    # three intermediates of 256 bytes in a chain: two live at a time
    assert lib.stats["workspace_lower_bound_bytes"] == 512
    assert lib.stats["workspace_pool_bytes"] == 512
    assert lib.stats["usmp_algorithm"] == algorithm
    assert "static uint8_t global_workspace[512];" in lib.lib.get_source()


def test_workspace_alignment_option_spaces_the_buffers():
    x = relay.var("x", shape=(1, 3))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.softmax(relay.nn.softmax(
        relay.nn.softmax(x)))))
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, "c", runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c", "unpacked-api": True,
                                                    "workspace-byte-alignment": 64}))
    offsets = sorted(lib.plan.workspace.offsets.values())
    assert offsets == [0, 64] and "aligned(64)" in lib.lib.get_source()


def test_kernel_scratch_lives_in_the_pool_not_on_the_stack():
    import re

    # An int16 convolution takes the generic schedule, which materializes its int32 result
    # (8x10x10 values) before the relu: scratch past the stack limit. (Cortex-M float32 and
    # int8 convolutions take the direct schedule, which keeps a block of partial sums.)
    x = relay.var("x", shape=(1, 4, 10, 10), dtype="int16")
    w = relay.const(np.ones((8, 4, 3, 3), "int16"))
    y = relay.nn.relu(relay.nn.conv2d(x, w, padding=(1, 1), out_dtype="int32"))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.softmax(
        relay.nn.batch_flatten(relay.cast(y, "float32")))))
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        lib = relay.build(mod, "c -keys=arm_cpu -mcpu=cortex-m4", runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c",
                                                    "unpacked-api": True}))
    kernels = lib.lib.imports[0].get_source()
    arrays = [int(n) * 4 for n in re.findall(r"\b(?:float|int32_t) \w+\[(\d+)\]", kernels)]
    assert all(size <= 256 for size in arrays), arrays  # nothing big on the stack
    scratch = [b for b in lib.plan.buffers if b.name.startswith("scratch_")]
    assert scratch and all(b.first == b.last for b in scratch)
    assert "_unpacked_ws(" in lib.lib.get_source()
    assert lib.stats["workspace_pool_bytes"] >= max(b.size for b in scratch)


@settings(max_examples=40, deadline=None)
@given(buffers=_buffers(), algorithm=st.sampled_from(sorted(ALGORITHMS)),
       limit=st.integers(0, 6000))
def test_pools_with_size_limits_hold_their_buffers_apart(buffers, algorithm, limit):
    plan = plan_pool(buffers, algorithm, 16, limits=[limit, None])
    assert plan.sizes[0] <= limit and plan.size == sum(plan.sizes)
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if plan.pool_of[a.name] != plan.pool_of[b.name]:
                continue
            lo_a, lo_b = plan.offsets[a.name], plan.offsets[b.name]
            live_together = a.first <= b.last and b.first <= a.last
            assert not live_together or lo_a + a.size <= lo_b or lo_b + b.size <= lo_a


@pytest.mark.parametrize("name", ["cnn", "kws_dscnn", "mlp"])
def test_micro_models_pool_within_5_percent_of_the_live_set(name):
    from kiln.relay.testing import micro_models

    mod, params = micro_models.to_relay(micro_models.MODELS[name]())
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        lib = relay.build(mod, "c -keys=arm_cpu -mcpu=cortex-m4", params=params,
                          runtime=Runtime("crt"),
                          executor=Executor("aot", {"interface-api": "c",
                                                    "unpacked-api": True}))
    bound = lib.stats["workspace_lower_bound_bytes"]
    assert bound <= lib.stats["workspace_pool_bytes"] <= 1.05 * bound
