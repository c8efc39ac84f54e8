/* The newlib system calls a bare-metal image links against: console writes go to the UART,
 * the heap grows from the end of the extra RAM's used part, everything else fails cleanly.
 * The CRT allocates nothing through malloc; these exist so libc pieces (snprintf) link.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "kiln_board.h"

void kiln_cortex_m_putc(char c); /* board_cortex_m.c */

extern uint8_t _heap_start, _heap_end;
static uint8_t* g_heap_top = &_heap_start;

void* _sbrk(ptrdiff_t increment) {
  if (increment < 0 || (size_t)(&_heap_end - g_heap_top) < (size_t)increment) {
    errno = ENOMEM;
    return (void*)-1;
  }
  uint8_t* previous = g_heap_top;
  g_heap_top += increment;
  return previous;
}

int _write(int fd, const char* data, int n) {
  (void)fd;
  for (int i = 0; i < n; ++i) kiln_cortex_m_putc(data[i]);
  return n;
}

int _read(int fd, char* data, int n) {
  (void)fd;
  (void)data;
  (void)n;
  errno = ENOSYS;
  return -1;
}

int _close(int fd) {
  (void)fd;
  return -1;
}

int _lseek(int fd, int offset, int whence) {
  (void)fd;
  (void)offset;
  (void)whence;
  return -1;
}

int _fstat(int fd, struct stat* st) {
  (void)fd;
  st->st_mode = S_IFCHR;
  return 0;
}

int _isatty(int fd) {
  (void)fd;
  return 1;
}

void _exit(int code) { kiln_board_exit(code); }

int _kill(int pid, int sig) {
  (void)pid;
  (void)sig;
  errno = EINVAL;
  return -1;
}

int _getpid(void) { return 1; }
