/* kiln_board.h on the MPS2 Cortex-M boards under QEMU: CMSDK UART0 console, semihosting
 * files and exit, SysTick ticks.
 *
 * SysTick counts the 25 MHz processor clock (CLKSOURCE = 1; QEMU's MPS2 reference clock,
 * CLKSOURCE = 0, is 1 MHz). Under `qemu -icount shift=0` one instruction is one virtual
 * nanosecond, so ticks x 40 is the exact instruction count (QEMU has no DWT cycle counter).
 * The 24-bit counter wraps every 2^24 ticks; a wrap interrupt extends it to 64 bits (one
 * interrupt per 0.67 s of virtual time, negligible next to a model's run).
 */
#include <stdint.h>
#include <string.h>

#include "kiln_board.h"

/* ---- CMSDK APB UART0 ---- */
#define UART0_BASE 0x40004000u
#define UART_DATA (*(volatile uint32_t*)(UART0_BASE + 0x00u))
#define UART_STATE (*(volatile uint32_t*)(UART0_BASE + 0x04u))
#define UART_CTRL (*(volatile uint32_t*)(UART0_BASE + 0x08u))
#define UART_BAUDDIV (*(volatile uint32_t*)(UART0_BASE + 0x10u))
#define UART_STATE_TXFULL 1u
#define UART_STATE_RXFULL 2u
#define UART_INTSTATUS (*(volatile uint32_t*)(UART0_BASE + 0x0Cu)) /* write 1 to clear */
#define UART_CTRL_TXEN 1u
#define UART_CTRL_RXEN 2u
#define UART_CTRL_RXINTEN 8u
#define UART_INT_RX 2u
/* MPS2 (AN385/AN386/AN500 in QEMU): UART0's RX interrupt is external IRQ 0, TX is IRQ 1. */
#define UART0_RX_IRQ 0u
#define NVIC_ISER0 (*(volatile uint32_t*)0xE000E100u)
#define NVIC_ICPR0 (*(volatile uint32_t*)0xE000E280u)

/* ---- SysTick ---- */
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define SYST_ENABLE 1u
#define SYST_TICKINT 2u
#define SYST_CLKSOURCE_CPU 4u
/* Ticks per SysTick wrap: the 24-bit maximum; tests set a small one to exercise the wraps. */
#ifndef KILN_SYSTICK_PERIOD
#define KILN_SYSTICK_PERIOD 0x1000000u
#endif
#define SYST_PERIOD ((uint32_t)(KILN_SYSTICK_PERIOD))
#define MPS2_CPUCLK_HZ 25000000u

/* ---- semihosting (ARM "Semihosting for AArch32 and AArch64", v2) ---- */
#define SYS_OPEN 0x01
#define SYS_CLOSE 0x02
#define SYS_WRITE 0x05
#define SYS_READ 0x06
#define SYS_FLEN 0x0C
#define SYS_EXIT_EXTENDED 0x20
#define ADP_STOPPED_APPLICATION_EXIT 0x20026
#define OPEN_MODE_RB 1
#define OPEN_MODE_WB 5

static volatile uint32_t g_systick_wraps;

static int semihost(int op, void* arg) {
  register int r0 __asm__("r0") = op;
  register void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void kiln_cortex_m_putc(char c);

void kiln_cortex_m_putc(char c) {
  while (UART_STATE & UART_STATE_TXFULL) {
  }
  UART_DATA = (uint32_t)(unsigned char)c;
}

/* The RX interrupt only wakes the core: its handler acknowledges it. */
void UART0_RX_Handler(void);
void UART0_RX_Handler(void) { UART_INTSTATUS = UART_INT_RX; }

/* Sleep until the UART holds a received byte: the RX interrupt wakes WFI. PRIMASK closes
 * the window between the check and WFI (a byte arriving there leaves the interrupt pending,
 * which ends WFI at once, and its handler runs after cpsie). Polling instead kept a host
 * core busy while the link is idle. */
static void wait_for_rx(void) {
  while (!(UART_STATE & UART_STATE_RXFULL)) {
    __asm__ volatile("cpsid i" ::: "memory");
    if (!(UART_STATE & UART_STATE_RXFULL)) __asm__ volatile("wfi" ::: "memory");
    __asm__ volatile("cpsie i" ::: "memory");
  }
}

size_t kiln_board_receive(uint8_t* buf, size_t max) {
  size_t n = 0;
  wait_for_rx();
  while (n < max && (UART_STATE & UART_STATE_RXFULL)) buf[n++] = (uint8_t)UART_DATA;
  return n;
}

void kiln_board_send(const uint8_t* data, size_t nbytes) {
  for (size_t i = 0; i < nbytes; ++i) kiln_cortex_m_putc((char)data[i]);
}

int kiln_board_read_console(void* buf, size_t nbytes) {
  uint8_t* out = (uint8_t*)buf;
  for (size_t i = 0; i < nbytes; ++i) {
    wait_for_rx();
    out[i] = (uint8_t)UART_DATA;
  }
  return 0;
}

void kiln_board_puts(const char* text) {
  for (; *text; ++text) kiln_cortex_m_putc(*text);
  kiln_cortex_m_putc('\n');
}

void kiln_board_init(int argc, char** argv) {
  (void)argc;
  (void)argv;
  UART_BAUDDIV = 16; /* QEMU rejects divisors below 16 */
  UART_CTRL = UART_CTRL_TXEN | UART_CTRL_RXEN | UART_CTRL_RXINTEN;
  /* QEMU 7.2: enabling RX does not wake its main loop; one read of DATA does. */
  (void)UART_DATA;
  UART_INTSTATUS = UART_INT_RX;
  NVIC_ICPR0 = 1u << UART0_RX_IRQ;
  NVIC_ISER0 = 1u << UART0_RX_IRQ;
  SYST_RVR = SYST_PERIOD - 1u;
  SYST_CVR = 0;
  SYST_CSR = SYST_ENABLE | SYST_TICKINT | SYST_CLKSOURCE_CPU;
  /* The counter reads 0 until its first reload; wait for it so ticks never go backwards. */
  while (SYST_CVR == 0) {
  }
}

void SysTick_Handler(void) { g_systick_wraps = g_systick_wraps + 1u; }

uint64_t kiln_board_ticks(void) {
  uint32_t wraps, value;
  do {
    wraps = g_systick_wraps;
    value = SYST_CVR;
  } while (wraps != g_systick_wraps);
  return (uint64_t)wraps * SYST_PERIOD + (SYST_PERIOD - 1u - value);
}

uint64_t kiln_board_ticks_per_second(void) { return MPS2_CPUCLK_HZ; }

static int open_file(const char* prefix, int index, int mode) {
  char name[32];
  size_t n = strlen(prefix);
  memcpy(name, prefix, n);
  /* index < 1000 is checked by the caller's generated tables; print it in decimal. */
  char digits[4];
  int nd = 0;
  do {
    digits[nd++] = (char)('0' + index % 10);
    index /= 10;
  } while (index > 0 && nd < 3);
  while (nd > 0) name[n++] = digits[--nd];
  memcpy(name + n, ".bin", 5);
  uint32_t args[3] = {(uint32_t)(uintptr_t)name, (uint32_t)mode, (uint32_t)strlen(name)};
  return semihost(SYS_OPEN, args);
}

int kiln_board_read_input(int index, void* buf, size_t nbytes) {
  int fd = open_file("input_", index, OPEN_MODE_RB);
  if (fd < 0) return -1;
  uint32_t flen_args[1] = {(uint32_t)fd};
  int size = semihost(SYS_FLEN, flen_args);
  uint32_t read_args[3] = {(uint32_t)fd, (uint32_t)(uintptr_t)buf, (uint32_t)nbytes};
  int not_read = (size == (int)nbytes) ? semihost(SYS_READ, read_args) : -1;
  semihost(SYS_CLOSE, flen_args);
  return (size == (int)nbytes && not_read == 0) ? 0 : -1;
}

int kiln_board_write_output(int index, const void* buf, size_t nbytes) {
  int fd = open_file("output_", index, OPEN_MODE_WB);
  if (fd < 0) return -1;
  uint32_t write_args[3] = {(uint32_t)fd, (uint32_t)(uintptr_t)buf, (uint32_t)nbytes};
  int not_written = semihost(SYS_WRITE, write_args);
  uint32_t close_args[1] = {(uint32_t)fd};
  semihost(SYS_CLOSE, close_args);
  return not_written == 0 ? 0 : -1;
}

void kiln_board_exit(int code) {
  uint32_t args[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
  for (;;) semihost(SYS_EXIT_EXTENDED, args);
}
