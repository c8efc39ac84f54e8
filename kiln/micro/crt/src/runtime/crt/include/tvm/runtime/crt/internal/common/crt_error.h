/*
 * crt_error.h - set the last error with a formatted message and return a code, in one call
 * (internal to the kiln CRT). Every loader reports bad input through it.
 */
#ifndef TVM_RUNTIME_CRT_INTERNAL_COMMON_CRT_ERROR_H_
#define TVM_RUNTIME_CRT_INTERNAL_COMMON_CRT_ERROR_H_

#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Format the message with TVMPlatformFormatMessage, store it, return `code`. */
#if defined(_MSC_VER)
int TVMCrtError(int code, const char* fmt, ...);
#else
int __attribute__((format(printf, 2, 3))) TVMCrtError(int code, const char* fmt, ...);
#endif

/*
 * Check a packed call's argument count and type codes against the expected ones (a tensor
 * may be passed as kTVMDLTensorHandle or kTVMNDArrayHandle); errors name `fn`.
 */
int TVMCrtCheckArgs(const char* fn, int nargs, const int* tcodes, int expected_nargs,
                    const int* expected_tcodes);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_INTERNAL_COMMON_CRT_ERROR_H_ */
