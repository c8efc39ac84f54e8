"""The whole-sequence recurrent kernel with a team member stalled inside a unit (preempted, in
the worst case for a whole time slice): the other task sleeps instead of spinning, the
sequence completes, and its result is bit-identical to a one-task run.

The kernel's C source runs in a small harness with its own ``TVMBackendParallelLaunch``: task
1 runs on a thread of its own and stalls for :data:`STALL_MS` on a page fault in the middle of
its first unit (its block of the packed weight starts on a page mapped without access; the
fault handler sleeps, then grants access); task 0 starts once task 1 is stalled, runs what is
ready and then has to wait for that unit. The harness reports task 0's thread CPU time and its
voluntary context switches (sleeps)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kiln.micro import crt_build
from kiln.runtime import cc
from kiln.topi.nn.rnn import KERNEL_SOURCE

STALL_MS = 400

_HARNESS = r"""
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

enum { STEPS = 3, BATCH = 1, HIDDEN = 64, LANES = 16, GATES = 4 };
static int team = 1;
static char* stall_page;
static volatile sig_atomic_t stalled;

static void on_fault(int sig, siginfo_t* info, void* context) {
  (void)sig, (void)context;
  if ((char*)info->si_addr < stall_page || (char*)info->si_addr >= stall_page + 4096) abort();
  stalled = 1;
  struct timespec pause = {0, STALL_MS * 1000000L};
  nanosleep(&pause, NULL);
  mprotect(stall_page, 4096, PROT_READ | PROT_WRITE); /* the faulting load then succeeds */
}

typedef struct { FTVMParallelLambda f; void* cdata; TVMParallelGroupEnv* env; } Job;
static void* run_task1(void* arg) {
  Job* job = (Job*)arg;
  job->f(1, job->env, job->cdata);
  return NULL;
}

static double task0_cpu_ms;
static long task0_sleeps;

int TVMBackendParallelLaunch(FTVMParallelLambda f, void* cdata, int num_task) {
  (void)num_task;
  TVMParallelGroupEnv env = {NULL, team};
  if (team == 1) return f(0, &env, cdata);
  Job job = {f, cdata, &env};
  pthread_t worker;
  pthread_create(&worker, NULL, run_task1, &job);
  while (!stalled) usleep(100);
  struct timespec t0, t1;
  struct rusage r0, r1;
  getrusage(RUSAGE_THREAD, &r0);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  int rc = f(0, &env, cdata);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  getrusage(RUSAGE_THREAD, &r1);
  pthread_join(worker, NULL);
  task0_cpu_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
  task0_sleeps = r1.ru_nvcsw - r0.ru_nvcsw;
  return rc;
}

static float* run(float* weight) {
  static float xproj[STEPS * BATCH * GATES * HIDDEN], state0[2 * BATCH * HIDDEN];
  unsigned seed = 7; /* the same inputs for every run */
  for (int i = 0; i < STEPS * BATCH * GATES * HIDDEN; ++i)
    xproj[i] = (float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.0f - 0.5f;
  for (int i = 0; i < 2 * BATCH * HIDDEN; ++i) state0[i] = 0.01f * (float)(i % 17) - 0.08f;
  int32_t lens[1] = {STEPS};
  float* out = calloc(STEPS * BATCH * HIDDEN + 2 * BATCH * HIDDEN, sizeof(float));
  int rc = kiln_rnn_sequence(1, 0, 0, 0, 0, 0.0f, STEPS, BATCH, HIDDEN, LANES, 1, xproj,
                             state0, weight, weight, lens, 0, out,
                             out + STEPS * BATCH * HIDDEN);
  if (rc != 0) abort();
  return out;
}

int main(void) {
  const size_t count = (size_t)HIDDEN * HIDDEN * GATES, bytes = count * sizeof(float);
  float* weight = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (size_t i = 0; i < count; ++i) weight[i] = 0.002f * (float)(i % 101) - 0.1f;
  float* alone = run(weight);

  /* task 1 owns hidden blocks 2 and 3; block 2's weight starts on a page boundary */
  stall_page = (char*)(weight + 2 * (HIDDEN * GATES * LANES));
  struct sigaction action = {0};
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, NULL);
  mprotect(stall_page, 4096, PROT_NONE);
  team = 2;
  float* shared = run(weight);
  size_t n = STEPS * BATCH * HIDDEN + 2 * BATCH * HIDDEN;
  printf("identical %d stalled %d cpu_ms %.3f sleeps %ld\n",
         memcmp(alone, shared, n * sizeof(float)) == 0, (int)stalled, task0_cpu_ms,
         task0_sleeps);
  return 0;
}
"""


def test_a_task_waiting_on_a_stalled_unit_sleeps_and_the_result_is_exact(tmp_path):
    source = tmp_path / "harness.c"
    source.write_text("#define _GNU_SOURCE\n#include <tvm/runtime/c_backend_api.h>\n"
                      + KERNEL_SOURCE
                      + f"#define STALL_MS {STALL_MS}\n" + _HARNESS)
    exe = tmp_path / "harness"
    cc.run_compiler([cc.find_compiler(), "-O2", "-std=gnu11", *map("-I{}".format,
                     cc.include_dirs()), str(source), "-o", str(exe), "-lm", "-lpthread"],
                    "harness")
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True)
    fields = proc.stdout.split()
    report = dict(zip(fields[::2], map(float, fields[1::2])))
    assert report["identical"] == 1 and report["stalled"] == 1, proc.stdout
    # Spinning through the stall cost task 0 its whole length in CPU time (or as much of it
    # as the scheduler gave it) and no sleep; waiting costs a few polls and at least one sleep.
    assert report["sleeps"] >= 1, proc.stdout
    assert report["cpu_ms"] < STALL_MS / 4, proc.stdout


@pytest.mark.parametrize("compiler", ["host", "arm-none-eabi-gcc"])
def test_the_kernel_source_builds_with_the_crt_strict_flags(tmp_path, compiler):
    """The CRT's flags (-std=c99 -Wall -Wextra -Werror), on the host and for a Cortex-M (no
    futex there: a team is never more than one task)."""
    if compiler == "host":
        command = [cc.find_compiler()]
    elif shutil.which(compiler):
        command = [compiler, "-mcpu=cortex-m4", "-mthumb"]
    else:
        pytest.skip(f"{compiler} is not installed")
    source = tmp_path / "kernel.c"
    source.write_text("#include <tvm/runtime/c_backend_api.h>\n" + KERNEL_SOURCE
                      + "void* kiln_use(void) { return (void*)&kiln_rnn_sequence; }\n")
    cc.run_compiler([*command, *crt_build.STRICT_CFLAGS, "-O2", "-c",
                     *map("-I{}".format, cc.include_dirs()), str(source), "-o",
                     str(tmp_path / "kernel.o")], "RNN kernel")
