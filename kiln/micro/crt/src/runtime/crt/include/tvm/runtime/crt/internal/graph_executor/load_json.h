/*
 * load_json.h - the graph executor's JSON reader (internal to the kiln CRT).
 *
 * A pull reader over a NUL-terminated string: it never reads past the NUL, bounds its nesting
 * depth by TVM_CRT_MAX_JSON_DEPTH, and reports every problem as an error code with the byte
 * offset in the message. Strings go into caller buffers and are never truncated.
 */
#ifndef TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_LOAD_JSON_H_
#define TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_LOAD_JSON_H_

#include <stddef.h>
#include <stdint.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct JSONReader {
  const char* begin;  /* start of the document, for offsets in messages */
  const char* cursor; /* next unread character */
} JSONReader;

/* Start reading the NUL-terminated document `is`. */
tvm_crt_error_t JSONReader_Create(const char* is, JSONReader* reader);

/* Nothing to free; kept for TVM's interface. */
tvm_crt_error_t JSONReader_Release(JSONReader* reader);

/* The next non-space character without consuming it ('\0' at the end). */
char JSONReader_PeekNextNonSpace(JSONReader* reader);

/* Consume `c` (after spaces) or fail naming `what` was being read. */
int JSONReader_Expect(JSONReader* reader, char c, const char* what);

/*
 * Read a string into out[0 .. out_size). A string that does not fit is an error naming `what`
 * and `limit_name` (the crt_config.h limit to raise).
 */
int JSONReader_ReadString(JSONReader* reader, char* out, size_t out_size, const char* what,
                          const char* limit_name);

/* Read an integer (no fraction or exponent) that fits int64_t. */
int JSONReader_ReadInteger(JSONReader* reader, int64_t* out, const char* what);

/* Read an integer in 0 .. UINT32_MAX. */
int JSONReader_ReadUInt32(JSONReader* reader, uint32_t* out, const char* what);

/* Consume '[' / '{'. */
int JSONReader_BeginArray(JSONReader* reader, const char* what);
int JSONReader_BeginObject(JSONReader* reader, const char* what);

/*
 * Advance to the next array element: *has_item = 1 if one follows (the ',' is consumed),
 * 0 when the ']' was consumed. `first` is 1 for the first call after BeginArray.
 */
int JSONReader_NextArrayItem(JSONReader* reader, int first, int* has_item);

/*
 * Advance to the next object member and read its key into key[0 .. key_size) (an over-long key
 * reads as "" - no known key is that long - and its value can be skipped); *has_item = 0 when
 * the '}' was consumed.
 */
int JSONReader_NextObjectItem(JSONReader* reader, int first, char* key, size_t key_size,
                              int* has_item);

/* Skip one value of any kind. */
int JSONReader_SkipValue(JSONReader* reader);

/* Count the elements of the array that starts at the cursor, without consuming it. */
int JSONReader_ArrayLength(JSONReader* reader, uint32_t* num_elements);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_INTERNAL_GRAPH_EXECUTOR_LOAD_JSON_H_ */
