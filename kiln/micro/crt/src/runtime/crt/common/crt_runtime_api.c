/*
 * crt_runtime_api.c - the C runtime API on the CRT: last error, NDArray allocation, the global
 * function registry, modules and function handles, and the runtime's built-in globals.
 *
 * Handles are small integers, never pointers (as in TVM's CRT): a module handle is
 * (module_index | 0x8000), a function handle ((module_index | 0x8000) << 16) |
 * (function_index | 0x8000). Module 0 is the global registry. The 0x8000 bits keep every valid
 * handle non-NULL and let a decoder reject garbage.
 */
#include <stdarg.h>
#include <string.h>
#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/func_registry.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/module.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_config.h"

static char g_last_error[TVM_CRT_MAX_STRLEN_ERROR];

void TVMAPISetLastError(const char* msg) {
  size_t n = strlen(msg);
  if (n < sizeof(g_last_error)) {
    memcpy(g_last_error, msg, n + 1);
    return;
  }
  /* Keep the head of an over-long message and say that it was cut. */
  memcpy(g_last_error, msg, sizeof(g_last_error) - 4);
  memcpy(g_last_error + sizeof(g_last_error) - 4, "...", 4);
}

const char* TVMGetLastError(void) { return g_last_error; }

int TVMCrtError(int code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  TVMPlatformFormatMessage(g_last_error, sizeof(g_last_error), fmt, args);
  va_end(args);
  return code;
}

/* ---- NDArrays and raw device memory ---- */

static const DLDevice kCPU = {kDLCPU, 0};

int TVMArrayAlloc(const tvm_index_t* shape, int ndim, int dtype_code, int dtype_bits,
                  int dtype_lanes, int device_type, int device_id, TVMArrayHandle* out) {
  DLDataType dtype;
  DLDevice dev;
  TVMNDArray* arr = NULL;
  int status;
  if (dtype_code < 0 || dtype_code > 255 || dtype_bits <= 0 || dtype_bits > 255 ||
      dtype_lanes <= 0 || dtype_lanes > 65535) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMArrayAlloc: invalid dtype code=%d bits=%d lanes=%d", dtype_code,
                       dtype_bits, dtype_lanes);
  }
  dtype.code = (uint8_t)dtype_code;
  dtype.bits = (uint8_t)dtype_bits;
  dtype.lanes = (uint16_t)dtype_lanes;
  dev.device_type = (DLDeviceType)device_type;
  dev.device_id = device_id;
  status = TVMPlatformMemoryAllocate(sizeof(TVMNDArray), kCPU, (void**)&arr);
  if (status != 0) {
    return TVMCrtError(status, "TVMArrayAlloc: out of memory for the array header");
  }
  status = TVMNDArray_Empty(ndim, shape, dtype, dev, arr);
  if (status != 0) {
    TVMPlatformMemoryFree(arr, kCPU);
    return status;
  }
  *out = &arr->dl_tensor;
  return 0;
}

int TVMArrayFree(TVMArrayHandle handle) {
  /* dl_tensor is the first member of the TVMNDArray TVMArrayAlloc made. */
  TVMNDArray* arr = (TVMNDArray*)handle;
  int status = TVMNDArray_Release(arr);
  if (status != 0) return status;
  return TVMPlatformMemoryFree(arr, kCPU);
}

int TVMDeviceAllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint,
                            void** out_data) {
  (void)type_hint;
  if (alignment != 1 && (alignment == 0 || 64 % alignment != 0)) {
    /* The page allocator aligns to 64 bytes; larger or odd alignments are not available. */
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceAllocDataSpace: alignment %lu not supported (divisors of 64)",
                       (unsigned long)alignment);
  }
  return TVMPlatformMemoryAllocate(nbytes, dev, out_data);
}

int TVMDeviceAllocDataSpaceWithScope(DLDevice dev, int ndim, const int64_t* shape,
                                     DLDataType dtype, const char* mem_scope, void** out_data) {
  TVMNDArray view;
  int64_t nbytes;
  int status;
  if (mem_scope != NULL && strcmp(mem_scope, "global") != 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceAllocDataSpaceWithScope: memory scope '%s' not supported",
                       mem_scope);
  }
  status = TVMNDArray_Create(ndim, shape, dtype, dev, &view);
  if (status != 0) return status;
  nbytes = TVMNDArray_DataSizeBytes(&view);
  if (nbytes < 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceAllocDataSpaceWithScope: tensor size overflows");
  }
  return TVMDeviceAllocDataSpace(dev, (size_t)nbytes, 1, dtype, out_data);
}

int TVMDeviceFreeDataSpace(DLDevice dev, void* ptr) { return TVMPlatformMemoryFree(ptr, dev); }

/* Byte size of a compact tensor, or -1 when it is strided or its size overflows. */
static int64_t CompactByteSize(const DLTensor* t) {
  TVMNDArray view;
  int64_t expected_stride = 1;
  int i;
  if (TVMNDArray_Create(t->ndim, t->shape, t->dtype, t->device, &view) != 0) return -1;
  if (t->strides != NULL) {
    for (i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expected_stride) return -1;
      expected_stride *= t->shape[i];
    }
  }
  return TVMNDArray_DataSizeBytes(&view);
}

int TVMDeviceCopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream) {
  int64_t from_size = CompactByteSize(from);
  int64_t to_size = CompactByteSize(to);
  (void)stream;
  if (from_size < 0 || to_size < 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceCopyDataFromTo: only compact tensors can be copied");
  }
  if (from_size != to_size) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceCopyDataFromTo: size mismatch, %ld bytes into %ld bytes",
                       (long)from_size, (long)to_size);
  }
  if (from->device.device_type != kDLCPU || to->device.device_type != kDLCPU) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMDeviceCopyDataFromTo: only CPU tensors can be copied");
  }
  memcpy((uint8_t*)to->data + to->byte_offset, (const uint8_t*)from->data + from->byte_offset,
         (size_t)from_size);
  return 0;
}

int TVMStreamCreate(int device_type, int device_id, TVMStreamHandle* out) {
  (void)device_type;
  (void)device_id;
  *out = NULL;
  return 0;
}

int TVMStreamFree(int device_type, int device_id, TVMStreamHandle stream) {
  (void)device_type;
  (void)device_id;
  (void)stream;
  return 0;
}

int TVMSetStream(int device_type, int device_id, TVMStreamHandle stream) {
  return TVMStreamFree(device_type, device_id, stream);
}

int TVMSynchronize(int device_type, int device_id, TVMStreamHandle stream) {
  return TVMStreamFree(device_type, device_id, stream);
}

int TVMObjectFree(TVMObjectHandle obj) {
  (void)obj;
  return 0;
}

int TVMByteArrayFree(TVMByteArray* arr) {
  (void)arr;
  return 0;
}

/* ---- modules and function handles ---- */

static TVMMutableFuncRegistry g_global_registry;
static TVMModule g_global_module;
static const TVMModule* g_modules[TVM_CRT_MAX_REGISTERED_MODULES];
static tvm_module_index_t g_num_modules;
static TVMModuleHandle g_system_lib_handle;

static TVMModuleHandle EncodeModuleHandle(tvm_module_index_t module_index) {
  return (TVMModuleHandle)(uintptr_t)(module_index | 0x8000u);
}

static int DecodeModuleHandle(TVMModuleHandle handle, tvm_module_index_t* out) {
  uintptr_t value = (uintptr_t)handle;
  if ((value & ~(uintptr_t)0x7fff) != 0x8000u || (value & 0x7fffu) >= g_num_modules) {
    return TVMCrtError(kTvmErrorFunctionIndexInvalid, "invalid module handle %p", handle);
  }
  *out = (tvm_module_index_t)(value & 0x7fffu);
  return 0;
}

static TVMFunctionHandle EncodeFunctionHandle(tvm_module_index_t module_index,
                                              tvm_function_index_t function_index) {
  uintptr_t value = ((uintptr_t)(module_index | 0x8000u) << 16) | (function_index | 0x8000u);
  return (TVMFunctionHandle)value;
}

static int DecodeFunctionHandle(TVMFunctionHandle handle, tvm_module_index_t* module_index,
                                tvm_function_index_t* function_index) {
  uintptr_t value = (uintptr_t)handle;
  uintptr_t module_part = value >> 16;
  if ((module_part & ~(uintptr_t)0x7fff) != 0x8000u || (value & 0x8000u) == 0 ||
      (module_part & 0x7fffu) >= g_num_modules) {
    return TVMCrtError(kTvmErrorFunctionIndexInvalid, "invalid function handle %p", handle);
  }
  *module_index = (tvm_module_index_t)(module_part & 0x7fffu);
  *function_index = (tvm_function_index_t)(value & 0x7fffu);
  return 0;
}

int TVMModCreateFromCModule(const TVMModule* mod, TVMModuleHandle* out_handle) {
  if (mod == NULL || mod->registry == NULL || mod->registry->names == NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "TVMModCreateFromCModule: module without a function registry");
  }
  if (g_num_modules >= TVM_CRT_MAX_REGISTERED_MODULES) {
    return TVMCrtError(kTvmErrorFunctionRegistryFull,
                       "TVMModCreateFromCModule: %d modules already registered; raise "
                       "TVM_CRT_MAX_REGISTERED_MODULES in crt_config.h",
                       (int)g_num_modules);
  }
  g_modules[g_num_modules] = mod;
  *out_handle = EncodeModuleHandle(g_num_modules);
  ++g_num_modules;
  return 0;
}

int TVMModFree(TVMModuleHandle mod) {
  (void)mod;
  return 0;
}

static int LookupInModule(tvm_module_index_t module_index, const char* name,
                          TVMFunctionHandle* out) {
  tvm_function_index_t function_index = 0;
  if (TVMFuncRegistry_Lookup(g_modules[module_index]->registry, name, &function_index) != 0) {
    *out = NULL;
    return TVMCrtError(kTvmErrorFunctionNameNotFound, "function '%s' not found", name);
  }
  *out = EncodeFunctionHandle(module_index, function_index);
  return 0;
}

int TVMFuncGetGlobal(const char* name, TVMFunctionHandle* out) {
  if (g_num_modules == 0) {
    *out = NULL;
    return TVMCrtError(kTvmErrorPlatformCheckFailure,
                       "TVMFuncGetGlobal('%s'): call TVMInitializeRuntime first", name);
  }
  return LookupInModule(0, name, out);
}

int TVMModGetFunction(TVMModuleHandle mod, const char* func_name, int query_imports,
                      TVMFunctionHandle* out) {
  tvm_module_index_t module_index = 0;
  int status = DecodeModuleHandle(mod, &module_index);
  (void)query_imports;
  if (status != 0) {
    *out = NULL;
    return status;
  }
  return LookupInModule(module_index, func_name, out);
}

int TVMFuncRegisterGlobal(const char* name, TVMFunctionHandle f, int override) {
  int status;
  if (g_num_modules == 0) {
    return TVMCrtError(kTvmErrorPlatformCheckFailure,
                       "TVMFuncRegisterGlobal('%s'): call TVMInitializeRuntime first", name);
  }
  /* On the CRT a registered "handle" is the C function itself, as in TVM. */
  status = TVMMutableFuncRegistry_Set(&g_global_registry, name, (TVMBackendPackedCFunc)f,
                                      override != 0);
  if (status == kTvmErrorFunctionAlreadyDefined) {
    return TVMCrtError(status, "global function '%s' is already registered", name);
  }
  if (status != 0) {
    return TVMCrtError(status,
                       "cannot register global function '%s': registry full; raise "
                       "TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES in crt_config.h",
                       name);
  }
  return 0;
}

int TVMFuncFree(TVMFunctionHandle func) {
  (void)func;
  return 0;
}

int TVMFuncCall(TVMFunctionHandle func, TVMValue* arg_values, int* type_codes, int num_args,
                TVMValue* ret_val, int* ret_type_code) {
  tvm_module_index_t module_index = 0;
  tvm_function_index_t function_index = 0;
  TVMBackendPackedCFunc fn;
  int status = DecodeFunctionHandle(func, &module_index, &function_index);
  if (status != 0) return status;
  if (TVMFuncRegistry_GetByIndex(g_modules[module_index]->registry, function_index, &fn) != 0) {
    return TVMCrtError(kTvmErrorFunctionIndexInvalid, "invalid function handle %p", func);
  }
  ret_val->v_handle = NULL;
  *ret_type_code = kTVMNullptr;
  return fn(arg_values, type_codes, num_args, ret_val, ret_type_code, NULL);
}

/* ---- built-in global functions ---- */

/* Weak default so that a firmware without a system library still links. */
__attribute__((weak)) const TVMModule* TVMSystemLibEntryPoint(void) { return NULL; }

__attribute__((weak)) tvm_crt_error_t TVMPlatformBeforeMeasurement(void) {
  return kTvmErrorNoError;
}

__attribute__((weak)) tvm_crt_error_t TVMPlatformAfterMeasurement(void) {
  return kTvmErrorNoError;
}

/* runtime.SystemLib(): the module of the linked system library (created once). */
static int SystemLibraryCreate(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_val,
                               int* ret_type_code, void* resource_handle) {
  const TVMModule* system_lib;
  (void)args;
  (void)type_codes;
  (void)num_args;
  (void)resource_handle;
  if (g_system_lib_handle == NULL) {
    int status;
    system_lib = TVMSystemLibEntryPoint();
    if (system_lib == NULL) {
      return TVMCrtError(kTvmErrorFunctionNameNotFound,
                         "runtime.SystemLib: no system library is linked (build the model with "
                         "Runtime(\"crt\", {\"system-lib\": True}))");
    }
    status = TVMModCreateFromCModule(system_lib, &g_system_lib_handle);
    if (status != 0) return status;
  }
  ret_val->v_handle = g_system_lib_handle;
  *ret_type_code = kTVMModuleHandle;
  return 0;
}

/* tvm.rpc.server.ModuleGetFunction(module, name, query_imports): handle or null. */
static int ModuleGetFunction(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_value,
                             int* ret_type_code, void* resource_handle) {
  TVMFunctionHandle handle;
  (void)resource_handle;
  if (num_args != 3) {
    return TVMCrtError(kTvmErrorFunctionCallNumArguments,
                       "ModuleGetFunction expects 3 arguments, got %d", num_args);
  }
  if (type_codes[0] != kTVMModuleHandle || type_codes[1] != kTVMStr ||
      type_codes[2] != kTVMArgInt) {
    return TVMCrtError(kTvmErrorFunctionCallWrongArgType,
                       "ModuleGetFunction expects (module, str, int), got type codes "
                       "(%d, %d, %d)",
                       type_codes[0], type_codes[1], type_codes[2]);
  }
  if (TVMModGetFunction(args[0].v_handle, args[1].v_str, (int)args[2].v_int64, &handle) == 0) {
    ret_value->v_handle = handle;
    *ret_type_code = kTVMPackedFuncHandle;
  } else {
    /* Not found is an answer, not an error (TVM returns a null function). */
    ret_value->v_handle = NULL;
    *ret_type_code = kTVMNullptr;
  }
  return 0;
}

/* tvm.contrib.random.random_fill(tensor): fill a compact tensor with random bytes. */
static int RandomFill(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_val,
                      int* ret_type_code, void* resource_handle) {
  DLTensor* tensor;
  int64_t nbytes;
  (void)ret_val;
  (void)ret_type_code;
  (void)resource_handle;
  if (num_args != 1) {
    return TVMCrtError(kTvmErrorFunctionCallNumArguments,
                       "random_fill expects 1 argument, got %d", num_args);
  }
  if (type_codes[0] != kTVMDLTensorHandle && type_codes[0] != kTVMNDArrayHandle) {
    return TVMCrtError(kTvmErrorFunctionCallWrongArgType,
                       "random_fill expects a tensor, got type code %d", type_codes[0]);
  }
  tensor = (DLTensor*)args[0].v_handle;
  nbytes = CompactByteSize(tensor);
  if (nbytes < 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "random_fill: tensor is not compact");
  }
  return TVMPlatformGenerateRandom((uint8_t*)tensor->data + tensor->byte_offset, (size_t)nbytes);
}

tvm_crt_error_t TVMInitializeRuntime(void) {
  uint8_t* buffer = NULL;
  tvm_crt_error_t err;
  if (g_num_modules != 0) return kTvmErrorPlatformMemoryManagerInitialized;
  err = TVMPlatformMemoryAllocate(TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES, kCPU, (void**)&buffer);
  if (err != kTvmErrorNoError) return err;
  err = TVMMutableFuncRegistry_Create(&g_global_registry, buffer,
                                      TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES);
  if (err != kTvmErrorNoError) goto fail;
  g_global_module.registry = &g_global_registry.registry;
  g_modules[0] = &g_global_module;
  g_num_modules = 1;
  err = TVMMutableFuncRegistry_Set(&g_global_registry, "runtime.SystemLib", &SystemLibraryCreate,
                                   0);
  if (err == kTvmErrorNoError) {
    err = TVMMutableFuncRegistry_Set(&g_global_registry, "tvm.rpc.server.ModuleGetFunction",
                                     &ModuleGetFunction, 0);
  }
  if (err == kTvmErrorNoError) {
    err = TVMMutableFuncRegistry_Set(&g_global_registry, "tvm.contrib.random.random_fill",
                                     &RandomFill, 0);
  }
  if (err == kTvmErrorNoError) return err;
  g_num_modules = 0;
fail:
  TVMPlatformMemoryFree(buffer, kCPU);
  return err;
}
