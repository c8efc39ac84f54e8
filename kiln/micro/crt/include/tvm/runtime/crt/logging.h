/*
 * logging.h - TVMLogf and the LOG_* / CHECK* macros of the kiln C runtime.
 * TVM_CRT_LOG_LEVEL (crt_config.h) selects which LOG_* calls are compiled in.
 */
#ifndef TVM_RUNTIME_CRT_LOGGING_H_
#define TVM_RUNTIME_CRT_LOGGING_H_

#include <tvm/runtime/crt/platform.h>

#define TVM_CRT_LOG_LEVEL_DEBUG 3
#define TVM_CRT_LOG_LEVEL_INFO 2
#define TVM_CRT_LOG_LEVEL_WARN 1
#define TVM_CRT_LOG_LEVEL_ERROR 0

#ifndef TVM_CRT_LOG_LEVEL
#define TVM_CRT_LOG_LEVEL TVM_CRT_LOG_LEVEL_ERROR
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Write a formatted log line through the platform (the host template prints to stderr). */
#if defined(_MSC_VER)
void TVMLogf(const char* fmt, ...);
#else
void __attribute__((format(printf, 1, 2))) TVMLogf(const char* fmt, ...);
#endif

/* Log at `level` if TVM_CRT_LOG_LEVEL allows it (x is a printf format). */
#define LOG(level, ...)                   \
  do {                                    \
    if (TVM_CRT_LOG_LEVEL >= (level)) {   \
      TVMLogf(__VA_ARGS__);               \
    }                                     \
  } while (0)

#define LOG_ERROR(...) LOG(TVM_CRT_LOG_LEVEL_ERROR, __VA_ARGS__)
#define LOG_WARN(...) LOG(TVM_CRT_LOG_LEVEL_WARN, __VA_ARGS__)
#define LOG_INFO(...) LOG(TVM_CRT_LOG_LEVEL_INFO, __VA_ARGS__)
#define LOG_DEBUG(...) LOG(TVM_CRT_LOG_LEVEL_DEBUG, __VA_ARGS__)

/* Abort through the platform when an internal invariant does not hold. */
#ifndef CHECK
#define CHECK(x)                                                    \
  do {                                                              \
    if (!(x)) {                                                     \
      LOG_ERROR(__FILE__ ":%d: Check failed: %s\n", __LINE__, #x); \
      TVMPlatformAbort(kTvmErrorPlatformCheckFailure);              \
    }                                                               \
  } while (0)
#endif

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_LOGGING_H_ */
