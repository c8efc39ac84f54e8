/*
 * stack_allocator.h - the CRT's LIFO workspace manager for AOT (TVM v0.16 interface).
 *
 * Allocations are carved from the front of one buffer in TVM_RUNTIME_ALLOC_ALIGNMENT_BYTES
 * steps and must be freed in reverse order. With TVM_CRT_STACK_ALLOCATOR_ENABLE_LIFO_CHECK
 * (crt_config.h) every block carries a tag that Free verifies.
 */
#ifndef TVM_RUNTIME_CRT_STACK_ALLOCATOR_H_
#define TVM_RUNTIME_CRT_STACK_ALLOCATOR_H_

#include <stddef.h>
#include <stdint.h>

#include "crt_config.h"
#include "error_codes.h"

#define STACK_ALLOCATOR_TAG 0xabcd1234
#define STACK_ALLOCATOR_TAG_SIZE_BYTES 4

#ifndef TVM_RUNTIME_ALLOC_ALIGNMENT_BYTES
#define TVM_RUNTIME_ALLOC_ALIGNMENT_BYTES 16
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint8_t* next_alloc;    /* start of the next block */
  uint8_t* workspace;     /* aligned start of the workspace */
  size_t workspace_size;  /* usable bytes from `workspace` */
} tvm_workspace_t;

/* Use g_aot_memory[0 .. workspace_size) as the workspace (its start is aligned up). */
tvm_crt_error_t StackMemoryManager_Init(tvm_workspace_t* tvm_runtime_workspace,
                                        uint8_t* g_aot_memory, size_t workspace_size);

/* Take nbytes (rounded up to the alignment); kTvmErrorPlatformNoMemory when it does not fit. */
tvm_crt_error_t StackMemoryManager_Allocate(tvm_workspace_t* tvm_runtime_workspace, int32_t nbytes,
                                            void** current_alloc);
tvm_crt_error_t StackMemoryManager_Allocate_Body(tvm_workspace_t* tvm_runtime_workspace,
                                                 int32_t nbytes, void** current_alloc,
                                                 uint8_t do_lifo_check);

/* Give back ptr and everything after it; kTvmErrorPlatformStackAllocBadFree if not LIFO. */
tvm_crt_error_t StackMemoryManager_Free(tvm_workspace_t* tvm_runtime_workspace, void* ptr);
tvm_crt_error_t StackMemoryManager_Free_Body(tvm_workspace_t* tvm_runtime_workspace, void* ptr,
                                             uint8_t do_lifo_check);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_STACK_ALLOCATOR_H_ */
