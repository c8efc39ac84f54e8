/*
 * c_runtime_api.h - TVM's C runtime API as the kiln C runtime (CRT) implements it.
 *
 * Written for kiln from TVM v0.16's interface: the TVMValue union and argument type codes of
 * every packed call, handles, the last-error pair, functions and modules by handle, and NDArray
 * allocation. Needs only <stdint.h>/<stddef.h>, so it compiles for bare-metal targets.
 * The CRT implementation lives in src/runtime/crt/common/crt_runtime_api.c.
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

/* Signed index type of shapes and strides. */
typedef int64_t tvm_index_t;

/* Device types TVM adds after DLPack's. */
typedef enum {
  kDLAOCL = 32,
  kDLSDAccel = 33,
  kOpenGL = 34,
  kDLMicroDev = 35,
} TVMDeviceExtType;

/* Type code of each TVMValue in a packed call (numerically identical to TVM). */
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

/* Store msg as the last error (copied; a message longer than the buffer ends in "..."). */
TVM_DLL void TVMAPISetLastError(const char* msg);

/* The last error message ("" if none). Valid until the next TVMAPISetLastError. */
TVM_DLL const char* TVMGetLastError(void);

/* Allocate a compact NDArray through the platform memory manager. */
TVM_DLL int TVMArrayAlloc(const tvm_index_t* shape, int ndim, int dtype_code, int dtype_bits,
                          int dtype_lanes, int device_type, int device_id, TVMArrayHandle* out);

/* Free an NDArray made by TVMArrayAlloc. */
TVM_DLL int TVMArrayFree(TVMArrayHandle handle);

/* Raw device memory (the CRT only knows kDLCPU). */
TVM_DLL int TVMDeviceAllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment,
                                    DLDataType type_hint, void** out_data);
TVM_DLL int TVMDeviceAllocDataSpaceWithScope(DLDevice dev, int ndim, const int64_t* shape,
                                             DLDataType dtype, const char* mem_scope,
                                             void** out_data);
TVM_DLL int TVMDeviceFreeDataSpace(DLDevice dev, void* ptr);

/* Copy between two compact tensors of the same byte size. */
TVM_DLL int TVMDeviceCopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream);

/* Streams do not exist on the CRT: these succeed and do nothing. */
TVM_DLL int TVMStreamCreate(int device_type, int device_id, TVMStreamHandle* out);
TVM_DLL int TVMStreamFree(int device_type, int device_id, TVMStreamHandle stream);
TVM_DLL int TVMSetStream(int device_type, int device_id, TVMStreamHandle stream);
TVM_DLL int TVMSynchronize(int device_type, int device_id, TVMStreamHandle stream);

/* Objects are not reference counted on the CRT: succeeds and does nothing. */
TVM_DLL int TVMObjectFree(TVMObjectHandle obj);

/*
 * Call a function handle with packed arguments. Returns 0 on success, nonzero on failure
 * (with the message in TVMGetLastError).
 */
TVM_DLL int TVMFuncCall(TVMFunctionHandle func, TVMValue* arg_values, int* type_codes,
                        int num_args, TVMValue* ret_val, int* ret_type_code);

/*
 * Register a C packed function (a TVMBackendPackedCFunc passed as the handle) as the global
 * function `name`; override != 0 replaces an existing one.
 */
TVM_DLL int TVMFuncRegisterGlobal(const char* name, TVMFunctionHandle f, int override);

/* Look up the global function `name`; fails with kTvmErrorFunctionNameNotFound if absent. */
TVM_DLL int TVMFuncGetGlobal(const char* name, TVMFunctionHandle* out);

/* Function handles are plain indices on the CRT: succeeds and does nothing. */
TVM_DLL int TVMFuncFree(TVMFunctionHandle func);

/* Look up `func_name` in a module (query_imports is ignored: CRT modules have no imports). */
TVM_DLL int TVMModGetFunction(TVMModuleHandle mod, const char* func_name, int query_imports,
                              TVMFunctionHandle* out);

/* Modules live as long as the runtime: succeeds and does nothing. */
TVM_DLL int TVMModFree(TVMModuleHandle mod);

/* Byte arrays returned by the CRT are never heap owned: succeeds and does nothing. */
TVM_DLL int TVMByteArrayFree(TVMByteArray* arr);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_C_RUNTIME_API_H_ */
