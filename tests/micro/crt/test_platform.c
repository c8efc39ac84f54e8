/*
 * test_platform.c - a CRT platform for tests and fuzzing: every allocation is its own malloc
 * block (so AddressSanitizer sees the exact bounds of each CRT buffer), with a byte budget to
 * provoke exhaustion and a live count to find leaks. Abort really aborts (a fuzz finding).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <tvm/runtime/crt/logging.h>
#include <tvm/runtime/crt/platform.h>

#include "test_platform.h"

/* A header before each block keeps its size; 16 bytes keep the block 16-byte aligned. */
#define HEADER_BYTES 16

static size_t g_budget = (size_t)64 << 20;
static size_t g_in_use;
static int g_live;

void TestPlatform_SetBudget(size_t bytes) { g_budget = bytes; }
int TestPlatform_LiveAllocations(void) { return g_live; }

void TVMPlatformAbort(tvm_crt_error_t error_code) {
  fprintf(stderr, "TVMPlatformAbort: error 0x%08x\n", (unsigned)error_code);
  abort();
}

size_t TVMPlatformFormatMessage(char* out_buf, size_t out_buf_size_bytes, const char* fmt,
                                va_list args) {
  int n = vsnprintf(out_buf, out_buf_size_bytes, fmt, args);
  if (n < 0) return 0;
  return (size_t)n < out_buf_size_bytes ? (size_t)n : out_buf_size_bytes - 1;
}

void TVMLogf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
}

tvm_crt_error_t TVMPlatformMemoryAllocate(size_t num_bytes, DLDevice dev, void** out_ptr) {
  char* block;
  (void)dev;
  *out_ptr = NULL;
  if (num_bytes > g_budget - g_in_use) return kTvmErrorPlatformNoMemory;
  block = (char*)malloc(HEADER_BYTES + num_bytes);
  if (block == NULL) return kTvmErrorPlatformNoMemory;
  *(size_t*)block = num_bytes;
  g_in_use += num_bytes;
  g_live++;
  *out_ptr = block + HEADER_BYTES;
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformMemoryFree(void* ptr, DLDevice dev) {
  char* block;
  (void)dev;
  if (ptr == NULL) return kTvmErrorFunctionCallInvalidArg;
  block = (char*)ptr - HEADER_BYTES;
  g_in_use -= *(size_t*)block;
  g_live--;
  free(block);
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformTimerStart(void) { return kTvmErrorNoError; }

tvm_crt_error_t TVMPlatformTimerStop(double* elapsed_time_seconds) {
  *elapsed_time_seconds = 0.0;
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformGenerateRandom(uint8_t* buffer, size_t num_bytes) {
  size_t i;
  for (i = 0; i < num_bytes; ++i) buffer[i] = (uint8_t)rand();
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformInitialize(void) { return kTvmErrorNoError; }
