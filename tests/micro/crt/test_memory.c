/*
 * test_memory.c - the page allocator and the stack allocator, including exhaustion.
 */
#include <stdint.h>
#include <tvm/runtime/crt/page_allocator.h>
#include <tvm/runtime/crt/stack_allocator.h>

#include "crt_test.h"

static const DLDevice kCPU = {kDLCPU, 0};
static uint8_t g_pool[64 * 1024];

static void test_page_alloc_exhaustion_and_reuse(void) {
  MemoryManagerInterface* mm;
  void* ptrs[1024];
  int n = 0, i;
  void* p;
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool, sizeof(g_pool), 8), kTvmErrorNoError);
  /* Fill the pool with one-page blocks until it says no. */
  while (n < 1024 && mm->Allocate(mm, 200, kCPU, &ptrs[n]) == kTvmErrorNoError) {
    EXPECT(((uintptr_t)ptrs[n] & 63) == 0);
    memset(ptrs[n], n & 0xff, 200);
    ++n;
  }
  EXPECT(n > 200 && n < 256); /* 64 KiB of 256-byte pages, minus the bookkeeping */
  EXPECT_EQ(mm->Allocate(mm, 1, kCPU, &p), kTvmErrorPlatformNoMemory);
  EXPECT(p == NULL);
  EXPECT_EQ(mm->vleak_size, n);
  /* No block overlaps another or the bookkeeping: every pattern is intact. */
  for (i = 0; i < n; ++i) {
    EXPECT(((uint8_t*)ptrs[i])[0] == (i & 0xff) && ((uint8_t*)ptrs[i])[199] == (i & 0xff));
  }
  /* A freed block in the middle is reused for a request that fits it. */
  EXPECT_EQ(mm->Free(mm, ptrs[10], kCPU), kTvmErrorNoError);
  EXPECT_EQ(mm->Allocate(mm, 256, kCPU, &p), kTvmErrorNoError);
  EXPECT(p == ptrs[10]);
  /* ... but not for one that needs two pages. */
  EXPECT_EQ(mm->Free(mm, ptrs[10], kCPU), kTvmErrorNoError);
  EXPECT_EQ(mm->Allocate(mm, 257, kCPU, &p), kTvmErrorPlatformNoMemory);
  for (i = 0; i < n; ++i) {
    if (i != 10) EXPECT_EQ(mm->Free(mm, ptrs[i], kCPU), kTvmErrorNoError);
  }
  EXPECT_EQ(mm->vleak_size, 0);
  /* Everything freed: one block as large as all the pages fits again. */
  EXPECT_EQ(mm->Allocate(mm, (size_t)n * 256, kCPU, &p), kTvmErrorNoError);
  EXPECT(p == ptrs[0]);
  EXPECT_EQ(mm->Free(mm, p, kCPU), kTvmErrorNoError);
}

static void test_page_alloc_bad_free_and_sizes(void) {
  MemoryManagerInterface* mm;
  void *a, *b;
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool, sizeof(g_pool), 8), kTvmErrorNoError);
  EXPECT_EQ(mm->Allocate(mm, 1000, kCPU, &a), kTvmErrorNoError);
  EXPECT_EQ(mm->Allocate(mm, 0, kCPU, &b), kTvmErrorNoError); /* zero bytes: one page */
  EXPECT(b == (uint8_t*)a + 1024);
  EXPECT_EQ(mm->Free(mm, (uint8_t*)a + 8, kCPU), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(mm->Free(mm, (uint8_t*)a + 256, kCPU), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(mm->Free(mm, g_pool, kCPU), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(mm->Free(mm, a, kCPU), kTvmErrorNoError);
  EXPECT_EQ(mm->Free(mm, a, kCPU), kTvmErrorFunctionCallInvalidArg); /* double free */
  EXPECT_EQ(mm->Allocate(mm, (size_t)-1, kCPU, &a), kTvmErrorPlatformNoMemory);
  EXPECT_EQ(mm->Allocate(mm, sizeof(g_pool), kCPU, &a), kTvmErrorPlatformNoMemory);
  EXPECT_EQ(mm->Free(mm, b, kCPU), kTvmErrorNoError);
  EXPECT_EQ(mm->vleak_size, 0);
}

static void test_page_alloc_create_limits(void) {
  MemoryManagerInterface* mm;
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool, 64, 8), kTvmErrorPlatformNoMemory);
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool, sizeof(g_pool), 2),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool, sizeof(g_pool), 40),
            kTvmErrorFunctionCallInvalidArg);
  /* An unaligned pool still gives aligned pages. */
  EXPECT_EQ(PageMemoryManagerCreate(&mm, g_pool + 3, sizeof(g_pool) - 3, 4), kTvmErrorNoError);
  {
    void* p;
    EXPECT_EQ(mm->Allocate(mm, 5, kCPU, &p), kTvmErrorNoError);
    EXPECT(((uintptr_t)p & 15) == 0);
    EXPECT(p >= (void*)(g_pool + 3) && (uint8_t*)p + 16 <= g_pool + sizeof(g_pool));
  }
}

static void test_stack_alloc(void) {
  tvm_workspace_t ws;
  void *a, *b, *c;
  EXPECT_EQ(StackMemoryManager_Init(&ws, g_pool + 1, 256), kTvmErrorNoError);
  EXPECT(((uintptr_t)ws.workspace & 15) == 0);
  EXPECT_EQ(ws.workspace_size, 256 - 15);
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, 10, &a), kTvmErrorNoError);
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, 100, &b), kTvmErrorNoError);
  EXPECT(b == (uint8_t*)a + 16);
  EXPECT(((uintptr_t)b & 15) == 0);
  /* 16 + 112 = 128 used of 241: 113 is too much, 112 fits exactly. */
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, 113, &c), kTvmErrorPlatformNoMemory);
  EXPECT(c == NULL);
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, 112, &c), kTvmErrorNoError);
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, 1, &c), kTvmErrorPlatformNoMemory);
  EXPECT_EQ(StackMemoryManager_Allocate(&ws, -1, &c), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(StackMemoryManager_Free(&ws, g_pool),
            kTvmErrorPlatformStackAllocBadFree);
  EXPECT_EQ(StackMemoryManager_Free(&ws, b), kTvmErrorNoError);
  EXPECT(ws.next_alloc == (uint8_t*)b);
  EXPECT_EQ(StackMemoryManager_Free(&ws, b), kTvmErrorPlatformStackAllocBadFree);
  EXPECT_EQ(StackMemoryManager_Free(&ws, a), kTvmErrorNoError);
  EXPECT(ws.next_alloc == ws.workspace);
}

static void test_stack_alloc_lifo_check(void) {
  tvm_workspace_t ws;
  void *a, *b;
  EXPECT_EQ(StackMemoryManager_Init(&ws, g_pool, 1024), kTvmErrorNoError);
  EXPECT_EQ(StackMemoryManager_Allocate_Body(&ws, 12, &a, 1), kTvmErrorNoError);
  EXPECT_EQ(StackMemoryManager_Allocate_Body(&ws, 12, &b, 1), kTvmErrorNoError);
  EXPECT(b == (uint8_t*)a + 16); /* 12 bytes + the 4-byte tag still fit one step */
  /* Freeing the older block first is caught by the tag. */
  EXPECT_EQ(StackMemoryManager_Free_Body(&ws, a, 1), kTvmErrorPlatformStackAllocBadFree);
  EXPECT_EQ(StackMemoryManager_Free_Body(&ws, b, 1), kTvmErrorNoError);
  EXPECT_EQ(StackMemoryManager_Free_Body(&ws, a, 1), kTvmErrorNoError);
  /* 13 bytes + tag need a second step. */
  EXPECT_EQ(StackMemoryManager_Allocate_Body(&ws, 13, &a, 1), kTvmErrorNoError);
  EXPECT(ws.next_alloc == (uint8_t*)a + 32);
}

int main(void) {
  RUN(test_page_alloc_exhaustion_and_reuse);
  RUN(test_page_alloc_bad_free_and_sizes);
  RUN(test_page_alloc_create_limits);
  RUN(test_stack_alloc);
  RUN(test_stack_alloc_lifo_check);
  return g_failures != 0;
}
