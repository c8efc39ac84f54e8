/* The CRT platform hooks (tvm/runtime/crt/platform.h) for every kiln board, written against
 * kiln_board.h.
 *
 * Memory: AOT programs (KILN_ALLOCATOR_STACK) get TVM's stack allocator over a static
 * workspace, since AOT frees in LIFO order; graph-executor programs get the page allocator.
 * Either way the pool is KILN_WORKSPACE_BYTES of .bss.noinit (the extra RAM on Cortex-M), and
 * the peak of live requested bytes is tracked for the result line.
 * Timer: the board's tick counter. Abort: a console line, then exit KILN_EXIT_ABORT.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <tvm/runtime/crt/error_codes.h>
#include <tvm/runtime/crt/platform.h>

#include "kiln_board.h"
#include "kiln_platform.h"

#ifdef KILN_ALLOCATOR_STACK
#include <tvm/runtime/crt/stack_allocator.h>
static tvm_workspace_t g_workspace;
#else
#include <tvm/runtime/crt/page_allocator.h>
static MemoryManagerInterface* g_memory_manager;
#endif

#ifndef KILN_WORKSPACE_BYTES
#define KILN_WORKSPACE_BYTES (256 * 1024)
#endif

static uint8_t g_workspace_pool[KILN_WORKSPACE_BYTES]
    __attribute__((aligned(16), section(".bss.noinit.kiln_workspace")));

/* Live allocations by pointer, to know what a Free releases (a few dozen at most). */
#define KILN_MAX_LIVE_ALLOCATIONS 256
static void* g_live_ptr[KILN_MAX_LIVE_ALLOCATIONS];
static size_t g_live_size[KILN_MAX_LIVE_ALLOCATIONS];
static size_t g_live_bytes, g_peak_bytes;

static int g_timer_running;
static uint64_t g_timer_start;

size_t kiln_platform_heap_peak(void) { return g_peak_bytes; }

void TVMPlatformAbort(tvm_crt_error_t code) {
  char line[96];
  snprintf(line, sizeof(line), "kiln-abort: TVMPlatformAbort(0x%lx)", (unsigned long)code);
  kiln_board_puts(line);
  kiln_board_exit(KILN_EXIT_ABORT);
}

size_t TVMPlatformFormatMessage(char* out_buf, size_t out_buf_size_bytes, const char* fmt,
                                va_list args) {
  int n = vsnprintf(out_buf, out_buf_size_bytes, fmt, args);
  if (n < 0) return 0;
  return (size_t)n < out_buf_size_bytes ? (size_t)n : out_buf_size_bytes - 1;
}

tvm_crt_error_t TVMPlatformInitialize(void) {
  g_live_bytes = g_peak_bytes = 0;
#ifdef KILN_ALLOCATOR_STACK
  return StackMemoryManager_Init(&g_workspace, g_workspace_pool, sizeof(g_workspace_pool));
#else
  return PageMemoryManagerCreate(&g_memory_manager, g_workspace_pool, sizeof(g_workspace_pool),
                                 KILN_PAGE_SIZE_LOG2);
#endif
}

tvm_crt_error_t TVMPlatformMemoryAllocate(size_t num_bytes, DLDevice dev, void** out_ptr) {
  int slot = 0;
  while (slot < KILN_MAX_LIVE_ALLOCATIONS && g_live_ptr[slot] != NULL) ++slot;
  if (slot == KILN_MAX_LIVE_ALLOCATIONS) return kTvmErrorPlatformNoMemory;
#ifdef KILN_ALLOCATOR_STACK
  (void)dev;
  tvm_crt_error_t err = StackMemoryManager_Allocate(&g_workspace, (int32_t)num_bytes, out_ptr);
#else
  tvm_crt_error_t err = g_memory_manager->Allocate(g_memory_manager, num_bytes, dev, out_ptr);
#endif
  if (err != kTvmErrorNoError) return err;
  g_live_ptr[slot] = *out_ptr;
  g_live_size[slot] = num_bytes;
  g_live_bytes += num_bytes;
  if (g_live_bytes > g_peak_bytes) g_peak_bytes = g_live_bytes;
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformMemoryFree(void* ptr, DLDevice dev) {
  for (int slot = 0; slot < KILN_MAX_LIVE_ALLOCATIONS; ++slot) {
    if (ptr != NULL && g_live_ptr[slot] == ptr) {
      g_live_ptr[slot] = NULL;
      g_live_bytes -= g_live_size[slot];
      break;
    }
  }
#ifdef KILN_ALLOCATOR_STACK
  (void)dev;
  return StackMemoryManager_Free(&g_workspace, ptr);
#else
  return g_memory_manager->Free(g_memory_manager, ptr, dev);
#endif
}

tvm_crt_error_t TVMPlatformTimerStart(void) {
  if (g_timer_running) return kTvmErrorPlatformTimerBadState;
  g_timer_running = 1;
  g_timer_start = kiln_board_ticks();
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformTimerStop(double* elapsed_time_seconds) {
  if (!g_timer_running) return kTvmErrorPlatformTimerBadState;
  uint64_t ticks = kiln_board_ticks() - g_timer_start;
  g_timer_running = 0;
  *elapsed_time_seconds = (double)ticks / (double)kiln_board_ticks_per_second();
  return kTvmErrorNoError;
}

tvm_crt_error_t TVMPlatformBeforeMeasurement(void) { return kTvmErrorNoError; }

tvm_crt_error_t TVMPlatformAfterMeasurement(void) { return kTvmErrorNoError; }

/* xorshift32, stirred with the board timer at each call: the only entropy a bare board has.
 * On the host the clock differs per run; under QEMU -icount the virtual clock of an idle
 * core follows real time, so a session nonce drawn when the host's first bytes arrive differs
 * per run. Not for cryptography. */
tvm_crt_error_t TVMPlatformGenerateRandom(uint8_t* buffer, size_t num_bytes) {
  static uint32_t state = 0x2545F491u;
  uint64_t ticks = kiln_board_ticks();
  state ^= (uint32_t)(ticks ^ (ticks >> 32)) * 2654435761u; /* Knuth's multiplicative hash */
  if (state == 0) state = 0x2545F491u;                       /* xorshift's one fixed point */
  for (size_t i = 0; i < num_bytes; ++i) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    buffer[i] = (uint8_t)state;
  }
  return kTvmErrorNoError;
}
