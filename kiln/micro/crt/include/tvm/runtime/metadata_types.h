/*
 * metadata_types.h - the model description generated AOT code hands to the C AOT executor
 * (TVM v0.16's TVMMetadata, TVMTensorInfo, TVMConstantInfo; field order is ABI).
 */
#ifndef TVM_RUNTIME_METADATA_TYPES_H_
#define TVM_RUNTIME_METADATA_TYPES_H_

#include <inttypes.h>
#include <tvm/runtime/c_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Top-level metadata of one compiled model, returned by tvmgen_<mod>_get_c_metadata. */
struct TVMMetadata {
  int64_t version;
  /* Inputs of the run function, in argument order. */
  const struct TVMTensorInfo* inputs;
  int64_t num_inputs;
  /* Outputs, passed after the inputs. */
  const struct TVMTensorInfo* outputs;
  int64_t num_outputs;
  /* Workspace pools the caller provides, passed after the outputs. */
  const struct TVMTensorInfo* workspace_pools;
  int64_t num_workspace_pools;
  /* Constant pools linked into the generated code. */
  const struct TVMConstantInfo* constant_pools;
  int64_t num_constant_pools;
  /* Prefix of the model's symbols, e.g. "tvmgen_default". */
  const char* mod_name;
};

/* Name, shape and element type of one tensor. */
struct TVMTensorInfo {
  const char* name;
  const int64_t* shape;
  int64_t num_shape;
  DLDataType dtype;
};

/* One constant inside a constant pool. */
struct TVMConstantInfo {
  const char* name_hint;
  int64_t byte_offset;
  int64_t data_len;
  const void* data_bytes;
};

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_METADATA_TYPES_H_ */
