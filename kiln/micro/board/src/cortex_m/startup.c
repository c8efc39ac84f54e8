/* Reset and fault handling for the Cortex-M boards (mps2-an386 M4F, mps2-an500 M7).
 *
 * The vector table sits at address 0 (QEMU starts the core with VTOR = 0). Reset copies
 * .data from its load address, zeroes .bss, paints the stack so the program can report its
 * high-water mark, enables the FPU (before any float instruction, or the core faults), then
 * calls main and exits through semihosting with main's return value.
 */
#include <stdint.h>

#include "kiln_board.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _sstack, _estack;

int main(int argc, char** argv);
void Reset_Handler(void);
void Fault_Handler(void);
void Default_Handler(void);
void SysTick_Handler(void);
void UART0_RX_Handler(void);

#define STACK_PAINT 0xA5A5A5A5u
#define CPACR (*(volatile uint32_t*)0xE000ED88u)

/* 16 system exceptions, then external IRQ 0: UART0 RX on the MPS2 boards. */
__attribute__((section(".isr_vector"), used)) void (*const kiln_vector_table[17])(void) = {
    (void (*)(void))(&_estack),
    Reset_Handler,
    Default_Handler, /* NMI */
    Fault_Handler,   /* HardFault */
    Fault_Handler,   /* MemManage */
    Fault_Handler,   /* BusFault */
    Fault_Handler,   /* UsageFault */
    0, 0, 0, 0,
    Default_Handler, /* SVCall */
    Default_Handler, /* DebugMonitor */
    0,
    Default_Handler, /* PendSV */
    SysTick_Handler,
    UART0_RX_Handler, /* IRQ 0 */
};

/* Not static, and noinline: gcc must not turn these loops into calls that may touch the
 * FPU before CPACR enables it. */
__attribute__((noinline)) static void init_memory(void) {
  uint32_t* src = &_sidata;
  for (uint32_t* dst = &_sdata; dst < &_edata;) *dst++ = *src++;
  for (uint32_t* dst = &_sbss; dst < &_ebss;) *dst++ = 0;
  /* Paint the stack below the current frame (64 bytes of margin for this function). */
  uint32_t* top = (uint32_t*)__builtin_frame_address(0) - 16;
  for (volatile uint32_t* p = &_sstack; p < top;) *p++ = STACK_PAINT;
}

void Reset_Handler(void) {
  init_memory();
  CPACR |= (0xFu << 20); /* CP10 + CP11 full access: the FPU */
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  kiln_board_exit(main(0, 0));
}

/* Bytes of stack the program used so far: the deepest word that lost its paint. */
uint32_t kiln_board_stack_used(void) {
  const uint32_t* p = &_sstack;
  while (p < &_estack && *p == STACK_PAINT) ++p;
  return (uint32_t)((uintptr_t)&_estack - (uintptr_t)p);
}

void Fault_Handler(void) {
  kiln_board_puts("kiln-fault: the CPU took a fault exception");
  kiln_board_exit(KILN_EXIT_FAULT);
}

void Default_Handler(void) {
  kiln_board_puts("kiln-fault: unexpected interrupt");
  kiln_board_exit(KILN_EXIT_FAULT);
}

/* newlib-nano's start files are not linked (-nostartfiles); its libc still wants these. */
void _init(void) {}
void _fini(void) {}
