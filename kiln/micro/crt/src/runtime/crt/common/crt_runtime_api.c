/*
 * crt_runtime_api.c - the C runtime API on the CRT: last error, NDArray allocation, the global
 * function registry, modules and function handles, and the runtime's built-in globals.
 *
 * Handles are small integers, never pointers (as in TVM's CRT): a module handle is
 * (module_index | 0x8000), a function handle ((module_index | 0x8000) << 16) |
 * (function_index | 0x8000). Module 0 is the global registry; module index 0x7fff stands for
 * the time evaluator that runtime.RPCTimeEvaluator returns. The 0x8000 bits keep every valid
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

int TVMCrtCheckArgs(const char* fn, int nargs, const int* tcodes, int expected_nargs,
                    const int* expected_tcodes) {
  int i;
  if (nargs != expected_nargs) {
    return TVMCrtError(kTvmErrorFunctionCallNumArguments, "%s expects %d arguments, got %d", fn,
                       expected_nargs, nargs);
  }
  for (i = 0; i < nargs; ++i) {
    if (tcodes[i] != expected_tcodes[i] &&
        !(expected_tcodes[i] == kTVMDLTensorHandle && tcodes[i] == kTVMNDArrayHandle)) {
      return TVMCrtError(kTvmErrorFunctionCallWrongArgType,
                         "%s: argument %d has type code %d, expected %d", fn, i, tcodes[i],
                         expected_tcodes[i]);
    }
  }
  return 0;
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
  if (from_size > 0) {
    memcpy((uint8_t*)to->data + to->byte_offset,
           (const uint8_t*)from->data + from->byte_offset, (size_t)from_size);
  }
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
  /* Byte arrays the CRT returns (time evaluator results) are platform allocations. */
  int status = TVMPlatformMemoryFree((void*)arr->data, kCPU);
  if (status != 0) return status;
  return TVMPlatformMemoryFree(arr, kCPU);
}

/* ---- modules and function handles ---- */

static TVMMutableFuncRegistry g_global_registry;
static TVMModule g_global_module;
static const TVMModule* g_modules[TVM_CRT_MAX_REGISTERED_MODULES];
static tvm_module_index_t g_num_modules;
static TVMModuleHandle g_system_lib_handle;

/* Pseudo module index of the time evaluator's function handles. */
#define TIME_EVALUATOR_MODULE_INDEX 0x7fffu

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
      ((module_part & 0x7fffu) >= g_num_modules &&
       (module_part & 0x7fffu) != TIME_EVALUATOR_MODULE_INDEX)) {
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

static int RunTimeEvaluator(tvm_function_index_t function_index, TVMValue* args,
                            int* type_codes, int num_args, TVMValue* ret_val, int* ret_type_code);

int TVMFuncCall(TVMFunctionHandle func, TVMValue* arg_values, int* type_codes, int num_args,
                TVMValue* ret_val, int* ret_type_code) {
  tvm_module_index_t module_index = 0;
  tvm_function_index_t function_index = 0;
  TVMBackendPackedCFunc fn;
  const TVMFuncRegistry* registry;
  int status = DecodeFunctionHandle(func, &module_index, &function_index);
  if (status != 0) return status;
  ret_val->v_handle = NULL;
  *ret_type_code = kTVMNullptr;
  if (module_index == TIME_EVALUATOR_MODULE_INDEX) {
    return RunTimeEvaluator(function_index, arg_values, type_codes, num_args, ret_val,
                            ret_type_code);
  }
  registry = g_modules[module_index]->registry;
  if (TVMFuncRegistry_GetByIndex(registry, function_index, &fn) != 0) {
    return TVMCrtError(kTvmErrorFunctionIndexInvalid, "invalid function handle %p", func);
  }
  /* As in TVM: module functions get their registry as resource handle, globals get NULL. */
  return fn(arg_values, type_codes, num_args, ret_val, ret_type_code,
            module_index == 0 ? NULL : (void*)registry);
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

/* ---- time evaluator (runtime.RPCTimeEvaluator) ---- */

/* The one time evaluator; a new RPCTimeEvaluator call replaces it (older handles go stale). */
static struct {
  tvm_function_index_t function_index;
  TVMFunctionHandle func_to_time;
  int64_t number;
  int64_t repeat;
  int64_t min_repeat_ms;
  int64_t limit_zero_time_iterations;
} g_time_evaluator;

/*
 * runtime.RPCTimeEvaluator(module, name, device_type, device_id, number, repeat,
 * min_repeat_ms, limit_zero_time_iterations, cooldown_interval_ms, repeats_to_cooldown,
 * cache_flush_bytes, f_preproc) -> a function timing module.name.
 */
static int RPCTimeEvaluator(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_val,
                            int* ret_type_code, void* resource_handle) {
  static const int kTypes[] = {kTVMModuleHandle, kTVMStr,    kTVMArgInt, kTVMArgInt,
                               kTVMArgInt,       kTVMArgInt, kTVMArgInt, kTVMArgInt,
                               kTVMArgInt,       kTVMArgInt, kTVMArgInt, kTVMStr};
  int status = TVMCrtCheckArgs("runtime.RPCTimeEvaluator", num_args, type_codes, 12, kTypes);
  (void)resource_handle;
  if (status != 0) return status;
  if (args[4].v_int64 < 1 || args[5].v_int64 < 1 || args[5].v_int64 > 100000 ||
      args[6].v_int64 < 0 || args[7].v_int64 < 0) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "runtime.RPCTimeEvaluator: number and repeat (<= 100000) must be >= 1, "
                       "min_repeat_ms and limit_zero_time_iterations >= 0");
  }
  if (args[8].v_int64 != 0) {
    return TVMCrtError(kTvmErrorFunctionCallNotImplemented,
                       "runtime.RPCTimeEvaluator: the CRT cannot sleep; use "
                       "cooldown_interval_ms=0");
  }
  if (args[11].v_str[0] != '\0') {
    return TVMCrtError(kTvmErrorFunctionCallNotImplemented,
                       "runtime.RPCTimeEvaluator: f_preproc is not supported on the CRT");
  }
  status = TVMModGetFunction(args[0].v_handle, args[1].v_str, 0, &g_time_evaluator.func_to_time);
  if (status != 0) return status;
  g_time_evaluator.number = args[4].v_int64;
  g_time_evaluator.repeat = args[5].v_int64;
  g_time_evaluator.min_repeat_ms = args[6].v_int64;
  g_time_evaluator.limit_zero_time_iterations = args[7].v_int64;
  g_time_evaluator.function_index = (tvm_function_index_t)((g_time_evaluator.function_index + 1) &
                                                           0x7fffu);
  ret_val->v_handle =
      EncodeFunctionHandle(TIME_EVALUATOR_MODULE_INDEX, g_time_evaluator.function_index);
  *ret_type_code = kTVMPackedFuncHandle;
  return 0;
}

/* Time `number` calls of the function; grow `number` until they take min_repeat_ms. */
static int TimeOneRepeat(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_val,
                         int* ret_type_code, double* mean_seconds) {
  double seconds = 0.0, min_seconds = (double)g_time_evaluator.min_repeat_ms / 1000.0;
  int64_t zero_times = 0, j;
  int status;
  do {
    if (seconds > 0.0) {
      /* Aim past min_repeat_ms, growing at least by the golden ratio (as TVM). */
      double a = min_seconds / (seconds / (double)g_time_evaluator.number) + 1;
      double b = (double)g_time_evaluator.number * 1.618;
      double next = a > b ? a : b;
      g_time_evaluator.number = next > 2147483647.0 ? 2147483647 : (int64_t)next;
    }
    status = TVMPlatformBeforeMeasurement();
    if (status == 0) status = TVMPlatformTimerStart();
    for (j = 0; status == 0 && j < g_time_evaluator.number; ++j) {
      status = TVMFuncCall(g_time_evaluator.func_to_time, args, type_codes, num_args, ret_val,
                           ret_type_code);
    }
    if (status != 0) {
      double ignored;
      TVMPlatformTimerStop(&ignored); /* leave the timer stopped for the next measurement */
      return status;
    }
    status = TVMPlatformTimerStop(&seconds);
    if (status == 0) status = TVMPlatformAfterMeasurement();
    if (status != 0) return TVMCrtError(status, "time evaluator: platform timer failed");
    if (seconds == 0.0) ++zero_times;
  } while (seconds < min_seconds && zero_times < g_time_evaluator.limit_zero_time_iterations);
  *mean_seconds = seconds / (double)g_time_evaluator.number;
  return 0;
}

/* Call the time evaluator: returns bytes holding `repeat` doubles (mean seconds per call). */
static int RunTimeEvaluator(tvm_function_index_t function_index, TVMValue* args,
                            int* type_codes, int num_args, TVMValue* ret_val,
                            int* ret_type_code) {
  TVMByteArray* result = NULL;
  double* data = NULL;
  int64_t i;
  int status;
  if (function_index != g_time_evaluator.function_index || g_time_evaluator.repeat == 0) {
    return TVMCrtError(kTvmErrorTimeEvaluatorBadHandle,
                       "time evaluator handle is stale (a newer one was created)");
  }
  status = TVMPlatformMemoryAllocate(sizeof(TVMByteArray), kCPU, (void**)&result);
  if (status == 0) {
    status = TVMPlatformMemoryAllocate((size_t)g_time_evaluator.repeat * sizeof(double), kCPU,
                                       (void**)&data);
  }
  if (status != 0) {
    status = TVMCrtError(status, "time evaluator: out of memory for %ld results",
                         (long)g_time_evaluator.repeat);
  }
  /* One untimed call first, as TVM does (it warms caches). */
  if (status == 0) {
    status = TVMFuncCall(g_time_evaluator.func_to_time, args, type_codes, num_args, ret_val,
                         ret_type_code);
  }
  for (i = 0; status == 0 && i < g_time_evaluator.repeat; ++i) {
    status = TimeOneRepeat(args, type_codes, num_args, ret_val, ret_type_code, &data[i]);
  }
  if (status != 0) {
    if (data != NULL) TVMPlatformMemoryFree(data, kCPU);
    if (result != NULL) TVMPlatformMemoryFree(result, kCPU);
    return status;
  }
  result->data = (const char*)data;
  result->size = (size_t)g_time_evaluator.repeat * sizeof(double);
  ret_val->v_handle = result;
  *ret_type_code = kTVMBytes;
  return 0;
}

/* tvm.rpc.server.GetCRTMaxPacketSize(): the largest RPC payload a packet can carry. */
static int GetCRTMaxPacketSize(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_val,
                               int* ret_type_code, void* resource_handle) {
  (void)args, (void)type_codes, (void)num_args, (void)resource_handle;
  /* Framing and session overhead: packet start 2, length 4, session header 3, CRC 2. */
  ret_val->v_int64 = TVM_CRT_MAX_PACKET_SIZE_BYTES - 11;
  *ret_type_code = kTVMArgInt;
  return 0;
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
    err = TVMMutableFuncRegistry_Set(&g_global_registry, "runtime.RPCTimeEvaluator",
                                     &RPCTimeEvaluator, 0);
  }
  if (err == kTvmErrorNoError) {
    err = TVMMutableFuncRegistry_Set(&g_global_registry, "tvm.rpc.server.GetCRTMaxPacketSize",
                                     &GetCRTMaxPacketSize, 0);
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
