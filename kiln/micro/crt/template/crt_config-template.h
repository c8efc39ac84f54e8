/*
 * crt_config.h - compile-time limits of the kiln C runtime (copy into your project as
 * crt_config.h and adjust). Names and defaults as TVM v0.16's CRTConfig.
 *
 * Fixed-size buffers sized by these limits never truncate silently: a graph whose function or
 * parameter name, dtype string, argument count or rank exceeds them is refused with an error
 * naming the limit to raise.
 */
#ifndef TVM_RUNTIME_CRT_CONFIG_H_
#define TVM_RUNTIME_CRT_CONFIG_H_

/* Which LOG_* calls are compiled in (TVM_CRT_LOG_LEVEL_ERROR .. TVM_CRT_LOG_LEVEL_DEBUG). */
#ifndef TVM_CRT_LOG_LEVEL
#define TVM_CRT_LOG_LEVEL 0
#endif

/* Extra debug output from the runtime when 1. */
#ifndef TVM_CRT_DEBUG
#define TVM_CRT_DEBUG 0
#endif

/* Largest tensor rank. */
#ifndef TVM_CRT_MAX_NDIM
#define TVM_CRT_MAX_NDIM 6
#endif

/* Most arguments of one packed call (an op's inputs + outputs, AOT's I/O + pools). */
#ifndef TVM_CRT_MAX_ARGS
#define TVM_CRT_MAX_ARGS 10
#endif

/* Bytes for the global function registry (names and function pointers). */
#ifndef TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES
#define TVM_CRT_GLOBAL_FUNC_REGISTRY_SIZE_BYTES 512
#endif

/* Modules that can be registered (the global registry counts as one). */
#ifndef TVM_CRT_MAX_REGISTERED_MODULES
#define TVM_CRT_MAX_REGISTERED_MODULES 2
#endif

/* Largest RPC packet (microTVM sessions). */
#ifndef TVM_CRT_MAX_PACKET_SIZE_BYTES
#define TVM_CRT_MAX_PACKET_SIZE_BYTES 2048
#endif

/* Buffer for a dtype string such as "float32" (including the NUL). */
#ifndef TVM_CRT_MAX_STRLEN_DLTYPE
#define TVM_CRT_MAX_STRLEN_DLTYPE 10
#endif

/* Buffer for a function name (including the NUL). */
#ifndef TVM_CRT_MAX_STRLEN_FUNCTION_NAME
#define TVM_CRT_MAX_STRLEN_FUNCTION_NAME 120
#endif

/* Buffer for a parameter name (including the NUL). */
#ifndef TVM_CRT_MAX_STRLEN_PARAM_NAME
#define TVM_CRT_MAX_STRLEN_PARAM_NAME 80
#endif

/* Bytes kept for the last error message. */
#ifndef TVM_CRT_MAX_STRLEN_ERROR
#define TVM_CRT_MAX_STRLEN_ERROR 256
#endif

/* Nesting depth the graph JSON reader accepts (bounds its recursion). */
#ifndef TVM_CRT_MAX_JSON_DEPTH
#define TVM_CRT_MAX_JSON_DEPTH 16
#endif

/* Uncomment to tag every stack-allocator block and verify LIFO order on free. */
/* #define TVM_CRT_STACK_ALLOCATOR_ENABLE_LIFO_CHECK */

#endif /* TVM_RUNTIME_CRT_CONFIG_H_ */
