"""Time-evaluator arguments a C int cannot hold (or negative durations) raise a clear TVMError
at once, on every timing entry point: never a ctypes error, never an endless loop."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.runtime.error import TVMError
from kiln.runtime.profiling import MAX_TIMING_COUNT, check_timing_args


@pytest.fixture(scope="module")
def graph_module():
    a = relay.var("a", shape=(1, 4), dtype="float32")
    lib = relay.build(kiln.IRModule.from_expr(relay.Function([a], relay.add(a, a))),
                      target="llvm")
    return graph_executor.GraphModule(lib["default"](kiln.cpu(0)))


@pytest.mark.parametrize("kwargs, named", [
    (dict(number=2**70), "number"), (dict(number=MAX_TIMING_COUNT + 1), "number"),
    (dict(number=0), "number"), (dict(repeat=2**40), "repeat"), (dict(number=1.5), "number"),
    (dict(min_repeat_ms=-1), "min_repeat_ms"), (dict(min_repeat_ms=float("nan")),
                                                 "min_repeat_ms"),
    (dict(cooldown_interval_ms=-3), "cooldown_interval_ms"),
    (dict(repeats_to_cooldown=0), "repeats_to_cooldown"),
    (dict(cache_flush_bytes=-8), "cache_flush_bytes"),
])
def test_module_time_evaluator_refuses_at_creation(graph_module, kwargs, named):
    with pytest.raises(TVMError, match=f"time evaluator: {named} must be"):
        graph_module.module.time_evaluator("run", kiln.cpu(0), **kwargs)


def test_largest_count_is_accepted_and_small_counts_time(graph_module):
    check_timing_args(number=MAX_TIMING_COUNT, repeat=MAX_TIMING_COUNT)
    result = graph_module.module.time_evaluator("run", kiln.cpu(0), number=3, repeat=2)()
    assert len(result.results) == 2 and all(t >= 0 for t in result.results)


def test_benchmark_with_a_huge_number_is_a_tvm_error_not_a_ctypes_error(graph_module):
    with pytest.raises(TVMError, match="number must be an integer"):
        graph_module.benchmark(kiln.cpu(0), number=2**70, repeat=1)
    with pytest.raises(TVMError, match=r"run_repeated: number must be an integer in \[0, 2\*\*63"):
        graph_module.module.run_repeated(2**64)


def test_rpc_time_evaluator_refuses_before_sending():
    from kiln import rpc

    with pytest.raises(TVMError, match="time evaluator: repeat must be"):
        rpc.LocalSession().time_evaluator("runtime.SystemLib", kiln.cpu(0), repeat=-1)
