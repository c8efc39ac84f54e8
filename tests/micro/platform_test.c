/* C checks of kiln's CRT platform (kiln/micro/board/src/common/platform.c) on the host board:
 * timer state errors, allocation through the CRT allocators until the pool runs dry, the
 * peak-bytes tracking; with KILN_TEST_ABORT, TVMPlatformAbort's exit. Prints "ok" and exits
 * 0, or names the failed check and exits 1. */
#include <stdio.h>
#include <tvm/runtime/crt/error_codes.h>
#include <tvm/runtime/crt/platform.h>

#include "kiln_board.h"
#include "kiln_platform.h"

#define CHECK(cond)                                            \
  do {                                                         \
    if (!(cond)) {                                             \
      printf("check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                \
    }                                                          \
  } while (0)

int main(int argc, char** argv) {
  kiln_board_init(argc, argv);
  CHECK(TVMPlatformInitialize() == kTvmErrorNoError);
  double seconds = -1.0;
  CHECK(TVMPlatformTimerStop(&seconds) == kTvmErrorPlatformTimerBadState);
  CHECK(TVMPlatformTimerStart() == kTvmErrorNoError);
  CHECK(TVMPlatformTimerStart() == kTvmErrorPlatformTimerBadState);
  CHECK(TVMPlatformTimerStop(&seconds) == kTvmErrorNoError);
  CHECK(seconds >= 0.0 && seconds < 1.0);

  DLDevice dev = {kDLCPU, 0};
  void* a = NULL;
  void* b = NULL;
  CHECK(TVMPlatformMemoryAllocate(1000, dev, &a) == kTvmErrorNoError && a != NULL);
  CHECK(TVMPlatformMemoryAllocate(3000, dev, &b) == kTvmErrorNoError && b != NULL);
  CHECK(kiln_platform_heap_peak() == 4000);
  CHECK(TVMPlatformMemoryFree(b, dev) == kTvmErrorNoError);
  CHECK(TVMPlatformMemoryFree(a, dev) == kTvmErrorNoError);
  CHECK(kiln_platform_heap_peak() == 4000);
  /* More than the pool holds: an error code, not a crash. */
  void* big = NULL;
  CHECK(TVMPlatformMemoryAllocate(KILN_WORKSPACE_BYTES + 1, dev, &big) ==
        kTvmErrorPlatformNoMemory);
  /* Fill the pool in 1 KiB pieces until it refuses. */
  int pieces = 0;
  void* piece = NULL;
  while (TVMPlatformMemoryAllocate(1024, dev, &piece) == kTvmErrorNoError) ++pieces;
  CHECK(pieces > 0 && pieces <= KILN_WORKSPACE_BYTES / 1024);

  uint8_t random[16] = {0};
  CHECK(TVMPlatformGenerateRandom(random, sizeof(random)) == kTvmErrorNoError);
  int nonzero = 0;
  for (int i = 0; i < 16; ++i) nonzero += random[i] != 0;
  CHECK(nonzero > 8);
#ifdef KILN_TEST_ABORT
  TVMPlatformAbort(kTvmErrorPlatformNoMemory); /* must exit with KILN_EXIT_ABORT */
#endif
  kiln_board_puts("ok");
  return 0;
}
