/*
 * c_runtime_api.h — the part of TVM's C runtime API that kiln's generated code and C runtime use.
 *
 * Written for kiln from the TVM (Relay era) ABI description: the TVMValue union and type codes
 * that every packed call passes, byte arrays, handles, the last-error pair and calls on
 * function handles. Only <stdint.h>/<stddef.h> are required, so the header compiles for
 * bare-metal targets too. The host implementation lives in kiln/runtime/src/kiln_runtime.c.
 */
#ifndef TVM_RUNTIME_C_RUNTIME_API_H_
#define TVM_RUNTIME_C_RUNTIME_API_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifndef TVM_DLL
#ifdef _WIN32
#define TVM_DLL __declspec(dllexport)
#else
#define TVM_DLL __attribute__((visibility("default")))
#endif
#endif

#define TVM_VERSION "0.16.0"

#ifdef __cplusplus
extern "C" {
#endif

/* Device types TVM adds after DLPack's. */
typedef enum {
  kDLAOCL = 32,
  kDLSDAccel = 33,
  kOpenGL = 34,
  kDLMicroDev = 35,
} TVMDeviceExtType;

/* Type code of each TVMValue in a packed call (kept numerically identical to TVM). */
typedef enum {
  kTVMArgInt = kDLInt,
  kTVMArgFloat = kDLFloat,
  kTVMOpaqueHandle = 3U,
  kTVMNullptr = 4U,
  kTVMDataType = 5U,
  kDLDevice = 6U,
  kTVMDLTensorHandle = 7U,
  kTVMObjectHandle = 8U,
  kTVMModuleHandle = 9U,
  kTVMPackedFuncHandle = 10U,
  kTVMStr = 11U,
  kTVMBytes = 12U,
  kTVMNDArrayHandle = 13U,
  kTVMObjectRValueRefArg = 14U,
  kTVMExtBegin = 15U,
  kTVMExtReserveEnd = 64U,
  kTVMExtEnd = 128U,
} TVMArgTypeCode;

typedef DLTensor* TVMArrayHandle;

/* One argument or return value of a packed call; its meaning is given by a type code. */
typedef union {
  int64_t v_int64;
  double v_float64;
  void* v_handle;
  const char* v_str;
  DLDataType v_type;
  DLDevice v_device;
} TVMValue;

/* Bytes that may contain NUL (type code kTVMBytes). */
typedef struct {
  const char* data;
  size_t size;
} TVMByteArray;

typedef void* TVMModuleHandle;
typedef void* TVMFunctionHandle;
typedef void* TVMRetValueHandle;
typedef void* TVMStreamHandle;
typedef void* TVMObjectHandle;

/* Store msg as this thread's last error (copied). Kernels call it before returning nonzero. */
TVM_DLL void TVMAPISetLastError(const char* msg);

/* This thread's last error message ("" if none). Valid until the next TVMAPISetLastError. */
TVM_DLL const char* TVMGetLastError(void);

/*
 * Call a function handle with packed arguments. Returns 0 on success, nonzero on failure
 * (with the message in TVMGetLastError). A returned string stays valid until the next call
 * on this thread.
 */
TVM_DLL int TVMFuncCall(TVMFunctionHandle func, TVMValue* arg_values, int* type_codes,
                        int num_args, TVMValue* ret_val, int* ret_type_code);

/* Register f as the global function `name` (override != 0 replaces an existing one). */
TVM_DLL int TVMFuncRegisterGlobal(const char* name, TVMFunctionHandle f, int override);

/* Look up the global function `name`; *out is NULL when there is none. */
TVM_DLL int TVMFuncGetGlobal(const char* name, TVMFunctionHandle* out);

/* Release a handle made by KilnFuncCreate (runs its finalizer). */
TVM_DLL int TVMFuncFree(TVMFunctionHandle func);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_C_RUNTIME_API_H_ */
