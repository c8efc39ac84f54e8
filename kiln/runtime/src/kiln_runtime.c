/*
 * kiln_runtime.c — the host implementation of the C API that generated kernels link against.
 *
 * Entry points (declared in include/tvm/runtime/c_runtime_api.h and c_backend_api.h):
 *   TVMAPISetLastError / TVMGetLastError   thread-local last error message
 *   TVMBackendAllocWorkspace / FreeWorkspace  64-byte aligned scratch memory
 *   TVMBackendParallelLaunch / ParallelBarrier  a persistent worker pool (spin, then futex)
 *   TVMFuncCall / KilnFuncCreate / TVMFuncFree  calls through function handles
 *   TVMFuncRegisterGlobal / TVMFuncGetGlobal / TVMBackendGetFuncFromEnv  forwarded to Python
 *   TVMBackendRegisterSystemLibSymbol        the system-library symbol table
 * and, for kiln's Python side (kiln/runtime/packed_func.py, module.py, native.py):
 *   KilnRuntimeSetHooks, KilnRuntimeSetNumThreads, KilnRuntimeNumThreads, KilnSystemLibLookup,
 *   KilnRuntimePoolHold (keep the workers polling across a run), KilnRuntimePoolStats.
 *
 * A function handle points at a KilnFunction record (function pointer + resource handle), so
 * TVMFuncCall is a plain C call; a Python function gets a record whose pointer is a ctypes
 * trampoline. The registry lives in Python: the three registry entry points call hooks that
 * kiln.runtime installs when it loads this library.
 */
#define _DEFAULT_SOURCE /* strdup, syscall (futex) */

#include <tvm/runtime/c_backend_api.h>

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

/* ---- last error ------------------------------------------------------------------------ */

static _Thread_local char* kiln_last_error = NULL;

TVM_DLL void TVMAPISetLastError(const char* msg) {
  size_t n = msg ? strlen(msg) : 0;
  char* copy = (char*)malloc(n + 1);
  if (copy == NULL) return;
  if (n) memcpy(copy, msg, n);
  copy[n] = '\0';
  free(kiln_last_error);
  kiln_last_error = copy;
}

TVM_DLL const char* TVMGetLastError(void) { return kiln_last_error ? kiln_last_error : ""; }

/* ---- workspace ------------------------------------------------------------------------- */

enum { kKilnAlignment = 64 };

TVM_DLL void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                                       int dtype_code_hint, int dtype_bits_hint) {
  (void)device_id, (void)dtype_code_hint, (void)dtype_bits_hint;
  if (device_type != kDLCPU) {
    TVMAPISetLastError("TVMBackendAllocWorkspace: only CPU memory (device_type 1) is supported");
    return NULL;
  }
  /* aligned_alloc wants a size that is a multiple of the alignment (and nonzero). */
  uint64_t size = (nbytes + kKilnAlignment - 1) / kKilnAlignment * kKilnAlignment;
  if (size == 0) size = kKilnAlignment;
  void* ptr = aligned_alloc(kKilnAlignment, (size_t)size);
  if (ptr == NULL) {
    char msg[128];
    snprintf(msg, sizeof(msg), "TVMBackendAllocWorkspace: out of memory allocating %llu bytes",
             (unsigned long long)nbytes);
    TVMAPISetLastError(msg);
  }
  return ptr;
}

TVM_DLL int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  (void)device_type, (void)device_id;
  free(ptr);
  return 0;
}

/* ---- parallel launch ------------------------------------------------------------------- */

static int kiln_num_threads = 0; /* 0: not yet decided */

static int kiln_threads_from_env(void) {
  const char* names[] = {"KILN_NUM_THREADS", "TVM_NUM_THREADS"};
  for (int i = 0; i < 2; ++i) {
    const char* value = getenv(names[i]);
    if (value != NULL && atoi(value) > 0) return atoi(value);
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

TVM_DLL void KilnRuntimeSetNumThreads(int n) {
  __atomic_store_n(&kiln_num_threads, n > 0 ? n : 0, __ATOMIC_RELAXED);
}

TVM_DLL int KilnRuntimeNumThreads(void) {
  int n = __atomic_load_n(&kiln_num_threads, __ATOMIC_RELAXED);
  if (n <= 0) {
    n = kiln_threads_from_env();
    __atomic_store_n(&kiln_num_threads, n, __ATOMIC_RELAXED);
  }
  return n;
}

/*
 * One process-wide pool of worker threads, started on the first launch that wants a team and
 * grown when a launch asks for more tasks than there are workers.
 *
 * A launch owns the pool for its duration (a second thread launching at the same time, and a
 * lambda launching from inside a launch, run their lambda inline as a team of one). It
 * publishes flambda / cdata / team size, then one 64-bit claim word: generation (high 32
 * bits), team size (bits 16..31) and the next unclaimed task id (bits 0..15). The caller runs
 * task 0; workers take task ids by compare-and-swap on the claim word. After task 0 returns,
 * the caller claims every task id still unclaimed and runs it itself (the generated lambdas
 * hand out work through their own chunk counter, so such a late task finds nothing left and
 * returns at once; a lambda that splits work by task id still gets every id run exactly once).
 * The caller then waits only for the tasks that workers claimed, counted in `finished`.
 *
 * Lifetime of cdata (it lives on the caller's stack): a worker reads flambda / cdata only
 * after its compare-and-swap took a task id of the current generation, and the caller does
 * not return before every task id taken that way has been counted finished. A worker that
 * wakes after the launch is over sees no unclaimed id (or a later generation) and runs
 * nothing. The generation makes a claim word of an earlier launch never equal a later one.
 *
 * Barriers: a lambda that calls TVMBackendParallelBarrier does so in every task, so task 0
 * passes its last barrier only after every other task has arrived there, that is, after
 * workers claimed them all; the caller therefore never takes over a task of such a launch.
 * The team is at most the number of workers + 1, so every task can have its own thread.
 *
 * Waiting spins briefly and then sleeps on a futex (a condition variable off Linux).
 */

/*
 * Spin budgets, in nanoseconds of polling (the clock is read every ~1 us of pause
 * instructions; a pause is 25-30 ns on Zen 4 and 65-80 ns on Zen 3, so budgets are time, not
 * counts).
 *
 * An idle worker polls kKilnWorkerSpinNs for the next launch, then sleeps on a futex. Waking
 * a sleeping worker costs the launching thread a futex syscall (~8 us on a 2-vCPU KVM guest)
 * and the worker arrives tens of microseconds later, when a small kernel is already done: a
 * launch to a sleeping pool costs more than it gains (benchmarks/parallel_launch.py). So a
 * run of many kernels (the graph executor's loop, a VM invocation) holds the pool hot
 * (KilnRuntimePoolHold): while a hold is in force, and for kKilnLingerNs after the last one
 * ends (so back-to-back inferences find it awake), an idle worker keeps polling through the
 * serial kernels between two parallel ones, for at most kKilnHotSpinNs since it last worked;
 * with one thread configured it never polls past kKilnWorkerSpinNs (its CPU time would count
 * against a single-threaded caller's). It does not sched_yield while polling: under EEVDF a yield
 * gives the core away for a whole slice (milliseconds), and the worker then misses the
 * launches it waits for (measured: 0 of 15 tasks taken at load 5, against 15 of 15).
 *
 * The caller polls kKilnJoinSpinNs for tasks that workers claimed before sleeping, so a
 * worker preempted mid-chunk can get the caller's core; a task at a barrier polls
 * kKilnBarrierSpinNs.
 */
#define kKilnWorkerSpinNs 70000ull
#define kKilnHotSpinNs 2000000ull
#define kKilnLingerNs 1000000ull
#define kKilnJoinSpinNs 20000ull
#define kKilnBarrierSpinNs 70000ull

enum {
  kKilnMaxTeam = 1024,   /* task ids fit the 16-bit field of the claim word */
  kKilnPollBatch = 32,   /* polls (one pause each) between two clock reads */
};

#if defined(__x86_64__) || defined(__i386__)
#define KILN_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define KILN_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define KILN_CPU_RELAX() ((void)0)
#endif

#ifdef __linux__

static void kiln_futex_wait(int* word, int expected) {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void kiln_futex_wake(int* word, int count) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

#else /* one process-wide condition variable stands in for the futex */

static pthread_mutex_t kiln_wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kiln_wait_cond = PTHREAD_COND_INITIALIZER;

static void kiln_futex_wait(int* word, int expected) {
  pthread_mutex_lock(&kiln_wait_lock);
  while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == expected) {
    pthread_cond_wait(&kiln_wait_cond, &kiln_wait_lock);
  }
  pthread_mutex_unlock(&kiln_wait_lock);
}

static void kiln_futex_wake(int* word, int count) {
  (void)word, (void)count;
  pthread_mutex_lock(&kiln_wait_lock);
  pthread_cond_broadcast(&kiln_wait_cond);
  pthread_mutex_unlock(&kiln_wait_lock);
}

#endif

/*
 * What the pool did, counted exactly (KilnRuntimePoolStats): launches that used the pool,
 * launches run inline, tasks run by workers, and the futex sleeps (and wakes) that make a
 * launch slow. Benchmarks read them to tell a cold pool from a slow kernel.
 */
enum {
  kKilnStatLaunches,     /* launches that published tasks to the workers */
  kKilnStatInline,       /* launches run on the calling thread alone */
  kKilnStatWorkerTasks,  /* task ids that workers claimed and ran */
  kKilnStatWorkerSleeps, /* times an idle worker went to sleep on the futex */
  kKilnStatJoinSleeps,   /* times a caller slept waiting for workers to finish */
  kKilnStatBarrierSleeps, /* times a task slept at a barrier */
  kKilnStatWakes,        /* futex wake calls (a sleeper had to be woken) */
  kKilnStatCount
};
static uint64_t kiln_pool_stats[kKilnStatCount];

static void kiln_count(int stat) {
  __atomic_add_fetch(&kiln_pool_stats[stat], 1, __ATOMIC_RELAXED);
}

static uint64_t kiln_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Poll until *word != value, for at most `budget_ns` after `start`. Return 1 when the word
   changed. */
static int kiln_poll_while_equal(int* word, int value, uint64_t start, uint64_t budget_ns) {
  for (;;) {
    for (int i = 0; i < kKilnPollBatch; ++i) {
      if (__atomic_load_n(word, __ATOMIC_ACQUIRE) != value) return 1;
      KILN_CPU_RELAX();
    }
    if (kiln_now_ns() - start >= budget_ns) return 0;
  }
}

/* Sleep until *word != value (sleepers counts the sleepers; `stat` counts the sleeps). */
static void kiln_sleep_while_equal(int* word, int value, int* sleepers, int stat) {
  kiln_count(stat);
  __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) kiln_futex_wait(word, value);
  __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
}

/* Wait until *word != value: poll for `spin_ns`, then sleep. */
static void kiln_wait_while_equal(int* word, int value, uint64_t spin_ns, int* sleepers,
                                  int stat) {
  if (kiln_poll_while_equal(word, value, kiln_now_ns(), spin_ns)) return;
  kiln_sleep_while_equal(word, value, sleepers, stat);
}

/* Publish a change of *word (already stored, seq_cst) to up to `count` sleepers. */
static void kiln_wake_sleepers(int* word, int* sleepers, int count) {
  if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST) > 0) {
    kiln_count(kKilnStatWakes);
    kiln_futex_wake(word, count);
  }
}

typedef struct {
  int arrived; /* tasks at the barrier of the current phase */
  int phase;   /* bumped by the last task to arrive; futex word */
  int sleepers;
} KilnBarrier;

typedef struct {
  /* the current launch: written by its caller before the claim word is published */
  FTVMParallelLambda flambda;
  void* cdata;
  TVMParallelGroupEnv env;
  KilnBarrier barrier;
  uint64_t claim;   /* generation << 32 | team << 16 | next task id */
  int finished;     /* tasks run by workers that have returned; futex word */
  int caller_sleeping; /* 1 while the caller sleeps on `finished` */
  int failed;
  char* worker_error; /* last error message of the first worker task that failed */
  /* waking idle workers */
  int wake_seq;     /* bumped on every publish; futex word */
  int idle_sleepers;
  int holds;        /* runs holding the pool hot (KilnRuntimePoolHold) */
  uint64_t released_ns; /* when the last hold ended */
  /* the pool */
  int busy;         /* a launch owns the pool */
  int workers;      /* worker threads started */
  pthread_mutex_t grow_lock;
} KilnPool;

static KilnPool kiln_pool = {.grow_lock = PTHREAD_MUTEX_INITIALIZER};
static _Thread_local int kiln_inside_launch = 0;

static uint64_t kiln_claim_word(uint64_t generation, int team, int next) {
  return generation << 32 | (uint64_t)team << 16 | (uint64_t)next;
}
static int kiln_claim_team(uint64_t word) { return (int)(word >> 16 & 0xFFFF); }
static int kiln_claim_next(uint64_t word) { return (int)(word & 0xFFFF); }

/* Take the next unclaimed task id of the current launch; -1 when none is left. */
static int kiln_claim_task(KilnPool* pool) {
  uint64_t word = __atomic_load_n(&pool->claim, __ATOMIC_ACQUIRE);
  while (kiln_claim_next(word) < kiln_claim_team(word)) {
    if (__atomic_compare_exchange_n(&pool->claim, &word, word + 1, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE)) {
      return kiln_claim_next(word);
    }
  }
  return -1;
}

static void kiln_worker_run(KilnPool* pool, int task_id) {
  kiln_count(kKilnStatWorkerTasks);
  if (pool->flambda(task_id, &pool->env, pool->cdata) != 0) {
    char* message = strdup(TVMGetLastError());
    char* none = NULL;
    if (message == NULL || !__atomic_compare_exchange_n(&pool->worker_error, &none, message, 0,
                                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      free(message);
    }
    __atomic_store_n(&pool->failed, 1, __ATOMIC_RELAXED);
  }
  __atomic_add_fetch(&pool->finished, 1, __ATOMIC_SEQ_CST);
  kiln_wake_sleepers(&pool->finished, &pool->caller_sleeping, 1);
}

/* Whether idle workers should keep polling at `now`: a run holds the pool, or the last one
   ended less than kKilnLingerNs ago; never with one thread configured. */
static int kiln_pool_hot(KilnPool* pool, uint64_t now) {
  if (KilnRuntimeNumThreads() <= 1) return 0;
  if (__atomic_load_n(&pool->holds, __ATOMIC_RELAXED) > 0) return 1;
  return now - __atomic_load_n(&pool->released_ns, __ATOMIC_RELAXED) < kKilnLingerNs;
}

/* Wait for the next publish after `seen`: poll, keep polling (bounded) while the pool is hot,
   then sleep. */
static void kiln_worker_idle(KilnPool* pool, int seen) {
  uint64_t start = kiln_now_ns();
  if (kiln_poll_while_equal(&pool->wake_seq, seen, start, kKilnWorkerSpinNs)) return;
  for (uint64_t now = kiln_now_ns(); now - start < kKilnHotSpinNs && kiln_pool_hot(pool, now);
       now = kiln_now_ns()) {
    if (kiln_poll_while_equal(&pool->wake_seq, seen, now, 1000)) return; /* ~1 us of polls */
  }
  kiln_sleep_while_equal(&pool->wake_seq, seen, &pool->idle_sleepers, kKilnStatWorkerSleeps);
}

static void* kiln_worker_main(void* arg) {
  KilnPool* pool = (KilnPool*)arg;
  kiln_inside_launch = 1; /* launches from a worker's task run inline */
  for (;;) {
    /* A task claimable after the claims below fail was published later, so it bumped
       wake_seq past `seen`: waiting for that change cannot miss it. */
    int seen = __atomic_load_n(&pool->wake_seq, __ATOMIC_SEQ_CST);
    int task_id;
    while ((task_id = kiln_claim_task(pool)) >= 0) kiln_worker_run(pool, task_id);
    kiln_worker_idle(pool, seen);
  }
  return NULL;
}

/* A forked child has none of the parent's workers and no launch in flight. */
static void kiln_pool_after_fork(void) {
  KilnPool* pool = &kiln_pool;
  uint64_t generation = (pool->claim >> 32) + 1;
  pool->claim = kiln_claim_word(generation, 0, 0);
  pool->workers = 0;
  pool->busy = 0;
  pool->idle_sleepers = 0;
  pool->holds = 0; /* the threads that held it are not in the child */
  pool->released_ns = 0;
  pthread_mutex_init(&pool->grow_lock, NULL);
}

static void kiln_register_fork_handler(void) {
  pthread_atfork(NULL, NULL, kiln_pool_after_fork);
}

/* Start workers until there are `wanted` (or thread creation fails); return how many. */
static int kiln_pool_grow(KilnPool* pool, int wanted) {
  int have = __atomic_load_n(&pool->workers, __ATOMIC_ACQUIRE);
  if (have >= wanted) return have;
  static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
  pthread_once(&fork_handler_once, kiln_register_fork_handler);
  pthread_mutex_lock(&pool->grow_lock);
  /* workers start with every signal blocked, so signals keep going to the caller's threads */
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  have = pool->workers;
  pthread_t thread;
  while (have < wanted && pthread_create(&thread, &attr, kiln_worker_main, pool) == 0) ++have;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &previous, NULL);
  __atomic_store_n(&pool->workers, have, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&pool->grow_lock);
  return have;
}

static int kiln_run_inline(FTVMParallelLambda flambda, void* cdata) {
  kiln_count(kKilnStatInline);
  TVMParallelGroupEnv env = {NULL, 1};
  int was_inside = kiln_inside_launch;
  kiln_inside_launch = 1;
  int rc = flambda(0, &env, cdata);
  kiln_inside_launch = was_inside;
  return rc != 0 ? -1 : 0;
}

TVM_DLL int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  KilnPool* pool = &kiln_pool;
  int team = num_task > 0 ? num_task : KilnRuntimeNumThreads();
  if (team > kKilnMaxTeam) team = kKilnMaxTeam;
  int idle = 0;
  if (team <= 1 || kiln_inside_launch ||
      !__atomic_compare_exchange_n(&pool->busy, &idle, 1, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED)) {
    return kiln_run_inline(flambda, cdata);
  }
  int workers = kiln_pool_grow(pool, team - 1);
  if (team > workers + 1) team = workers + 1; /* tasks split by env.num_task */
  if (team <= 1) {
    __atomic_store_n(&pool->busy, 0, __ATOMIC_RELEASE);
    return kiln_run_inline(flambda, cdata);
  }
  kiln_count(kKilnStatLaunches);
  /* Nothing of the previous launch is in flight: its caller waited for every claimed task. */
  pool->flambda = flambda;
  pool->cdata = cdata;
  pool->env.sync_handle = &pool->barrier;
  pool->env.num_task = team;
  pool->barrier.arrived = 0;
  pool->finished = 0;
  pool->failed = 0;
  pool->worker_error = NULL;
  uint64_t generation = (__atomic_load_n(&pool->claim, __ATOMIC_RELAXED) >> 32) + 1;
  __atomic_store_n(&pool->claim, kiln_claim_word(generation, team, 1), __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&pool->wake_seq, 1, __ATOMIC_SEQ_CST);
  kiln_wake_sleepers(&pool->wake_seq, &pool->idle_sleepers, team - 1);

  kiln_inside_launch = 1;
  int caller_failed = flambda(0, &pool->env, cdata) != 0;
  int by_caller = 1, task_id;
  while ((task_id = kiln_claim_task(pool)) >= 0) {
    caller_failed |= flambda(task_id, &pool->env, cdata) != 0;
    ++by_caller;
  }
  kiln_inside_launch = 0;

  /* only the tasks that workers claimed are waited for; they are running or finished */
  int by_workers = team - by_caller, done;
  while ((done = __atomic_load_n(&pool->finished, __ATOMIC_SEQ_CST)) != by_workers) {
    kiln_wait_while_equal(&pool->finished, done, kKilnJoinSpinNs, &pool->caller_sleeping,
                          kKilnStatJoinSleeps);
  }

  int failed = caller_failed || __atomic_load_n(&pool->failed, __ATOMIC_RELAXED);
  char* worker_error = pool->worker_error;
  if (!caller_failed && worker_error != NULL) TVMAPISetLastError(worker_error);
  free(worker_error);
  pool->worker_error = NULL;
  __atomic_store_n(&pool->busy, 0, __ATOMIC_RELEASE);
  return failed ? -1 : 0;
}

/* Copy up to `n` counters (in the enum's order) to `out`, zero them when `reset`, and after
   them two gauges: the workers asleep now and the workers started. Return how many values
   there are. */
TVM_DLL int KilnRuntimePoolStats(uint64_t* out, int n, int reset) {
  for (int i = 0; i < kKilnStatCount && i < n; ++i) {
    out[i] = reset ? __atomic_exchange_n(&kiln_pool_stats[i], 0, __ATOMIC_RELAXED)
                   : __atomic_load_n(&kiln_pool_stats[i], __ATOMIC_RELAXED);
  }
  if (n > kKilnStatCount) {
    out[kKilnStatCount] = (uint64_t)__atomic_load_n(&kiln_pool.idle_sleepers, __ATOMIC_SEQ_CST);
  }
  if (n > kKilnStatCount + 1) {
    out[kKilnStatCount + 1] = (uint64_t)__atomic_load_n(&kiln_pool.workers, __ATOMIC_ACQUIRE);
  }
  return kKilnStatCount + 2;
}

/*
 * Hold the pool hot (`hold` nonzero) or release one hold (zero): while any hold is in force,
 * idle workers poll for launches between kernels instead of sleeping, and for a moment after
 * the last hold ends (bounded, see the spin budgets above). The graph executor's loop holds
 * it for a run; holds nest and may come from several threads. Returns the number of holds
 * now in force.
 */
TVM_DLL int KilnRuntimePoolHold(int hold) {
  int holds = __atomic_add_fetch(&kiln_pool.holds, hold ? 1 : -1, __ATOMIC_RELEASE);
  if (holds == 0) __atomic_store_n(&kiln_pool.released_ns, kiln_now_ns(), __ATOMIC_RELAXED);
  return holds;
}

TVM_DLL int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  if (penv->num_task <= 1) return 0;
  KilnBarrier* barrier = (KilnBarrier*)penv->sync_handle;
  int phase = __atomic_load_n(&barrier->phase, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&barrier->arrived, 1, __ATOMIC_ACQ_REL) == penv->num_task) {
    __atomic_store_n(&barrier->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&barrier->phase, 1, __ATOMIC_SEQ_CST);
    kiln_wake_sleepers(&barrier->phase, &barrier->sleepers, INT32_MAX);
  } else {
    kiln_wait_while_equal(&barrier->phase, phase, kKilnBarrierSpinNs, &barrier->sleepers,
                          kKilnStatBarrierSleeps);
  }
  return 0;
}

TVM_DLL int TVMBackendRunOnce(void** handle, int (*f)(void*), void* cdata, int nbytes) {
  (void)nbytes;
  if (*handle == NULL) {
    *handle = (void*)1;
    return f(cdata);
  }
  return 0;
}

/* ---- function handles ------------------------------------------------------------------ */

/* What a TVMFunctionHandle points at. Mirrored by KilnFunction in packed_func.py. */
typedef struct {
  TVMBackendPackedCFunc func;
  void* resource_handle;
  void (*finalizer)(void*);
} KilnFunction;

TVM_DLL int KilnFuncCreate(TVMBackendPackedCFunc func, void* resource_handle,
                           void (*finalizer)(void*), TVMFunctionHandle* out) {
  KilnFunction* record = (KilnFunction*)malloc(sizeof(KilnFunction));
  if (record == NULL) {
    TVMAPISetLastError("KilnFuncCreate: out of memory");
    return -1;
  }
  record->func = func;
  record->resource_handle = resource_handle;
  record->finalizer = finalizer;
  *out = record;
  return 0;
}

TVM_DLL int TVMFuncFree(TVMFunctionHandle func) {
  KilnFunction* record = (KilnFunction*)func;
  if (record == NULL) return 0;
  if (record->finalizer) record->finalizer(record->resource_handle);
  free(record);
  return 0;
}

TVM_DLL int TVMFuncCall(TVMFunctionHandle func, TVMValue* arg_values, int* type_codes,
                        int num_args, TVMValue* ret_val, int* ret_type_code) {
  KilnFunction* record = (KilnFunction*)func;
  if (record == NULL || record->func == NULL) {
    TVMAPISetLastError("TVMFuncCall: called a NULL function handle");
    return -1;
  }
  *ret_type_code = kTVMNullptr;
  ret_val->v_handle = NULL;
  return record->func(arg_values, type_codes, num_args, ret_val, ret_type_code,
                      record->resource_handle) == 0 ? 0 : -1;
}

/* ---- registry hooks (installed by kiln.runtime) ---------------------------------------- */

typedef int (*KilnRegisterGlobalHook)(const char* name, TVMFunctionHandle f, int override);
typedef int (*KilnGetGlobalHook)(const char* name, TVMFunctionHandle* out);
typedef int (*KilnGetFuncFromEnvHook)(void* mod_node, const char* name, TVMFunctionHandle* out);

static KilnRegisterGlobalHook kiln_register_global_hook = NULL;
static KilnGetGlobalHook kiln_get_global_hook = NULL;
static KilnGetFuncFromEnvHook kiln_get_func_from_env_hook = NULL;

TVM_DLL void KilnRuntimeSetHooks(KilnRegisterGlobalHook register_global,
                                 KilnGetGlobalHook get_global,
                                 KilnGetFuncFromEnvHook get_func_from_env) {
  kiln_register_global_hook = register_global;
  kiln_get_global_hook = get_global;
  kiln_get_func_from_env_hook = get_func_from_env;
}

static int kiln_no_hooks(const char* api) {
  char msg[160];
  snprintf(msg, sizeof(msg), "%s: the kiln Python runtime has not installed its registry hooks",
           api);
  TVMAPISetLastError(msg);
  return -1;
}

TVM_DLL int TVMFuncRegisterGlobal(const char* name, TVMFunctionHandle f, int override) {
  if (kiln_register_global_hook == NULL) return kiln_no_hooks("TVMFuncRegisterGlobal");
  return kiln_register_global_hook(name, f, override);
}

TVM_DLL int TVMFuncGetGlobal(const char* name, TVMFunctionHandle* out) {
  *out = NULL;
  if (kiln_get_global_hook == NULL) return kiln_no_hooks("TVMFuncGetGlobal");
  return kiln_get_global_hook(name, out);
}

TVM_DLL int TVMBackendGetFuncFromEnv(void* mod_node, const char* func_name,
                                     TVMFunctionHandle* out) {
  *out = NULL;
  if (kiln_get_func_from_env_hook == NULL) return kiln_no_hooks("TVMBackendGetFuncFromEnv");
  return kiln_get_func_from_env_hook(mod_node, func_name, out);
}

/* ---- system library symbols ------------------------------------------------------------ */

typedef struct {
  char* name;
  void* ptr;
} KilnSymbol;

static KilnSymbol* kiln_symbols = NULL;
static size_t kiln_num_symbols = 0, kiln_symbol_capacity = 0;

static pthread_mutex_t kiln_symbol_lock = PTHREAD_MUTEX_INITIALIZER;
#define KILN_LOCK() pthread_mutex_lock(&kiln_symbol_lock)
#define KILN_UNLOCK() pthread_mutex_unlock(&kiln_symbol_lock)

TVM_DLL int TVMBackendRegisterSystemLibSymbol(const char* name, void* ptr) {
  KILN_LOCK();
  for (size_t i = 0; i < kiln_num_symbols; ++i) {
    if (strcmp(kiln_symbols[i].name, name) == 0) {
      kiln_symbols[i].ptr = ptr; /* a later registration wins, as in TVM */
      KILN_UNLOCK();
      return 0;
    }
  }
  if (kiln_num_symbols == kiln_symbol_capacity) {
    size_t capacity = kiln_symbol_capacity ? 2 * kiln_symbol_capacity : 64;
    KilnSymbol* grown = (KilnSymbol*)realloc(kiln_symbols, capacity * sizeof(KilnSymbol));
    if (grown == NULL) {
      KILN_UNLOCK();
      TVMAPISetLastError("TVMBackendRegisterSystemLibSymbol: out of memory");
      return -1;
    }
    kiln_symbols = grown;
    kiln_symbol_capacity = capacity;
  }
  char* copy = strdup(name);
  if (copy == NULL) {
    KILN_UNLOCK();
    TVMAPISetLastError("TVMBackendRegisterSystemLibSymbol: out of memory");
    return -1;
  }
  kiln_symbols[kiln_num_symbols].name = copy;
  kiln_symbols[kiln_num_symbols].ptr = ptr;
  ++kiln_num_symbols;
  KILN_UNLOCK();
  return 0;
}

TVM_DLL void* KilnSystemLibLookup(const char* name) {
  void* found = NULL;
  KILN_LOCK();
  for (size_t i = 0; i < kiln_num_symbols && found == NULL; ++i) {
    if (strcmp(kiln_symbols[i].name, name) == 0) found = kiln_symbols[i].ptr;
  }
  KILN_UNLOCK();
  return found;
}
