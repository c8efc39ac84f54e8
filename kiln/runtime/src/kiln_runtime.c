/*
 * kiln_runtime.c — the host implementation of the C API that generated kernels link against.
 *
 * Entry points (declared in include/tvm/runtime/c_runtime_api.h and c_backend_api.h):
 *   TVMAPISetLastError / TVMGetLastError   thread-local last error message
 *   TVMBackendAllocWorkspace / FreeWorkspace  64-byte aligned scratch memory
 *   TVMBackendParallelLaunch / ParallelBarrier  OpenMP when compiled with -fopenmp, else pthreads
 *   TVMFuncCall / KilnFuncCreate / TVMFuncFree  calls through function handles
 *   TVMFuncRegisterGlobal / TVMFuncGetGlobal / TVMBackendGetFuncFromEnv  forwarded to Python
 *   TVMBackendRegisterSystemLibSymbol        the system-library symbol table
 * and, for kiln's Python side (kiln/runtime/packed_func.py, module.py, native.py):
 *   KilnRuntimeSetHooks, KilnRuntimeSetNumThreads, KilnRuntimeNumThreads, KilnSystemLibLookup.
 *
 * A function handle points at a KilnFunction record (function pointer + resource handle), so
 * TVMFuncCall is a plain C call; a Python function gets a record whose pointer is a ctypes
 * trampoline. The registry lives in Python: the three registry entry points call hooks that
 * kiln.runtime installs when it loads this library.
 */
#define _POSIX_C_SOURCE 200809L /* strdup, pthread barriers */

#include <tvm/runtime/c_backend_api.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
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

TVM_DLL void KilnRuntimeSetNumThreads(int n) { kiln_num_threads = n > 0 ? n : 0; }

TVM_DLL int KilnRuntimeNumThreads(void) {
  if (kiln_num_threads <= 0) kiln_num_threads = kiln_threads_from_env();
  return kiln_num_threads;
}

#ifdef _OPENMP

TVM_DLL int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int requested = num_task > 0 ? num_task : KilnRuntimeNumThreads();
  int failed = 0;
#pragma omp parallel num_threads(requested)
  {
    /* The team may be smaller than requested (nested launch): tasks split by its real size. */
    TVMParallelGroupEnv env = {NULL, omp_get_num_threads()};
    if (flambda(omp_get_thread_num(), &env, cdata) != 0) {
#pragma omp atomic write
      failed = 1;
    }
  }
  return failed ? -1 : 0;
}

TVM_DLL int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id, (void)penv;
#pragma omp barrier
  return 0;
}

#else /* pthreads: one thread per task for each launch */

/*
 * Workers wait at a start gate until the team size is final: if a thread cannot be created,
 * the team shrinks to the threads that exist (tasks split by env.num_task), so the barrier
 * never waits for a task that will not come.
 */
typedef struct {
  FTVMParallelLambda flambda;
  void* cdata;
  TVMParallelGroupEnv env;
  pthread_barrier_t barrier;
  pthread_mutex_t gate_lock;
  pthread_cond_t gate;
  int gate_open;
  int failed;
} KilnLaunch;

typedef struct {
  KilnLaunch* launch;
  int task_id;
} KilnTask;

static _Thread_local int kiln_inside_launch = 0;

static void* kiln_run_task(void* arg) {
  KilnTask* task = (KilnTask*)arg;
  KilnLaunch* launch = task->launch;
  pthread_mutex_lock(&launch->gate_lock);
  while (!launch->gate_open) pthread_cond_wait(&launch->gate, &launch->gate_lock);
  pthread_mutex_unlock(&launch->gate_lock);
  kiln_inside_launch = 1;
  if (launch->flambda(task->task_id, &launch->env, launch->cdata) != 0) {
    __atomic_store_n(&launch->failed, 1, __ATOMIC_SEQ_CST);
  }
  return NULL;
}

TVM_DLL int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  int n = num_task > 0 ? num_task : KilnRuntimeNumThreads();
  if (kiln_inside_launch) n = 1; /* nested launch: run inline as a single task */
  KilnTask* tasks = (KilnTask*)calloc((size_t)n, sizeof(KilnTask));
  pthread_t* threads = (pthread_t*)calloc((size_t)n, sizeof(pthread_t));
  if (tasks == NULL || threads == NULL) {
    free(tasks), free(threads);
    TVMAPISetLastError("TVMBackendParallelLaunch: out of memory");
    return -1;
  }
  KilnLaunch launch;
  launch.flambda = flambda;
  launch.cdata = cdata;
  launch.env.sync_handle = &launch.barrier;
  launch.gate_open = 0;
  launch.failed = 0;
  pthread_mutex_init(&launch.gate_lock, NULL);
  pthread_cond_init(&launch.gate, NULL);
  int team = 1;
  for (int i = 0; i < n; ++i) tasks[i] = (KilnTask){&launch, i};
  while (team < n && pthread_create(&threads[team], NULL, kiln_run_task, &tasks[team]) == 0) {
    ++team;
  }
  launch.env.num_task = team;
  pthread_barrier_init(&launch.barrier, NULL, (unsigned)team);
  pthread_mutex_lock(&launch.gate_lock);
  launch.gate_open = 1;
  pthread_cond_broadcast(&launch.gate);
  pthread_mutex_unlock(&launch.gate_lock);
  int was_inside = kiln_inside_launch;
  kiln_run_task(&tasks[0]);
  kiln_inside_launch = was_inside;
  for (int i = 1; i < team; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&launch.barrier);
  pthread_cond_destroy(&launch.gate);
  pthread_mutex_destroy(&launch.gate_lock);
  free(tasks), free(threads);
  return launch.failed ? -1 : 0;
}

TVM_DLL int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  if (penv->num_task > 1) pthread_barrier_wait((pthread_barrier_t*)penv->sync_handle);
  return 0;
}

#endif

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
