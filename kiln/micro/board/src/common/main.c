/* A standalone kiln program: initialize the CRT, read the inputs, run the model once under
 * the platform timer, write the outputs, report ticks and memory on one console line.
 *
 * KILN_REPEAT (default 1) runs the model that many times and reports the ticks of the last
 * run (the first may pay for lazy initialization).
 */
#include <stdio.h>
#include <tvm/runtime/crt/platform.h>

#include "kiln_board.h"
#include "kiln_model.h"
#include "kiln_platform.h"

#ifndef KILN_REPEAT
#define KILN_REPEAT 1
#endif

static int report_error(const char* what, int code, int exit_code) {
  char line[128];
  snprintf(line, sizeof(line), "kiln-error: %s failed (%d)", what, code);
  kiln_board_puts(line);
  return exit_code;
}

int main(int argc, char** argv) {
  kiln_board_init(argc, argv);
  int err = TVMPlatformInitialize();
  if (err != 0) return report_error("TVMPlatformInitialize", err, KILN_EXIT_INIT);
  for (int i = 0; i < kiln_num_inputs; ++i) {
    if (kiln_board_read_input(i, kiln_input_data[i], kiln_input_bytes[i]) != 0) {
      return report_error("reading an input file", i, KILN_EXIT_IO);
    }
  }
  err = kiln_model_init();
  if (err != 0) return report_error("kiln_model_init", err, KILN_EXIT_INIT);
  uint64_t ticks = 0;
  for (int r = 0; r < KILN_REPEAT; ++r) {
    uint64_t start = kiln_board_ticks();
    err = kiln_model_run();
    ticks = kiln_board_ticks() - start;
    if (err != 0) return report_error("the model's run", err, KILN_EXIT_RUN);
  }
  err = kiln_model_finish();
  if (err != 0) return report_error("reading the outputs", err, KILN_EXIT_RUN);
  for (int i = 0; i < kiln_num_outputs; ++i) {
    if (kiln_board_write_output(i, kiln_output_data[i], kiln_output_bytes[i]) != 0) {
      return report_error("writing an output file", i, KILN_EXIT_IO);
    }
  }
  /* newlib-nano's printf has no %llu: print 64-bit ticks as two 32-bit halves. */
  char line[200];
  snprintf(line, sizeof(line),
           "kiln-result status=0 ticks_hi=%lu ticks_lo=%lu ticks_per_second=%lu "
           "stack_bytes=%lu heap_peak_bytes=%lu",
           (unsigned long)(ticks >> 32), (unsigned long)(ticks & 0xFFFFFFFFu),
           (unsigned long)kiln_board_ticks_per_second(),
           (unsigned long)kiln_board_stack_used(),
           (unsigned long)kiln_platform_heap_peak());
  kiln_board_puts(line);
  return KILN_EXIT_OK;
}
