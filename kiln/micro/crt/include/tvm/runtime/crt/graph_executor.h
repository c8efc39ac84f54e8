/*
 * graph_executor.h - the C graph executor: runs a graph JSON (as kiln's / TVM's graph executor
 * codegen writes it) over the kernels of a CRT module, with storage from the platform memory
 * manager or linked into the module (`_lookup_linked_param`).
 *
 * Every function that reads outside data (graph JSON, params blob, tensors from the caller)
 * validates it and returns an error code with the reason in TVMGetLastError(); none of them
 * aborts or reads out of bounds on bad input.
 */
#ifndef TVM_RUNTIME_CRT_GRAPH_EXECUTOR_H_
#define TVM_RUNTIME_CRT_GRAPH_EXECUTOR_H_

#include <dlpack/dlpack.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/packed_func.h>

#ifdef __cplusplus
extern "C" {
#endif

struct TVMModule;

/* The attributes of a "tvm_op" node. */
typedef struct TVMOpParam {
  char func_name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  uint32_t num_inputs;
  uint32_t num_outputs;
  uint32_t flatten_data;
} TVMOpParam;

typedef struct TVMGraphExecutor TVMGraphExecutor;

/*
 * Parse `sym_json` (NUL-terminated), allocate storage and bind each op to its kernel in
 * `module_handle`. devices[0] must be {kDLCPU, 0}. On failure *executor is NULL, nothing is
 * leaked and the error names the problem (JSON position, missing kernel, name too long ...).
 */
int TVMGraphExecutor_Create(const char* sym_json, TVMModuleHandle module_handle,
                            const DLDevice* devices, TVMGraphExecutor** executor);

/* Index of input `name` among the graph's arg nodes, or -1. */
int TVMGraphExecutor_GetInputIndex(TVMGraphExecutor* executor, const char* name);

/* Number of graph inputs (arg nodes: data inputs and parameters). */
int TVMGraphExecutor_GetNumInputs(TVMGraphExecutor* executor);

/*
 * Bind input `name` to data_in's memory (no copy, as TVM's CRT: data_in must stay alive while
 * the executor runs). Returns kTvmErrorExecutorModuleNoSuchInput for an unknown name and
 * kTvmErrorFunctionCallInvalidArg for a shape or dtype that does not match the graph.
 */
int TVMGraphExecutor_SetInput(TVMGraphExecutor* executor, const char* name, DLTensor* data_in);

/* Number of graph outputs. */
int TVMGraphExecutor_GetNumOutputs(TVMGraphExecutor* executor);

/* Copy output `index` into `out` (same dtype and element count). */
int TVMGraphExecutor_GetOutput(TVMGraphExecutor* executor, const int32_t index, DLTensor* out);

/*
 * Load a params blob (TVM's format, as tvm.runtime.save_param_dict writes) of param_size
 * bytes, copying every named array into the input of that name. Validates magic, every count
 * and length against param_size, names, shapes and dtypes.
 */
int TVMGraphExecutor_LoadParams(TVMGraphExecutor* executor, const char* param_blob,
                                const uint32_t param_size);

/* Run every op in order; returns the first failing kernel's code (message set). */
int TVMGraphExecutor_Run(TVMGraphExecutor* executor);

/* Free everything the executor allocated and set *executor to NULL. */
int TVMGraphExecutor_Release(TVMGraphExecutor** executor);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_GRAPH_EXECUTOR_H_ */
