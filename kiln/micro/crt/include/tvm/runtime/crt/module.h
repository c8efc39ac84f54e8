/*
 * module.h - CRT modules: a module is a function registry; a system library is the module
 * generated code returns from TVMSystemLibEntryPoint.
 */
#ifndef TVM_RUNTIME_CRT_MODULE_H_
#define TVM_RUNTIME_CRT_MODULE_H_

#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/crt/func_registry.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A module of C functions. */
typedef struct TVMModule {
  const TVMFuncRegistry* registry;
} TVMModule;

/*
 * Register `mod` (kept by pointer) and return its handle. Fails with
 * kTvmErrorFunctionRegistryFull past TVM_CRT_MAX_REGISTERED_MODULES modules.
 */
int TVMModCreateFromCModule(const TVMModule* mod, TVMModuleHandle* out_handle);

/*
 * The system library of the generated code (defined by the codegen of a model built with
 * Runtime("crt", {"system-lib": True})). The CRT carries a weak definition returning NULL, so
 * "runtime.SystemLib" fails with a message instead of a link error when none is linked.
 */
const TVMModule* TVMSystemLibEntryPoint(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_MODULE_H_ */
