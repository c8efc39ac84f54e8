/*
 * crt.h - start the kiln C runtime.
 */
#ifndef TVM_RUNTIME_CRT_CRT_H_
#define TVM_RUNTIME_CRT_CRT_H_

#include <inttypes.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Create the global function registry (TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES from
 * TVMPlatformMemoryAllocate) and register the runtime's own functions ("runtime.SystemLib",
 * "tvm.rpc.server.ModuleGetFunction", "runtime.RPCTimeEvaluator",
 * "tvm.rpc.server.GetCRTMaxPacketSize", "tvm.contrib.random.random_fill"). Call once, after
 * TVMPlatformInitialize; a second call returns kTvmErrorPlatformMemoryManagerInitialized.
 */
tvm_crt_error_t TVMInitializeRuntime(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_CRT_H_ */
