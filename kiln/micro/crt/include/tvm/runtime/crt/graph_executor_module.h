/*
 * graph_executor_module.h - expose the C graph executor as the global "tvm.graph_executor.create"
 * (a module with set_input/get_output/run/load_params ...), as TVM's CRT does for RPC.
 */
#ifndef TVM_RUNTIME_CRT_GRAPH_EXECUTOR_MODULE_H_
#define TVM_RUNTIME_CRT_GRAPH_EXECUTOR_MODULE_H_

#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Register "tvm.graph_executor.create" in the global registry. */
tvm_crt_error_t TVMGraphExecutorModule_Register(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_GRAPH_EXECUTOR_MODULE_H_ */
