"""The parallel-launch pool's controls: thread count (TVM's ``runtime.config_threadpool``),
exact counters, and holding the pool hot across a run of kernels.

A hold keeps idle workers polling between parallel kernels instead of sleeping, but only for a
bounded time: these tests check that the executors release their holds, that workers sleep
once a hold ends and, while it lasts, after the hot-spin cap without work (a hold never burns
a core for good), and that a held worker is still polling after a gap a cold one sleeps in.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.runtime import cc, config, thread_pool
from kiln.runtime.native import load_runtime_lib

HARNESS_C = r"""
#define _DEFAULT_SOURCE
#include <tvm/runtime/c_backend_api.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

int KilnRuntimePoolStats(uint64_t* out, int n, int reset);
int KilnRuntimePoolHold(int hold);

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* Every task takes chunks of a shared counter, as generated kernels do. */
typedef struct { int64_t next; int64_t count; } Chunks;

static int take_chunks(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)task_id, (void)penv;
  Chunks* c = (Chunks*)cdata;
  while (__atomic_fetch_add(&c->next, 1, __ATOMIC_RELAXED) < c->count) {
    double start = now_us();
    while (now_us() - start < 2.0) {
    }
  }
  return 0;
}

/* `launches` launches of 16 chunks of ~2 us, each after `gap_us` of serial work. */
int launch_after_gaps(int launches, double gap_us) {
  for (int r = 0; r < launches; ++r) {
    double start = now_us();
    while (now_us() - start < gap_us) {
    }
    Chunks c = {0, 16};
    if (TVMBackendParallelLaunch(take_chunks, &c, 0) != 0) return -1;
  }
  return 0;
}

/* Task 0 waits (sleeping, up to 1 s) until a worker thread has run task 1. */
typedef struct { pthread_t caller; int worker_ran; } Partner;

static int meet_a_worker(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)penv;
  Partner* p = (Partner*)cdata;
  if (task_id == 1) {
    if (!pthread_equal(pthread_self(), p->caller)) __atomic_store_n(&p->worker_ran, 1, 3);
    return 0;
  }
  struct timespec pause = {0, 10000};
  for (int i = 0; i < 100000 && !__atomic_load_n(&p->worker_ran, 2); ++i) nanosleep(&pause, 0);
  return 0;
}

/* After a worker ran a task: -1 if none did within 1 s, else whether every worker is
   asleep `gap_us` later (1) or one is still polling (0). With `release`, the caller's hold
   ends right after the task (and is taken again before returning). */
int asleep_after_gap(double gap_us, int release) {
  Partner p = {pthread_self(), 0};
  if (TVMBackendParallelLaunch(meet_a_worker, &p, 2) != 0 || !p.worker_ran) return -1;
  if (release) KilnRuntimePoolHold(0);
  double start = now_us();
  while (now_us() - start < gap_us) {
  }
  uint64_t stats[9];
  KilnRuntimePoolStats(stats, 9, 0);
  if (release) KilnRuntimePoolHold(1);
  return stats[7] == stats[8];
}
"""


@pytest.fixture(scope="module")
def harness() -> ctypes.CDLL:
    load_runtime_lib()
    lib = ctypes.CDLL(str(cc.cached_shared_library({"pool_harness.c": HARNESS_C},
                                                   ["-O2", "-fPIC"])))
    lib.launch_after_gaps.argtypes = [ctypes.c_int, ctypes.c_double]
    lib.launch_after_gaps.restype = ctypes.c_int
    lib.asleep_after_gap.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.asleep_after_gap.restype = ctypes.c_int
    return lib


@pytest.fixture
def two_threads():
    """Two threads for one test, the configured count restored afterwards."""
    thread_pool.config_threadpool(0, 2)
    yield
    thread_pool.config_threadpool(0, 0)


def holds_in_force() -> int:
    lib = load_runtime_lib()
    lib.KilnRuntimePoolHold.restype = ctypes.c_int
    count = lib.KilnRuntimePoolHold(1) - 1
    lib.KilnRuntimePoolHold(0)
    return count


def wait_for(predicate, seconds: float = 5.0) -> bool:
    """Poll ``predicate`` until it holds or ``seconds`` pass (workers need the CPU to act)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_config_threadpool_sets_the_team_size(harness):
    set_threads = kiln.get_global_func("runtime.config_threadpool")
    try:
        set_threads(0, 1)
        assert kiln.get_global_func("runtime.NumThreads")() == 1
        assert kiln.runtime.num_threads() == 1
        thread_pool.pool_stats(reset=True)
        assert harness.launch_after_gaps(5, 0.0) == 0
        stats = thread_pool.pool_stats()
        assert (stats["launches"], stats["inline"], stats["worker_tasks"]) == (0, 5, 0)
        set_threads(0, 2)
        thread_pool.pool_stats(reset=True)
        assert harness.launch_after_gaps(5, 0.0) == 0
        stats = thread_pool.pool_stats()
        assert (stats["launches"], stats["inline"]) == (5, 0)
        assert stats["worker_tasks"] <= 5  # a team of two: at most task 1 per launch
    finally:
        set_threads(0, 0)
    assert thread_pool.num_threads() == config.num_threads()


@pytest.mark.parametrize("mode, nthreads, message", [
    (3, 2, "affinity mode must be"),
    (0, "two", "nthreads must be an int"),
])
def test_config_threadpool_rejects_bad_arguments(mode, nthreads, message):
    with pytest.raises(kiln.TVMError, match=message):
        thread_pool.config_threadpool(mode, nthreads)


def test_hot_holds_nest_and_release():
    base = holds_in_force()
    with thread_pool.hot():
        with thread_pool.hot():
            assert holds_in_force() == base + 2
        assert holds_in_force() == base + 1
    assert holds_in_force() == base
    with pytest.raises(RuntimeError), thread_pool.hot():
        raise RuntimeError("the hold is released on the way out")
    assert holds_in_force() == base


def test_executors_release_their_hold(two_threads):
    x = relay.var("x", shape=(64, 600), dtype="float32")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(x) * x))
    data = np.random.default_rng(0).standard_normal((64, 600)).astype("float32")
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
        exe = relay.vm.compile(mod, target="llvm")
    module = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    module.set_input("x", data)
    thread_pool.pool_stats(reset=True)
    module.run()
    assert thread_pool.pool_stats()["launches"] == 1  # 38,400 elements: a parallel loop
    np.testing.assert_allclose(module.get_output(0).numpy(), np.exp(data) * data, rtol=1e-5)
    vm = kiln.runtime.vm.VirtualMachine(exe, kiln.cpu(0))
    np.testing.assert_allclose(vm.run(data).numpy(), np.exp(data) * data, rtol=1e-5)
    assert holds_in_force() == 0


def all_asleep() -> bool:
    stats = thread_pool.pool_stats()
    return stats["workers"] > 0 and stats["workers_asleep"] == stats["workers"]


def test_workers_sleep_after_the_hold_ends(harness, two_threads):
    with thread_pool.hot():
        assert harness.launch_after_gaps(3, 0.0) == 0
    assert wait_for(all_asleep)


def test_a_held_worker_sleeps_after_the_hot_spin_cap(harness, two_threads):
    with thread_pool.hot():
        assert harness.launch_after_gaps(3, 0.0) == 0
        # still held, no more work: the worker gives up polling after 2 ms
        assert wait_for(all_asleep)


def test_a_held_worker_polls_through_a_gap(harness, two_threads):
    # 300 us without work after a worker ran a task: longer than an idle worker's 70 us spin,
    # shorter than the 2 ms cap of a held pool. A worker that other processes keep off the
    # CPU may overrun the cap, so the held case gets several tries.
    with thread_pool.hot():
        results = [harness.asleep_after_gap(300.0, 0) for _ in range(5)]
    assert 0 in results, results
    assert wait_for(all_asleep)  # and cold, it sleeps


def test_a_worker_lingers_after_a_run_for_the_next_one(harness, two_threads):
    # back-to-back inferences: 300 us after a run ends the worker still polls (for 1 ms)
    with thread_pool.hot():
        results = [harness.asleep_after_gap(300.0, 1) for _ in range(5)]
    assert 0 in results, results
    assert wait_for(all_asleep)


def test_with_one_thread_a_held_worker_sleeps(harness, two_threads):
    with thread_pool.hot():
        assert harness.launch_after_gaps(1, 0.0) == 0
        thread_pool.config_threadpool(0, 1)  # its CPU time would count against the caller's
        assert wait_for(all_asleep)
