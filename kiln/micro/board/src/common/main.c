/* A standalone kiln program: initialize the CRT, read the inputs, run the model once under
 * the platform timer, write the outputs, report ticks and memory on one console line.
 *
 * Inputs and outputs travel as files (kiln_board_read_input/write_output: host files or
 * semihosting). With KILN_LINKED_IO the inputs are compiled into the image (kiln_inputs.c);
 * with KILN_CONSOLE_IO the program prints "kiln-ready" and reads the input bytes from the
 * console (stdin, the UART). In both the outputs go to the console as hex lines
 * "kiln-output <index> <byte offset> <hex>", so the program needs no host file access.
 *
 * KILN_REPEAT (default 1) runs the model that many times and reports the ticks of the last
 * run (the first may pay for lazy initialization).
 */
#include <stdio.h>
#include <string.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/platform.h>

#include "kiln_board.h"
#include "kiln_model.h"
#include "kiln_platform.h"

#ifndef KILN_REPEAT
#define KILN_REPEAT 1
#endif

#if defined(KILN_LINKED_IO)
extern const uint8_t* const kiln_linked_inputs[]; /* kiln_inputs.c */

static int load_input(int index) {
  memcpy(kiln_input_data[index], kiln_linked_inputs[index], kiln_input_bytes[index]);
  return 0;
}
#elif defined(KILN_CONSOLE_IO)
static int load_input(int index) {
  /* Bytes that reach a UART before its receiver is on are lost: ask for them. */
  if (index == 0) kiln_board_puts("kiln-ready");
  return kiln_board_read_console(kiln_input_data[index], kiln_input_bytes[index]);
}
#endif

#if defined(KILN_LINKED_IO) || defined(KILN_CONSOLE_IO)
static int store_output(int index) {
  static const char digits[] = "0123456789abcdef";
  const uint8_t* data = (const uint8_t*)kiln_output_data[index];
  for (size_t offset = 0; offset < kiln_output_bytes[index]; offset += 48) {
    char line[160];
    int n = snprintf(line, sizeof(line), "kiln-output %d %lu ", index, (unsigned long)offset);
    for (size_t i = offset; i < kiln_output_bytes[index] && i < offset + 48; ++i) {
      line[n++] = digits[data[i] >> 4];
      line[n++] = digits[data[i] & 15];
    }
    line[n] = '\0';
    kiln_board_puts(line);
  }
  return 0;
}
#else
static int load_input(int index) {
  return kiln_board_read_input(index, kiln_input_data[index], kiln_input_bytes[index]);
}

static int store_output(int index) {
  return kiln_board_write_output(index, kiln_output_data[index], kiln_output_bytes[index]);
}
#endif

/* One console line naming the step, the CRT error code and the runtime's last message. */
static int report_error(const char* what, int code, int exit_code) {
  char line[400];
  const char* message = TVMGetLastError();
  snprintf(line, sizeof(line), "kiln-error: %s failed (%d = 0x%x): %s", what, code,
           (unsigned)code, message != NULL ? message : "");
  kiln_board_puts(line);
  return exit_code;
}

int main(int argc, char** argv) {
  kiln_board_init(argc, argv);
  int err = TVMPlatformInitialize();
  if (err != 0) return report_error("TVMPlatformInitialize", err, KILN_EXIT_INIT);
  err = kiln_model_prepare();
  if (err != 0) return report_error("kiln_model_prepare", err, KILN_EXIT_INIT);
  for (int i = 0; i < kiln_num_inputs; ++i) {
    if (load_input(i) != 0) {
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
    if (store_output(i) != 0) {
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
