/*
 * c_backend_api.h — the services generated kernels call: workspace memory, parallel launch,
 * function lookup and system-library registration (TVM's backend API, Relay era).
 *
 * Written for kiln from the TVM ABI description. A generated operator is a
 * TVMBackendPackedCFunc: it reads DLTensor* arguments from `args`, returns 0 on success, and
 * on failure calls TVMAPISetLastError(msg) and returns nonzero. Bare-metal safe (stdint only).
 * The host implementation lives in kiln/runtime/src/kiln_runtime.c.
 */
#ifndef TVM_RUNTIME_C_BACKEND_API_H_
#define TVM_RUNTIME_C_BACKEND_API_H_

#include <tvm/runtime/c_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The packed calling convention of every generated kernel. */
typedef int (*TVMBackendPackedCFunc)(TVMValue* args, int* type_codes, int num_args,
                                     TVMValue* out_ret_value, int* out_ret_tcode,
                                     void* resource_handle);

/* What each task of a parallel launch sees: its team's size and a barrier handle. */
typedef struct {
  void* sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;

/* Body of a parallel launch, run once per task; returns 0 on success. */
typedef int (*FTVMParallelLambda)(int task_id, TVMParallelGroupEnv* penv, void* cdata);

/*
 * Find `func_name` for the module whose context is `mod_node` (the value the loader stored
 * in the library's __tvm_module_ctx): the module's imports first, then the global registry.
 */
TVM_DLL int TVMBackendGetFuncFromEnv(void* mod_node, const char* func_name,
                                     TVMFunctionHandle* out);

/* Record a symbol of a statically linked ("system") library, e.g. a kernel or the blob. */
TVM_DLL int TVMBackendRegisterSystemLibSymbol(const char* name, void* ptr);

/* Scratch memory for a kernel, 64-byte aligned; NULL (with last error set) on failure. */
TVM_DLL void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                                       int dtype_code_hint, int dtype_bits_hint);

/* Free memory from TVMBackendAllocWorkspace. */
TVM_DLL int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr);

/*
 * Run flambda(task_id, env, cdata) for task_id in [0, env->num_task) in parallel.
 * num_task <= 0 means "one task per worker thread" (KILN_NUM_THREADS / TVM_NUM_THREADS).
 * Returns 0 if every task returned 0.
 */
TVM_DLL int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task);

/* Wait until every task of the current parallel launch reaches this barrier. */
TVM_DLL int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv);

/* Run f(cdata) once, storing a non-NULL marker in *handle (not thread safe, as in TVM). */
TVM_DLL int TVMBackendRunOnce(void** handle, int (*f)(void*), void* cdata, int nbytes);

/*
 * kiln extension: wrap a C packed function as a function handle (for TVMFuncRegisterGlobal,
 * TVMFuncCall). `finalizer(resource_handle)` runs on TVMFuncFree when not NULL.
 */
TVM_DLL int KilnFuncCreate(TVMBackendPackedCFunc func, void* resource_handle,
                           void (*finalizer)(void*), TVMFunctionHandle* out);

/*
 * kiln extension: hold the parallel-launch pool hot (`hold` nonzero) or release one hold
 * (zero). While held, idle workers poll for the next launch (bounded) instead of sleeping,
 * so a run of many kernels does not pay a wake-up per parallel kernel. Returns the number of
 * holds in force.
 */
TVM_DLL int KilnRuntimePoolHold(int hold);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_C_BACKEND_API_H_ */
