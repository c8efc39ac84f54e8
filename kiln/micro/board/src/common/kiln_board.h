/* The few services a standalone kiln program needs from its board.
 *
 * Each board (host, Cortex-M under QEMU) implements this header once; the program's main
 * (main.c) and the CRT platform hooks (platform.c) are written against it only, so the same
 * model code runs unchanged on every board.
 *
 * Inputs and outputs are raw little-endian tensor bytes in files named input_<i>.bin and
 * output_<i>.bin: on the host in the directory given as argv[1], on the Cortex-M in QEMU's
 * working directory through semihosting. Programs built for console I/O read the input
 * bytes from the console instead (stdin, or the UART).
 */
#ifndef KILN_BOARD_H_
#define KILN_BOARD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exit codes shared with the Python side (kiln.micro.board.ExitCode). */
#define KILN_EXIT_OK 0
#define KILN_EXIT_IO 2      /* an input file is missing or has the wrong size */
#define KILN_EXIT_RUN 3     /* the model's run function returned non-zero */
#define KILN_EXIT_ABORT 4   /* TVMPlatformAbort */
#define KILN_EXIT_FAULT 5   /* a CPU fault (Cortex-M) */
#define KILN_EXIT_INIT 6    /* runtime or executor initialization failed */

/* Bring the board up (clocks, UART, FPU are done by the startup code). */
void kiln_board_init(int argc, char** argv);

/* Read exactly `nbytes` of input `index` into `buf`; 0 on success. */
int kiln_board_read_input(int index, void* buf, size_t nbytes);

/* Write `nbytes` of output `index`; 0 on success. */
int kiln_board_write_output(int index, const void* buf, size_t nbytes);

/* Read exactly `nbytes` from the console's input (stdin or the UART); 0 on success. */
int kiln_board_read_console(void* buf, size_t nbytes);

/* Write a line of text to the board's console (stdout or the UART). */
void kiln_board_puts(const char* text);

/* Receive what the host sent over the console link (stdin, or the UART) as a byte stream:
 * waits for at least one byte, returns how many were stored (at most `max`), 0 once the link
 * is closed. For the RPC server (rpc_main.c). */
size_t kiln_board_receive(uint8_t* buf, size_t max);

/* Send raw bytes over the console link (no newline added). */
void kiln_board_send(const uint8_t* data, size_t nbytes);

/* A free-running tick counter and its rate. */
uint64_t kiln_board_ticks(void);
uint64_t kiln_board_ticks_per_second(void);

/* Bytes of stack used so far (the painted-stack high-water mark); 0 where unknown. */
uint32_t kiln_board_stack_used(void);

/* Stop the program with `code` as the process (or QEMU) exit status. */
void kiln_board_exit(int code) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#endif /* KILN_BOARD_H_ */
