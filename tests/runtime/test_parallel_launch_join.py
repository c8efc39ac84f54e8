"""TVMBackendParallelLaunch returns when the work is done, never with a task still running.

The pool lets the caller take over task ids that no worker has claimed yet, so a launch no
longer waits for idle workers to wake up. These tests check what that must not break:

* kernels built through kiln (te + ``kiln.build``, targets llvm and c) give NumPy's answer
  over thousands of back-to-back launches, from two Python threads at once, and with
  ``KILN_NUM_THREADS`` = 1, 2, 4 in fresh processes;
* with hand-written C lambdas (compiled once per module): every task id runs exactly once and
  ``env.num_task`` is the team size, barriers see every task, a nested launch runs inline, no
  task of a launch runs after the launch returned (its cdata lives on the caller's stack), and
  a task that fails on a worker thread is reported to the caller with its message.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.ir.transform import PassContext
from kiln.runtime import cc, config
from kiln.runtime.native import load_runtime_lib

HARNESS_C = r"""
#include <tvm/runtime/c_backend_api.h>
#include <stdint.h>

/* The generated kernels' scheme: every task claims chunks from a shared counter. */
typedef struct { int64_t next; int64_t count; int32_t* out; } Chunks;

static int add_one_in_chunks(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)task_id;
  Chunks* c = (Chunks*)cdata;
  int64_t parts = 4 * (int64_t)penv->num_task;
  int64_t chunk = (c->count + parts - 1) / parts;
  if (chunk < 1) chunk = 1;
  for (;;) {
    int64_t start = __atomic_fetch_add(&c->next, chunk, __ATOMIC_RELAXED);
    if (start >= c->count) return 0;
    int64_t stop = c->count - start < chunk ? c->count : start + chunk;
    for (int64_t i = start; i < stop; ++i) c->out[i] += 1;
  }
}

int launch_add_one(int32_t* out, int64_t n, int launches) {
  for (int r = 0; r < launches; ++r) {
    Chunks c = {0, n, out};
    if (TVMBackendParallelLaunch(add_one_in_chunks, &c, 0) != 0) return -1;
  }
  return 0;
}

/* Each task counts its id and records the team size it was given. */
typedef struct { int32_t* runs; int32_t* team; } TaskIds;

static int count_task_id(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  TaskIds* ids = (TaskIds*)cdata;
  __atomic_fetch_add(&ids->runs[task_id], 1, __ATOMIC_RELAXED);
  __atomic_store_n(ids->team, penv->num_task, __ATOMIC_RELAXED);
  return 0;
}

int launch_count_ids(int32_t* runs, int32_t* team, int num_task) {
  TaskIds ids = {runs, team};
  return TVMBackendParallelLaunch(count_task_id, &ids, num_task);
}

/* Each round: write my slot, barrier, read my neighbour's slot, barrier. */
typedef struct { int32_t* slots; int32_t* stale_reads; int rounds; } Rounds;

static int exchange_through_barrier(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  Rounds* rounds = (Rounds*)cdata;
  int team = penv->num_task;
  for (int r = 1; r <= rounds->rounds; ++r) {
    __atomic_store_n(&rounds->slots[task_id], r, __ATOMIC_RELAXED);
    TVMBackendParallelBarrier(task_id, penv);
    if (__atomic_load_n(&rounds->slots[(task_id + 1) % team], __ATOMIC_RELAXED) != r) {
      __atomic_fetch_add(rounds->stale_reads, 1, __ATOMIC_RELAXED);
    }
    TVMBackendParallelBarrier(task_id, penv);
  }
  return 0;
}

int launch_barrier_rounds(int32_t* slots, int32_t* stale_reads, int num_task, int rounds) {
  Rounds r = {slots, stale_reads, rounds};
  return TVMBackendParallelLaunch(exchange_through_barrier, &r, num_task);
}

/* Task `fail_id` fails with a message; the others succeed. */
static int fail_one_task(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)penv;
  if (task_id != *(int*)cdata) return 0;
  TVMAPISetLastError("task failed on purpose");
  return -1;
}

int launch_failing(int fail_id, int num_task) {
  return TVMBackendParallelLaunch(fail_one_task, &fail_id, num_task);
}

/* A task that launches again: the inner launch records its team size. */
typedef struct { int32_t* out; int64_t n; int32_t* inner_team; } Nested;

static int record_team(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)task_id;
  __atomic_store_n((int32_t*)cdata, penv->num_task, __ATOMIC_RELAXED);
  return 0;
}

static int launch_inside_task(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  Nested* nested = (Nested*)cdata;
  if (TVMBackendParallelLaunch(record_team, nested->inner_team, 0) != 0) return -1;
  int64_t per_task = (nested->n + penv->num_task - 1) / penv->num_task;
  for (int64_t i = task_id * per_task; i < nested->n && i < (task_id + 1) * per_task; ++i) {
    nested->out[i] += 1;
  }
  return 0;
}

int launch_nested(int32_t* out, int64_t n, int32_t* inner_team) {
  Nested nested = {out, n, inner_team};
  return TVMBackendParallelLaunch(launch_inside_task, &nested, 0);
}

/* Tasks check that their launch is still the one in flight (a task run after its launch
   returned would see another id or -1). */
static volatile int64_t live_launch = -1;
typedef struct { int64_t id; int32_t* late_tasks; } Live;

static int check_still_live(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  (void)task_id, (void)penv;
  Live* live = (Live*)cdata;
  if (__atomic_load_n(&live_launch, __ATOMIC_ACQUIRE) != live->id) {
    __atomic_fetch_add(live->late_tasks, 1, __ATOMIC_RELAXED);
  }
  return 0;
}

int launch_checking_lifetime(int launches, int32_t* late_tasks) {
  for (int64_t id = 0; id < launches; ++id) {
    Live live = {id, late_tasks};
    __atomic_store_n(&live_launch, id, __ATOMIC_RELEASE);
    if (TVMBackendParallelLaunch(check_still_live, &live, 0) != 0) return -1;
    __atomic_store_n(&live_launch, -1, __ATOMIC_RELEASE);
  }
  return 0;
}
"""

I32P = ctypes.POINTER(ctypes.c_int32)
SIGNATURES = {
    "launch_add_one": [I32P, ctypes.c_int64, ctypes.c_int],
    "launch_count_ids": [I32P, I32P, ctypes.c_int],
    "launch_barrier_rounds": [I32P, I32P, ctypes.c_int, ctypes.c_int],
    "launch_failing": [ctypes.c_int, ctypes.c_int],
    "launch_nested": [I32P, ctypes.c_int64, I32P],
    "launch_checking_lifetime": [ctypes.c_int, I32P],
}


@pytest.fixture(scope="module")
def harness() -> ctypes.CDLL:
    """The C lambdas above, linked against the loaded runtime library."""
    runtime = load_runtime_lib()
    runtime.TVMGetLastError.restype = ctypes.c_char_p
    lib = ctypes.CDLL(str(cc.cached_shared_library({"harness.c": HARNESS_C},
                                                   ["-O2", "-fPIC"])))
    for name, argtypes in SIGNATURES.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    lib.runtime = runtime
    return lib


@pytest.fixture(params=[1, 2, 4])
def threads(request):
    """The runtime's thread count set to 1, 2 or 4 for one test, restored afterwards."""
    lib = load_runtime_lib()
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(request.param))
    yield request.param
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(config.num_threads()))


def _ptr(array: np.ndarray):
    return array.ctypes.data_as(I32P)


def build_affine(target: str):
    """out[i] = x[i] * 3 - 1 over a symbolic n, its loop parallel however small n is."""
    n = te.var("n")
    x = te.placeholder((n,), name="x")
    out = te.compute((n,), lambda i: x[i] * 3.0 - 1.0, name="out")
    s = te.create_schedule(out.op)
    s[out].parallel(out.op.axis[0])
    with PassContext(config={"tir.parallel_min_work": 1}):
        return kiln.build(s, [x, out], target=target, name="affine")["affine"]


@pytest.fixture(scope="module", params=["llvm", "c"])
def affine(request):
    """:func:`build_affine` for one target, built once per module."""
    return build_affine(request.param)


@pytest.mark.parametrize("n", [1, 5, 37])
def test_thousands_of_tiny_launches_match_numpy(affine, threads, n):
    launches = 2000 if n == 37 else 300
    xs = np.random.default_rng(n).standard_normal((launches, n)).astype("float32")
    results = np.empty_like(xs)
    out = kiln.nd.empty((n,), "float32")
    for row, x in enumerate(xs):
        affine(kiln.nd.array(x), out)
        results[row] = out.numpy()
    np.testing.assert_allclose(results, xs * 3 - 1, rtol=1e-6, atol=1e-6)


def test_two_python_threads_launch_at_once(affine, threads):
    failures: list[str] = []

    def hammer(seed: int) -> None:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(61).astype("float32")
        x_nd, out = kiln.nd.array(x), kiln.nd.empty((61,), "float32")
        for _ in range(1000):
            affine(x_nd, out)
            if not np.allclose(out.numpy(), x * 3 - 1, rtol=1e-6, atol=1e-6):
                failures.append(f"thread {seed}: wrong result")
                return

    workers = [threading.Thread(target=hammer, args=(seed,)) for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert failures == []


NUM_THREADS_SCRIPT = textwrap.dedent("""
    import numpy as np, kiln
    from kiln.runtime.native import load_runtime_lib
    from test_parallel_launch_join import build_affine
    lib = load_runtime_lib()
    x = np.linspace(-2, 2, 301, dtype="float32")
    for target in ("llvm", "c"):
        affine, out = build_affine(target), kiln.nd.empty((301,), "float32")
        for _ in range(500):
            affine(kiln.nd.array(x), out)
        np.testing.assert_allclose(out.numpy(), x * 3 - 1, rtol=1e-6, atol=1e-6)
    print("threads", lib.KilnRuntimeNumThreads())
""")


@pytest.mark.parametrize("count", [1, 2, 4])
def test_kiln_num_threads_in_a_fresh_process(count):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, KILN_NUM_THREADS=str(count), PYTHONPATH=here)
    proc = subprocess.run([sys.executable, "-c", NUM_THREADS_SCRIPT], env=env, cwd=here,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["threads", str(count)]


# ---- the launch contract, with hand-written lambdas --------------------------------------


def test_chunked_lambda_covers_every_element_every_launch(harness, threads):
    out = np.zeros(97, np.int32)
    assert harness.launch_add_one(_ptr(out), 97, 5000) == 0
    np.testing.assert_array_equal(out, np.full(97, 5000))


@pytest.mark.parametrize("num_task", [0, 1, 2, 3, 8])
def test_every_task_id_runs_once_and_sees_the_team_size(harness, threads, num_task):
    team_expected = num_task or threads
    for _ in range(200):
        runs, team = np.zeros(16, np.int32), np.zeros(1, np.int32)
        assert harness.launch_count_ids(_ptr(runs), _ptr(team), num_task) == 0
        assert team[0] == team_expected
        np.testing.assert_array_equal(runs, np.arange(16) < team_expected)


@pytest.mark.parametrize("num_task", [0, 5])
def test_barrier_waits_for_every_task(harness, threads, num_task):
    for _ in range(40):
        slots, stale = np.zeros(8, np.int32), np.zeros(1, np.int32)
        assert harness.launch_barrier_rounds(_ptr(slots), _ptr(stale), num_task, 6) == 0
        assert stale[0] == 0
        team = num_task or threads
        np.testing.assert_array_equal(slots[:team], np.full(team, 6))


def test_no_task_runs_after_its_launch_returned(harness, threads):
    late = np.zeros(1, np.int32)
    assert harness.launch_checking_lifetime(20000, _ptr(late)) == 0
    assert late[0] == 0


def test_nested_launch_runs_inline(harness, threads):
    out, inner_team = np.zeros(50, np.int32), np.zeros(1, np.int32)
    for _ in range(300):
        assert harness.launch_nested(_ptr(out), 50, _ptr(inner_team)) == 0
    np.testing.assert_array_equal(out, np.full(50, 300))
    assert inner_team[0] == 1


@pytest.mark.parametrize("fail_id", [0, 1, 2])
def test_failing_task_is_reported_with_its_message(harness, fail_id):
    harness.runtime.TVMAPISetLastError(b"")
    for _ in range(200):
        assert harness.launch_failing(fail_id, 3) == -1
        assert harness.runtime.TVMGetLastError() == b"task failed on purpose"
        harness.runtime.TVMAPISetLastError(b"")
    # a task id that does not exist never fails: the launch succeeds
    assert harness.launch_failing(7, 3) == 0


def test_concurrent_launchers_each_get_every_task_id(harness, threads):
    """A second thread launching while the pool is busy runs its lambda as a team of one."""
    failures: list[str] = []

    def launch_many() -> None:
        for _ in range(2000):
            runs, team = np.zeros(8, np.int32), np.zeros(1, np.int32)
            if harness.launch_count_ids(_ptr(runs), _ptr(team), 0) != 0:
                failures.append("launch failed")
                return
            if team[0] not in (1, threads) or not np.array_equal(runs, np.arange(8) < team[0]):
                failures.append(f"team {team[0]}, runs {runs.tolist()}")
                return
        out = np.zeros(113, np.int32)
        if harness.launch_add_one(_ptr(out), 113, 2000) != 0 or (out != 2000).any():
            failures.append("chunked launches lost or repeated work")

    launchers = [threading.Thread(target=launch_many) for _ in range(2)]
    for launcher in launchers:
        launcher.start()
    for launcher in launchers:
        launcher.join()
    assert failures == []


def test_forked_child_starts_its_own_workers(harness):
    """The parent's workers do not exist in a forked child: it starts its own (a barrier
    needs every task on its own thread)."""
    lib = load_runtime_lib()
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(3))
    try:
        runs, team = np.zeros(8, np.int32), np.zeros(1, np.int32)
        assert harness.launch_count_ids(_ptr(runs), _ptr(team), 0) == 0  # workers started
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 only if every launch ran every task once
            signal.alarm(10)  # a barrier waiting for a worker that does not exist: killed
            status = 0
            for _ in range(100):
                runs[:] = 0
                ok = harness.launch_count_ids(_ptr(runs), _ptr(team), 0) == 0
                if not ok or team[0] != 3 or not np.array_equal(runs, np.arange(8) < 3):
                    status = 1
                slots, stale = np.zeros(8, np.int32), np.zeros(1, np.int32)
                if harness.launch_barrier_rounds(_ptr(slots), _ptr(stale), 0, 3) or stale[0]:
                    status = 2
            os._exit(status)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        lib.KilnRuntimeSetNumThreads(ctypes.c_int(config.num_threads()))
