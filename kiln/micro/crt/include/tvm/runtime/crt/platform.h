/*
 * platform.h - the hooks a board provides to the kiln C runtime (TVM v0.16's platform API).
 * template/platform-template.c is a host implementation to start from.
 */
#ifndef TVM_RUNTIME_CRT_PLATFORM_H_
#define TVM_RUNTIME_CRT_PLATFORM_H_

#include <stdarg.h>
#include <stddef.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Stop the program after an unrecoverable error (a failed CHECK); never returns. */
#if defined(_MSC_VER)
__declspec(noreturn) void TVMPlatformAbort(tvm_crt_error_t code);
#else
void __attribute__((noreturn)) TVMPlatformAbort(tvm_crt_error_t code);
#endif

/* vsnprintf-like formatting; returns the number of characters written (excluding NUL). */
size_t TVMPlatformFormatMessage(char* out_buf, size_t out_buf_size_bytes, const char* fmt,
                                va_list args);

/* Allocate num_bytes for `dev` ({kDLCPU, 0}); kTvmErrorPlatformNoMemory when exhausted. */
tvm_crt_error_t TVMPlatformMemoryAllocate(size_t num_bytes, DLDevice dev, void** out_ptr);

/* Free memory from TVMPlatformMemoryAllocate. */
tvm_crt_error_t TVMPlatformMemoryFree(void* ptr, DLDevice dev);

/* Start the one platform timer; kTvmErrorPlatformTimerBadState if it is already running. */
tvm_crt_error_t TVMPlatformTimerStart(void);

/* Stop the timer and report the wall time since the start; bad state if not running. */
tvm_crt_error_t TVMPlatformTimerStop(double* elapsed_time_seconds);

/* Called around timed measurements (e.g. to change clocks); the CRT has no-op defaults. */
tvm_crt_error_t TVMPlatformBeforeMeasurement(void);
tvm_crt_error_t TVMPlatformAfterMeasurement(void);

/* Fill `buffer` with random bytes (used for session nonces and random_fill). */
tvm_crt_error_t TVMPlatformGenerateRandom(uint8_t* buffer, size_t num_bytes);

/* Set the board up for the runtime: memory manager, timer, random source. */
tvm_crt_error_t TVMPlatformInitialize(void);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_PLATFORM_H_ */
