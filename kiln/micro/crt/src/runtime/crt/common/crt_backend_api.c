/*
 * crt_backend_api.c - the backend services generated kernels call, on the CRT: workspace memory
 * through the platform's memory manager, serial "parallel" launches, global function lookup.
 */
#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/crt/error_codes.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/platform.h>

void* TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes,
                               int dtype_code_hint, int dtype_bits_hint) {
  void* ptr = NULL;
  DLDevice dev;
  tvm_crt_error_t err;
  (void)dtype_code_hint;
  (void)dtype_bits_hint;
  dev.device_type = (DLDeviceType)device_type;
  dev.device_id = device_id;
  if (nbytes > (uint64_t)(size_t)-1) {
    TVMCrtError(kTvmErrorPlatformNoMemory, "TVMBackendAllocWorkspace: %lu bytes do not fit",
                (unsigned long)nbytes);
    return NULL;
  }
  err = TVMPlatformMemoryAllocate((size_t)nbytes, dev, &ptr);
  if (err != kTvmErrorNoError) {
    /* Kernels test for NULL and return failure; the message tells the user why. */
    TVMCrtError(err, "TVMBackendAllocWorkspace: cannot allocate %lu bytes (error 0x%x)",
                (unsigned long)nbytes, (unsigned)err);
    return NULL;
  }
  return ptr;
}

int TVMBackendFreeWorkspace(int device_type, int device_id, void* ptr) {
  DLDevice dev;
  tvm_crt_error_t err;
  dev.device_type = (DLDeviceType)device_type;
  dev.device_id = device_id;
  err = TVMPlatformMemoryFree(ptr, dev);
  if (err != kTvmErrorNoError) {
    return TVMCrtError(err, "TVMBackendFreeWorkspace: cannot free %p (error 0x%x)", ptr,
                       (unsigned)err);
  }
  return 0;
}

int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  TVMParallelGroupEnv env;
  int task_id;
  /* No threads on a microcontroller: run the tasks in order on the caller's stack. */
  env.sync_handle = NULL;
  env.num_task = num_task > 0 ? num_task : 1;
  for (task_id = 0; task_id < env.num_task; ++task_id) {
    int status = flambda(task_id, &env, cdata);
    if (status != 0) return status;
  }
  return 0;
}

int TVMBackendParallelBarrier(int task_id, TVMParallelGroupEnv* penv) {
  (void)task_id;
  (void)penv;
  return 0;
}

int TVMBackendRunOnce(void** handle, int (*f)(void*), void* cdata, int nbytes) {
  (void)nbytes;
  if (*handle == NULL) {
    *handle = (void*)1;
    return f(cdata);
  }
  return 0;
}

int TVMBackendGetFuncFromEnv(void* mod_node, const char* func_name, TVMFunctionHandle* out) {
  (void)mod_node;
  return TVMFuncGetGlobal(func_name, out);
}

int TVMBackendRegisterSystemLibSymbol(const char* name, void* ptr) {
  (void)ptr;
  return TVMCrtError(kTvmErrorFunctionCallNotImplemented,
                     "TVMBackendRegisterSystemLibSymbol('%s'): the CRT finds system-library "
                     "functions through TVMSystemLibEntryPoint",
                     name);
}
