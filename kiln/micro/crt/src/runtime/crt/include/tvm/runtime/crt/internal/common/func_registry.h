/*
 * func_registry.h - helpers shared by the CRT's registry code (internal).
 */
#ifndef TVM_RUNTIME_CRT_INTERNAL_COMMON_FUNC_REGISTRY_H_
#define TVM_RUNTIME_CRT_INTERNAL_COMMON_FUNC_REGISTRY_H_

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Compare the NUL-terminated string at *cursor with name; advance *cursor past its NUL.
 * Returns 0 when they are equal.
 */
int strcmp_cursor(const char** cursor, const char* name);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_INTERNAL_COMMON_FUNC_REGISTRY_H_ */
