/*
 * aot_executor_module.h - expose the C AOT executor as the global "tvm.aot_executor.create"
 * (a module with get_input, get_output, run ...), as TVM's CRT does for host-driven AOT.
 */
#ifndef TVM_RUNTIME_CRT_AOT_EXECUTOR_MODULE_H_
#define TVM_RUNTIME_CRT_AOT_EXECUTOR_MODULE_H_

#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Register "tvm.aot_executor.create" in the global registry. */
tvm_crt_error_t TVMAotExecutorModule_Register(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_AOT_EXECUTOR_MODULE_H_ */
