/*
 * platform-template.c - a host implementation of the kiln CRT platform hooks, to copy and adapt
 * for a board: memory from a static buffer through the page allocator, a monotonic-clock
 * timer, messages through vsnprintf, logs to stderr, a small PRNG.
 *
 * Compile with -DTVM_WORKSPACE_SIZE_BYTES=<n> to size the static buffer (default 2 MiB).
 */
#if !defined(_POSIX_C_SOURCE) && !defined(__arm__)
#define _POSIX_C_SOURCE 200112L /* clock_gettime on hosted POSIX systems */
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <tvm/runtime/crt/error_codes.h>
#include <tvm/runtime/crt/logging.h>
#include <tvm/runtime/crt/page_allocator.h>
#include <tvm/runtime/crt/platform.h>

#ifndef TVM_WORKSPACE_SIZE_BYTES
#define TVM_WORKSPACE_SIZE_BYTES (2 * 1024 * 1024)
#endif

/* 256-byte pages, as TVM's host template. */
#define PAGE_SIZE_BYTES_LOG2 8

static uint8_t g_memory_pool[TVM_WORKSPACE_SIZE_BYTES] __attribute__((aligned(64)));
static MemoryManagerInterface* g_memory_manager;

void TVMPlatformAbort(tvm_crt_error_t error_code) {
  fprintf(stderr, "TVMPlatformAbort: error 0x%08x\n", (unsigned)error_code);
  exit(1);
}

size_t TVMPlatformFormatMessage(char* out_buf, size_t out_buf_size_bytes, const char* fmt,
                                va_list args) {
  int n = vsnprintf(out_buf, out_buf_size_bytes, fmt, args);
  if (n < 0) return 0;
  /* vsnprintf reports the untruncated length; report what was written. */
  if ((size_t)n >= out_buf_size_bytes) return out_buf_size_bytes ? out_buf_size_bytes - 1 : 0;
  return (size_t)n;
}

void TVMLogf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vfprintf(stderr, fmt, args);
  va_end(args);
}

tvm_crt_error_t TVMPlatformMemoryAllocate(size_t num_bytes, DLDevice dev, void** out_ptr) {
  if (g_memory_manager == NULL) return kTvmErrorPlatformCheckFailure;
  return g_memory_manager->Allocate(g_memory_manager, num_bytes, dev, out_ptr);
}

tvm_crt_error_t TVMPlatformMemoryFree(void* ptr, DLDevice dev) {
  if (g_memory_manager == NULL) return kTvmErrorPlatformCheckFailure;
  return g_memory_manager->Free(g_memory_manager, ptr, dev);
}

static int g_timer_running;
#if defined(_POSIX_TIMERS) && _POSIX_TIMERS > 0
static struct timespec g_timer_start;
#else
static clock_t g_timer_start;
#endif

tvm_crt_error_t TVMPlatformTimerStart(void) {
  if (g_timer_running) return kTvmErrorPlatformTimerBadState;
#if defined(_POSIX_TIMERS) && _POSIX_TIMERS > 0
  clock_gettime(CLOCK_MONOTONIC, &g_timer_start);
#else
  g_timer_start = clock();
#endif
  g_timer_running = 1;
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformTimerStop(double* elapsed_time_seconds) {
  if (!g_timer_running) return kTvmErrorPlatformTimerBadState;
#if defined(_POSIX_TIMERS) && _POSIX_TIMERS > 0
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  *elapsed_time_seconds = (double)(now.tv_sec - g_timer_start.tv_sec) +
                          (double)(now.tv_nsec - g_timer_start.tv_nsec) * 1e-9;
#else
  *elapsed_time_seconds = (double)(clock() - g_timer_start) / CLOCKS_PER_SEC;
#endif
  g_timer_running = 0;
  return kTvmErrorNoError;
}

/* xorshift32: deterministic unless reseeded, which keeps test runs repeatable. */
static uint32_t g_random_state = 0x2545F491u;

tvm_crt_error_t TVMPlatformGenerateRandom(uint8_t* buffer, size_t num_bytes) {
  size_t i;
  for (i = 0; i < num_bytes; ++i) {
    g_random_state ^= g_random_state << 13;
    g_random_state ^= g_random_state >> 17;
    g_random_state ^= g_random_state << 5;
    buffer[i] = (uint8_t)(g_random_state >> 24);
  }
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformInitialize(void) {
  if (g_memory_manager != NULL) return kTvmErrorPlatformMemoryManagerInitialized;
  return PageMemoryManagerCreate(&g_memory_manager, g_memory_pool, sizeof(g_memory_pool),
                                 PAGE_SIZE_BYTES_LOG2);
}
