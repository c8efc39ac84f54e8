/*
 * page_allocator.h - the CRT's page memory manager (TVM v0.16 interface).
 *
 * The pool is cut into 2^page_size_bytes_log2-byte pages; the manager's own bookkeeping lives
 * at the end of the same pool, so it needs no other memory.
 */
#ifndef TVM_RUNTIME_CRT_PAGE_ALLOCATOR_H_
#define TVM_RUNTIME_CRT_PAGE_ALLOCATOR_H_

#include <stddef.h>
#include <stdint.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct MemoryManagerInterface MemoryManagerInterface;

/* What a memory manager offers the platform. */
struct MemoryManagerInterface {
  /* Allocate num_bytes for dev ({kDLCPU, 0}); kTvmErrorPlatformNoMemory when exhausted. */
  tvm_crt_error_t (*Allocate)(MemoryManagerInterface* interface, size_t num_bytes, DLDevice dev,
                              void** out_ptr);
  /* Free a pointer from Allocate; kTvmErrorFunctionCallInvalidArg for any other pointer. */
  tvm_crt_error_t (*Free)(MemoryManagerInterface* interface, void* ptr, DLDevice dev);
  /* Number of live allocations (tests use it to find leaks). */
  int vleak_size;
};

/*
 * Build a page manager inside memory_pool. *manager points into the pool. Fails with
 * kTvmErrorPlatformNoMemory when the pool cannot hold the bookkeeping and one page, and with
 * kTvmErrorFunctionCallInvalidArg for a page size outside 2^4 .. 2^20 bytes.
 */
tvm_crt_error_t PageMemoryManagerCreate(MemoryManagerInterface** manager, uint8_t* memory_pool,
                                        size_t memory_pool_size_bytes,
                                        size_t page_size_bytes_log2);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_PAGE_ALLOCATOR_H_ */
