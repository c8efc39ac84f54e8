/*
 * c_backend_api.h - the services generated kernels call on the kiln CRT: workspace memory,
 * (serial) parallel launch, function lookup (TVM v0.16's backend API).
 *
 * Written for kiln from TVM's interface. A generated operator is a TVMBackendPackedCFunc: it
 * reads DLTensor* arguments from `args`, returns 0 on success, and on failure calls
 * TVMAPISetLastError(msg) and returns nonzero. Implemented in src/runtime/crt/common/
 * crt_backend_api.c.
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

/* Find `func_name` for a kernel: on the CRT, the global function registry. */
TVM_DLL int TVMBackendGetFuncFromEnv(void* mod_node, const char* func_name,
                                     TVMFunctionHandle* out);

/* Not supported on the CRT (system libraries register through TVMSystemLibEntryPoint). */
TVM_DLL int TVMBackendRegisterSystemLibSymbol(const char* name, void* ptr);

/* Scratch memory for a kernel from TVMPlatformMemoryAllocate; NULL (last error set) if full. */
TVM_DLL void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                                       int dtype_code_hint, int dtype_bits_hint);

/* Free memory from TVMBackendAllocWorkspace. */
TVM_DLL int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr);

/* Run flambda for every task id in turn (the CRT has no threads); 0 if all returned 0. */
TVM_DLL int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task);

/* Tasks run one after another on the CRT, so a barrier has nothing to wait for. */
TVM_DLL int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv);

/* Run f(cdata) once, storing a non-NULL marker in *handle. */
TVM_DLL int TVMBackendRunOnce(void** handle, int (*f)(void*), void* cdata, int nbytes);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_C_BACKEND_API_H_ */
