/* kiln_board.h on the host: files in a directory (argv[1], default "."), stdin/stdout
 * console, CLOCK_MONOTONIC ticks in nanoseconds. Exit codes are the process's exit status.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "kiln_board.h"

static const char* g_io_dir = ".";

void kiln_board_init(int argc, char** argv) {
  if (argc > 1) g_io_dir = argv[1];
}

static FILE* open_file(const char* prefix, int index, const char* mode) {
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/%s%d.bin", g_io_dir, prefix, index);
  if (n < 0 || (size_t)n >= sizeof(path)) return NULL;
  return fopen(path, mode);
}

int kiln_board_read_input(int index, void* buf, size_t nbytes) {
  FILE* f = open_file("input_", index, "rb");
  if (f == NULL) return -1;
  size_t got = fread(buf, 1, nbytes, f);
  int extra = fgetc(f); /* the file must hold exactly nbytes */
  fclose(f);
  return (got == nbytes && extra == EOF) ? 0 : -1;
}

int kiln_board_write_output(int index, const void* buf, size_t nbytes) {
  FILE* f = open_file("output_", index, "wb");
  if (f == NULL) return -1;
  size_t put = fwrite(buf, 1, nbytes, f);
  return (fclose(f) == 0 && put == nbytes) ? 0 : -1;
}

int kiln_board_read_console(void* buf, size_t nbytes) {
  return fread(buf, 1, nbytes, stdin) == nbytes ? 0 : -1;
}

void kiln_board_puts(const char* text) {
  fputs(text, stdout);
  fputc('\n', stdout);
  fflush(stdout);
}

uint64_t kiln_board_ticks(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t kiln_board_ticks_per_second(void) { return 1000000000u; }

uint32_t kiln_board_stack_used(void) { return 0; }

void kiln_board_exit(int code) {
  fflush(stdout);
  exit(code);
}

size_t kiln_board_receive(uint8_t* buf, size_t max) {
  ssize_t n;
  fflush(stdout); /* console lines written with stdio go out before we wait */
  do {
    n = read(0, buf, max);
  } while (n < 0);
  return (size_t)n;
}

void kiln_board_send(const uint8_t* data, size_t nbytes) {
  fflush(stdout);
  while (nbytes > 0) {
    ssize_t n = write(1, data, nbytes);
    if (n <= 0) kiln_board_exit(KILN_EXIT_IO); /* the host went away */
    data += n;
    nbytes -= (size_t)n;
  }
}
