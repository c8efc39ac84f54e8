/*
 * func_registry.c - lookups in generated (read-only) function registries and a registry that
 * grows inside a fixed buffer (the global one).
 *
 * A mutable registry puts its function table at the (pointer-aligned) start of the buffer and
 * the names blob after it; the split gives each function kTvmAverageFuncEntrySizeBytes.
 */
#include <string.h>
#include <tvm/runtime/crt/func_registry.h>
#include <tvm/runtime/crt/internal/common/func_registry.h>

uint16_t TVMFuncRegistry_GetNumFuncs(const TVMFuncRegistry* reg) {
  uint16_t num_funcs;
  /* The count is not aligned inside the names blob. */
  memcpy(&num_funcs, reg->names, sizeof(num_funcs));
  return num_funcs;
}

int TVMFuncRegistry_SetNumFuncs(const TVMFuncRegistry* reg, const uint16_t num_funcs) {
  memcpy((char*)reg->names, &num_funcs, sizeof(num_funcs));
  return 0;
}

const char* TVMFuncRegistry_Get0thFunctionName(const TVMFuncRegistry* reg) {
  return reg->names + sizeof(uint16_t);
}

int strcmp_cursor(const char** cursor, const char* name) {
  const char* c = *cursor;
  int diff = 0;
  while (*c != '\0' && *c == *name) {
    ++c;
    ++name;
  }
  diff = (unsigned char)*c - (unsigned char)*name;
  while (*c != '\0') ++c;
  *cursor = c + 1;
  return diff;
}

tvm_crt_error_t TVMFuncRegistry_Lookup(const TVMFuncRegistry* reg, const char* name,
                                       tvm_function_index_t* function_index) {
  uint16_t num_funcs = TVMFuncRegistry_GetNumFuncs(reg);
  const char* cursor = TVMFuncRegistry_Get0thFunctionName(reg);
  uint16_t idx;
  for (idx = 0; idx < num_funcs; ++idx) {
    if (strcmp_cursor(&cursor, name) == 0) {
      *function_index = idx;
      return kTvmErrorNoError;
    }
  }
  return kTvmErrorFunctionNameNotFound;
}

tvm_crt_error_t TVMFuncRegistry_GetByIndex(const TVMFuncRegistry* reg, tvm_function_index_t index,
                                           TVMBackendPackedCFunc* out_func) {
  if (index >= TVMFuncRegistry_GetNumFuncs(reg)) return kTvmErrorFunctionIndexInvalid;
  *out_func = reg->funcs[index];
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMMutableFuncRegistry_Create(TVMMutableFuncRegistry* reg, uint8_t* buffer,
                                              size_t buffer_size_bytes) {
  size_t align = sizeof(TVMBackendPackedCFunc);
  size_t skip = (align - ((uintptr_t)buffer % align)) % align;
  size_t usable;
  size_t max_functions;
  if (buffer_size_bytes < skip) return kTvmErrorBufferTooSmall;
  usable = buffer_size_bytes - skip;
  max_functions = usable / kTvmAverageFuncEntrySizeBytes;
  if (max_functions > 0xffffu) max_functions = 0xffffu;
  /* Room for one function: its pointer, the count, a one-character name and two NULs. */
  if (max_functions == 0 ||
      usable < max_functions * sizeof(TVMBackendPackedCFunc) + sizeof(uint16_t) + 3) {
    return kTvmErrorBufferTooSmall;
  }
  reg->registry.funcs = (const TVMBackendPackedCFunc*)(buffer + skip);
  reg->registry.names =
      (const char*)(buffer + skip + max_functions * sizeof(TVMBackendPackedCFunc));
  reg->max_functions = max_functions;
  reg->names_capacity = usable - max_functions * sizeof(TVMBackendPackedCFunc);
  memset((char*)reg->registry.names, 0, 3); /* count 0, then the end-of-blob NUL */
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMMutableFuncRegistry_Set(TVMMutableFuncRegistry* reg, const char* name,
                                           TVMBackendPackedCFunc func, int override) {
  uint16_t num_funcs = TVMFuncRegistry_GetNumFuncs(&reg->registry);
  const char* cursor = TVMFuncRegistry_Get0thFunctionName(&reg->registry);
  TVMBackendPackedCFunc* funcs = (TVMBackendPackedCFunc*)reg->registry.funcs;
  size_t name_len = strlen(name);
  size_t used;
  uint16_t idx;
  for (idx = 0; idx < num_funcs; ++idx) {
    if (strcmp_cursor(&cursor, name) == 0) {
      if (!override) return kTvmErrorFunctionAlreadyDefined;
      funcs[idx] = func;
      return kTvmErrorNoError;
    }
  }
  /* cursor is now at the end-of-blob NUL. */
  used = (size_t)(cursor - reg->registry.names);
  if (num_funcs >= reg->max_functions || name_len == 0 ||
      used + name_len + 1 >= reg->names_capacity) {
    return name_len == 0 ? kTvmErrorFunctionCallInvalidArg : kTvmErrorFunctionRegistryFull;
  }
  memcpy((char*)cursor, name, name_len + 1);
  ((char*)cursor)[name_len + 1] = '\0';
  funcs[num_funcs] = func;
  TVMFuncRegistry_SetNumFuncs(&reg->registry, (uint16_t)(num_funcs + 1));
  return kTvmErrorNoError;
}
