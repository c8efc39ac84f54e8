/*
 * aot_executor.h - the metadata-driven C AOT executor: finds tvmgen_<mod>_get_c_metadata in a
 * CRT module, allocates the inputs, outputs and workspace pools it describes, and calls
 * <mod_name>_run with them as DLTensor arguments (TVM v0.16 interface).
 */
#ifndef TVM_RUNTIME_CRT_AOT_EXECUTOR_H_
#define TVM_RUNTIME_CRT_AOT_EXECUTOR_H_

#include <dlpack/dlpack.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/metadata_types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct TVMMetadata TVMMetadata;

typedef struct TVMAotExecutor {
  /* The model description from the generated code. */
  const TVMMetadata* metadata;
  /* The module holding the generated code. */
  TVMModuleHandle module_handle;
  DLDevice device;
  /* Inputs, then outputs, then workspace pools. */
  TVMNDArray* args;
  int64_t num_args;
} TVMAotExecutor;

/*
 * Create an executor for model `module_name` ("default" for tvmgen_default_*). Fails with a
 * message when the metadata function is missing, the metadata is inconsistent (negative
 * counts, too many arguments, bad shapes) or memory runs out; *executor is then NULL.
 */
int TVMAotExecutor_Create(TVMModuleHandle module_handle, const DLDevice device,
                          TVMAotExecutor** executor, const char* module_name);

/* Free the executor and its arrays. */
int TVMAotExecutor_Release(TVMAotExecutor* executor, const DLDevice device);

int TVMAotExecutor_GetNumInputs(TVMAotExecutor* executor);
int TVMAotExecutor_GetNumOutputs(TVMAotExecutor* executor);

/* Index of input `name`, or -1. */
int TVMAotExecutor_GetInputIndex(TVMAotExecutor* executor, const char* name);

/* Name of input `index`; kTvmErrorFunctionCallInvalidArg for an index out of range. */
int TVMAotExecutor_GetInputName(TVMAotExecutor* executor, int index, const char** name);

/* Run the model once; returns the generated code's error (message set). */
int TVMAotExecutor_Run(TVMAotExecutor* executor);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_AOT_EXECUTOR_H_ */
