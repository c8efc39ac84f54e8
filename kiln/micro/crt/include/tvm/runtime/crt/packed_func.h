/*
 * packed_func.h - a packed function bound to its arguments, as the CRT executors call kernels
 * (TVM v0.16's TVMPackedFunc / TVMArgs).
 */
#ifndef TVM_RUNTIME_CRT_PACKED_FUNC_H_
#define TVM_RUNTIME_CRT_PACKED_FUNC_H_

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/module.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Parse a dtype string ("float32", "int8", "uint16", "bool", "float32x4", "handle").
 * Returns 0 and fills *out, or kTvmErrorFunctionCallInvalidArg (last error set) if malformed.
 */
int TVMParseDLDataType(const char* s, DLDataType* out);

/* TVM's name for the parser: returns {kDLOpaqueHandle, 0, 0} for a malformed string. */
DLDataType String2DLDataType(const char* s);

/* At most TVM_CRT_MAX_ARGS arguments with their type codes. */
typedef struct TVMArgs {
  TVMValue values[TVM_CRT_MAX_ARGS];
  int tcodes[TVM_CRT_MAX_ARGS];
  uint32_t values_count;
} TVMArgs;

/* Copy arguments; more than TVM_CRT_MAX_ARGS is a programming error (TVMPlatformAbort). */
TVMArgs TVMArgs_Create(TVMValue* values, uint32_t* tcodes, uint32_t values_count);

/* A function handle with its arguments and return slot. */
typedef struct TVMPackedFunc {
  char name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  TVMFunctionHandle fexec;
  TVMArgs args;
  TVMArgs ret_value;
  int (*Call)(struct TVMPackedFunc* pf);
  void (*SetArgs)(struct TVMPackedFunc* pf, const struct TVMArgs* args);
} TVMPackedFunc;

/*
 * Bind the global function `name`. A name of TVM_CRT_MAX_STRLEN_FUNCTION_NAME or more
 * characters is refused (kTvmErrorBufferTooSmall, message names the limit), never truncated.
 */
int TVMPackedFunc_InitGlobalFunc(TVMPackedFunc* pf, const char* name, const TVMArgs* args);

/* Bind function `name` of `module` (same name-length rule). */
int TVMPackedFunc_InitModuleFunc(TVMPackedFunc* pf, TVMModuleHandle module, const char* name,
                                 const TVMArgs* args);

/* Call the bound function; its return value lands in pf->ret_value. */
int TVMPackedFunc_Call(TVMPackedFunc* pf);

/* Replace the bound arguments. */
void TVMPackedFunc_SetArgs(TVMPackedFunc* pf, const TVMArgs* args);

/* Argument `index` as a module handle; aborts on a wrong index or type (programming error). */
static inline TVMModuleHandle TVMArgs_AsModuleHandle(const TVMArgs* args, size_t index) {
  if (index >= args->values_count || args->tcodes[index] != kTVMModuleHandle) {
    TVMPlatformAbort(kTvmErrorFunctionCallWrongArgType);
  }
  return args->values[index].v_handle;
}

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_PACKED_FUNC_H_ */
