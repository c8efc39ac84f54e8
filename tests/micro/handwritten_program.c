/* A hand-written board program (no kiln, no CRT): y = 2 * x + 1 over KILN_N floats, then a
 * busy loop of exactly 2 * KILN_LOOPS + a few instructions timed by the board's ticks. With
 * KILN_ABORT set it exits with KILN_EXIT_ABORT instead; with KILN_CRASH it traps. */
#include <stdio.h>

#include "kiln_board.h"

static float x[KILN_N], y[KILN_N];

static void count_down(unsigned n) {
  /* Two instructions per iteration on Thumb-2 (subs + bne); one on the host is fine too. */
#if defined(__arm__)
  __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
#else
  for (volatile unsigned i = n; i > 0; --i) {
  }
#endif
}

int main(int argc, char** argv) {
  kiln_board_init(argc, argv);
#ifdef KILN_CRASH
  __builtin_trap(); /* an undefined instruction: SIGILL on the host, a fault on the Cortex-M */
#endif
  if (KILN_ABORT) {
    kiln_board_puts("kiln-abort: requested");
    kiln_board_exit(KILN_EXIT_ABORT);
  }
  if (kiln_board_read_input(0, x, sizeof(x)) != 0) return KILN_EXIT_IO;
  uint64_t start = kiln_board_ticks();
  count_down(KILN_LOOPS);
  uint64_t ticks = kiln_board_ticks() - start;
  for (int i = 0; i < KILN_N; ++i) y[i] = 2.0f * x[i] + 1.0f;
  if (kiln_board_write_output(0, y, sizeof(y)) != 0) return KILN_EXIT_IO;
  char line[160];
  snprintf(line, sizeof(line), "kiln-result status=0 ticks=%lu ticks_per_second=%lu "
           "stack_bytes=%lu", (unsigned long)ticks,
           (unsigned long)kiln_board_ticks_per_second(),
           (unsigned long)kiln_board_stack_used());
  kiln_board_puts(line);
  return KILN_EXIT_OK;
}
