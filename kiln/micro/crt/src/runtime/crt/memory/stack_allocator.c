/*
 * stack_allocator.c - the CRT's LIFO workspace manager (used with the AOT executor).
 *
 * With the LIFO check each block ends in a 4-byte tag (block size ^ STACK_ALLOCATOR_TAG), so
 * Free can tell whether ptr starts the most recent block.
 */
#include <tvm/runtime/crt/stack_allocator.h>

static const uintptr_t kAlign = TVM_RUNTIME_ALLOC_ALIGNMENT_BYTES;

tvm_crt_error_t StackMemoryManager_Init(tvm_workspace_t* tvm_runtime_workspace,
                                        uint8_t* g_aot_memory, size_t workspace_size) {
  uintptr_t start = (uintptr_t)g_aot_memory;
  uintptr_t aligned = (start + kAlign - 1) & ~(kAlign - 1);
  size_t skip = (size_t)(aligned - start);
  tvm_runtime_workspace->workspace = (uint8_t*)aligned;
  tvm_runtime_workspace->next_alloc = (uint8_t*)aligned;
  tvm_runtime_workspace->workspace_size = workspace_size > skip ? workspace_size - skip : 0;
  return kTvmErrorNoError;
}

tvm_crt_error_t StackMemoryManager_Allocate_Body(tvm_workspace_t* tvm_runtime_workspace,
                                                 int32_t nbytes, void** current_alloc,
                                                 uint8_t do_lifo_check) {
  size_t used = (size_t)(tvm_runtime_workspace->next_alloc - tvm_runtime_workspace->workspace);
  size_t available = tvm_runtime_workspace->workspace_size - used;
  size_t tag = do_lifo_check ? STACK_ALLOCATOR_TAG_SIZE_BYTES : 0;
  size_t total;
  *current_alloc = NULL;
  if (nbytes < 0) return kTvmErrorFunctionCallInvalidArg;
  total = ((size_t)nbytes + tag + kAlign - 1) & ~(size_t)(kAlign - 1);
  if (total > available) return kTvmErrorPlatformNoMemory;
  if (do_lifo_check) {
    uint32_t value = (uint32_t)total ^ STACK_ALLOCATOR_TAG;
    uint8_t* at = tvm_runtime_workspace->next_alloc + total - STACK_ALLOCATOR_TAG_SIZE_BYTES;
    at[0] = (uint8_t)value;
    at[1] = (uint8_t)(value >> 8);
    at[2] = (uint8_t)(value >> 16);
    at[3] = (uint8_t)(value >> 24);
  }
  *current_alloc = tvm_runtime_workspace->next_alloc;
  tvm_runtime_workspace->next_alloc += total;
  return kTvmErrorNoError;
}

tvm_crt_error_t StackMemoryManager_Allocate(tvm_workspace_t* tvm_runtime_workspace, int32_t nbytes,
                                            void** current_alloc) {
#ifdef TVM_CRT_STACK_ALLOCATOR_ENABLE_LIFO_CHECK
  return StackMemoryManager_Allocate_Body(tvm_runtime_workspace, nbytes, current_alloc, 1);
#else
  return StackMemoryManager_Allocate_Body(tvm_runtime_workspace, nbytes, current_alloc, 0);
#endif
}

tvm_crt_error_t StackMemoryManager_Free_Body(tvm_workspace_t* tvm_runtime_workspace, void* ptr,
                                             uint8_t do_lifo_check) {
  uint8_t* p = (uint8_t*)ptr;
  if (p < tvm_runtime_workspace->workspace || p >= tvm_runtime_workspace->next_alloc ||
      ((uintptr_t)p & (kAlign - 1)) != 0) {
    return kTvmErrorPlatformStackAllocBadFree;
  }
  if (do_lifo_check) {
    const uint8_t* at = tvm_runtime_workspace->next_alloc - STACK_ALLOCATOR_TAG_SIZE_BYTES;
    uint32_t value = (uint32_t)at[0] | ((uint32_t)at[1] << 8) | ((uint32_t)at[2] << 16) |
                     ((uint32_t)at[3] << 24);
    uint32_t total = (uint32_t)(tvm_runtime_workspace->next_alloc - p);
    if ((value ^ STACK_ALLOCATOR_TAG) != total) return kTvmErrorPlatformStackAllocBadFree;
  }
  tvm_runtime_workspace->next_alloc = p;
  return kTvmErrorNoError;
}

tvm_crt_error_t StackMemoryManager_Free(tvm_workspace_t* tvm_runtime_workspace, void* ptr) {
#ifdef TVM_CRT_STACK_ALLOCATOR_ENABLE_LIFO_CHECK
  return StackMemoryManager_Free_Body(tvm_runtime_workspace, ptr, 1);
#else
  return StackMemoryManager_Free_Body(tvm_runtime_workspace, ptr, 0);
#endif
}
