/*
 * func_registry.h - the CRT's function registries (TVM v0.16 layout).
 *
 * A registry is a names blob plus a table of packed functions. The names blob is exactly what
 * generated system libraries emit: bytes 0-1 hold the function count (uint16_t, host byte
 * order), then each name NUL-terminated, then one more NUL. funcs[i] belongs to the i-th name.
 */
#ifndef TVM_RUNTIME_CRT_FUNC_REGISTRY_H_
#define TVM_RUNTIME_CRT_FUNC_REGISTRY_H_

#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t tvm_function_index_t;
typedef uint16_t tvm_module_index_t;

/* A read-only (e.g. generated) registry. */
typedef struct TVMFuncRegistry {
  /* Count (2 bytes), then NUL-separated names, then a final NUL. */
  const char* names;
  /* Function pointers, in the order of `names`. */
  const TVMBackendPackedCFunc* funcs;
} TVMFuncRegistry;

/* Number of functions in the registry. */
uint16_t TVMFuncRegistry_GetNumFuncs(const TVMFuncRegistry* reg);

/* Store the function count (only for registries whose names blob is writable). */
int TVMFuncRegistry_SetNumFuncs(const TVMFuncRegistry* reg, const uint16_t num_funcs);

/* The first name in the blob (just past the count). */
const char* TVMFuncRegistry_Get0thFunctionName(const TVMFuncRegistry* reg);

/* Index of `name`, or kTvmErrorFunctionNameNotFound. */
tvm_crt_error_t TVMFuncRegistry_Lookup(const TVMFuncRegistry* reg, const char* name,
                                       tvm_function_index_t* function_index);

/* Function at `index`, or kTvmErrorFunctionIndexInvalid. */
tvm_crt_error_t TVMFuncRegistry_GetByIndex(const TVMFuncRegistry* reg, tvm_function_index_t index,
                                           TVMBackendPackedCFunc* out_func);

/* A registry that grows inside a caller-provided buffer. */
typedef struct TVMMutableFuncRegistry {
  TVMFuncRegistry registry;
  /* Capacity of the function table. */
  size_t max_functions;
  /* Bytes available to the names blob (count, names, final NUL). */
  size_t names_capacity;
} TVMMutableFuncRegistry;

/* Buffer budget per function used to split a buffer between names and the function table. */
#define TVM_AVERAGE_FUNCTION_NAME_STRLEN_BYTES 10
static const size_t kTvmAverageFunctionNameStrlenBytes = TVM_AVERAGE_FUNCTION_NAME_STRLEN_BYTES;
static const size_t kTvmAverageFuncEntrySizeBytes =
    TVM_AVERAGE_FUNCTION_NAME_STRLEN_BYTES + 1 + sizeof(void*);

/*
 * Lay out an empty registry in `buffer` (which must outlive it). Returns
 * kTvmErrorBufferTooSmall when the buffer cannot hold even one function.
 */
tvm_crt_error_t TVMMutableFuncRegistry_Create(TVMMutableFuncRegistry* reg, uint8_t* buffer,
                                              size_t buffer_size_bytes);

/*
 * Add (or, with override != 0, replace) `name`. kTvmErrorFunctionAlreadyDefined if present and
 * not overriding, kTvmErrorFunctionRegistryFull when the table or the names blob is full.
 */
tvm_crt_error_t TVMMutableFuncRegistry_Set(TVMMutableFuncRegistry* reg, const char* name,
                                           TVMBackendPackedCFunc func, int override);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_FUNC_REGISTRY_H_ */
