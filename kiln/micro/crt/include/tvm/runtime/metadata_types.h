/*
 * The AOT metadata structs (TVM v0.16's include/tvm/runtime/metadata_types.h, same layout):
 * generated AOT code describes its inputs, outputs and pools with them, and returns a
 * pointer to its TVMMetadata from `get_c_metadata` (C++ runtime) or
 * `tvmgen_<mod>_get_c_metadata` (CRT). kiln's host AOT executor reads them through ctypes.
 */
#ifndef TVM_RUNTIME_METADATA_TYPES_H_
#define TVM_RUNTIME_METADATA_TYPES_H_

#include <inttypes.h>
#include <tvm/runtime/c_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct TVMMetadata {
  int64_t version;                               /* TVM_METADATA_VERSION, 1 */
  const struct TVMTensorInfo* inputs;            /* the first num_inputs run arguments */
  int64_t num_inputs;
  const struct TVMTensorInfo* outputs;           /* then num_outputs outputs */
  int64_t num_outputs;
  const struct TVMTensorInfo* workspace_pools;   /* then the pools the executor provides */
  int64_t num_workspace_pools;
  const struct TVMConstantInfo* constant_pools;
  int64_t num_constant_pools;
  const char* mod_name;                          /* "tvmgen_<mod_name>" */
};

struct TVMTensorInfo {
  const char* name;
  const int64_t* shape;
  int64_t num_shape;
  DLDataType dtype;
};

struct TVMConstantInfo {
  const char* name_hint;
  int64_t byte_offset;
  int64_t data_len;
  const void* data_bytes;
};

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* TVM_RUNTIME_METADATA_TYPES_H_ */
