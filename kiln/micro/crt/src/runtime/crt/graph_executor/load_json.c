/*
 * load_json.c - a bounded pull reader for the graph executor's JSON (see load_json.h).
 */
#include <string.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/internal/graph_executor/load_json.h>

#include "crt_config.h"

static int BadJSON(JSONReader* reader, const char* expected) {
  char got = *reader->cursor;
  unsigned long offset = (unsigned long)(reader->cursor - reader->begin);
  if (got == '\0') {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "graph JSON: expected %s at offset %lu, found the end of the text",
                       expected, offset);
  }
  return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                     "graph JSON: expected %s at offset %lu, found '%c'", expected, offset, got);
}

tvm_crt_error_t JSONReader_Create(const char* is, JSONReader* reader) {
  reader->begin = is;
  reader->cursor = is;
  return kTvmErrorNoError;
}

tvm_crt_error_t JSONReader_Release(JSONReader* reader) {
  (void)reader;
  return kTvmErrorNoError;
}

static void SkipSpace(JSONReader* reader) {
  while (*reader->cursor == ' ' || *reader->cursor == '\n' || *reader->cursor == '\r' ||
         *reader->cursor == '\t') {
    ++reader->cursor;
  }
}

char JSONReader_PeekNextNonSpace(JSONReader* reader) {
  SkipSpace(reader);
  return *reader->cursor;
}

int JSONReader_Expect(JSONReader* reader, char c, const char* what) {
  if (JSONReader_PeekNextNonSpace(reader) != c) return BadJSON(reader, what);
  ++reader->cursor;
  return 0;
}

static int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Read a string; out == NULL discards it. *too_long reports a string that did not fit. */
static int ReadStringInto(JSONReader* reader, char* out, size_t out_size, int* too_long) {
  size_t n = 0;
  *too_long = 0;
  if (JSONReader_Expect(reader, '"', "'\"'") != 0) return kTvmErrorFunctionCallInvalidArg;
  for (;;) {
    char c = *reader->cursor;
    if (c == '\0') return BadJSON(reader, "the end of a string");
    ++reader->cursor;
    if (c == '"') break;
    if ((unsigned char)c < 0x20) {
      --reader->cursor;
      return BadJSON(reader, "a printable character in a string");
    }
    if (c == '\\') {
      char e = *reader->cursor;
      const char* kEscapes = "\"\"\\\\//b\bf\fn\nr\rt\t";
      const char* hit = NULL;
      int i;
      for (i = 0; kEscapes[i] != '\0'; i += 2) {
        if (kEscapes[i] == e) hit = &kEscapes[i + 1];
      }
      if (hit != NULL) {
        c = *hit;
        ++reader->cursor;
      } else if (e == 'u') {
        int code = 0;
        for (i = 1; i <= 4; ++i) {
          int h = HexValue(reader->cursor[i]); /* stops at the NUL: -1 */
          if (h < 0) {
            reader->cursor += i;
            return BadJSON(reader, "four hex digits after \\u");
          }
          code = code * 16 + h;
        }
        if (code == 0 || code > 0x7f) {
          return BadJSON(reader, "an ASCII \\u escape (names are ASCII)");
        }
        c = (char)code;
        reader->cursor += 5;
      } else {
        return BadJSON(reader, "a valid escape");
      }
    }
    if (out != NULL) {
      if (n + 1 >= out_size) {
        *too_long = 1;
        out = NULL; /* keep scanning to the closing quote */
      } else {
        out[n++] = c;
      }
    }
  }
  if (out != NULL && out_size > 0) out[n] = '\0';
  return 0;
}

int JSONReader_ReadString(JSONReader* reader, char* out, size_t out_size, const char* what,
                          const char* limit_name) {
  const char* start;
  int too_long, status;
  JSONReader_PeekNextNonSpace(reader); /* report the offset of the opening quote */
  start = reader->cursor;
  status = ReadStringInto(reader, out, out_size, &too_long);
  if (status != 0) return status;
  if (too_long) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "graph JSON: %s at offset %lu is longer than %lu characters (raise %s "
                       "in crt_config.h)",
                       what, (unsigned long)(start - reader->begin), (unsigned long)(out_size - 1),
                       limit_name);
  }
  return 0;
}

int JSONReader_ReadInteger(JSONReader* reader, int64_t* out, const char* what) {
  int negative = 0;
  uint64_t value = 0;
  int digits = 0;
  SkipSpace(reader);
  if (*reader->cursor == '-') {
    negative = 1;
    ++reader->cursor;
  }
  while (*reader->cursor >= '0' && *reader->cursor <= '9') {
    unsigned d = (unsigned)(*reader->cursor - '0');
    if (value > (UINT64_C(0x7fffffffffffffff) - d) / 10) return BadJSON(reader, what);
    value = value * 10 + d;
    ++reader->cursor;
    ++digits;
  }
  if (digits == 0 || *reader->cursor == '.' || *reader->cursor == 'e' ||
      *reader->cursor == 'E') {
    return BadJSON(reader, what);
  }
  *out = negative ? -(int64_t)value : (int64_t)value;
  return 0;
}

int JSONReader_ReadUInt32(JSONReader* reader, uint32_t* out, const char* what) {
  int64_t value;
  const char* start;
  SkipSpace(reader);
  start = reader->cursor;
  if (JSONReader_ReadInteger(reader, &value, what) != 0) return kTvmErrorFunctionCallInvalidArg;
  if (value < 0 || value > (int64_t)UINT32_MAX) {
    reader->cursor = start;
    return BadJSON(reader, what);
  }
  *out = (uint32_t)value;
  return 0;
}

int JSONReader_BeginArray(JSONReader* reader, const char* what) {
  (void)what;
  return JSONReader_Expect(reader, '[', "'[' (an array)");
}

int JSONReader_BeginObject(JSONReader* reader, const char* what) {
  (void)what;
  return JSONReader_Expect(reader, '{', "'{' (an object)");
}

int JSONReader_NextArrayItem(JSONReader* reader, int first, int* has_item) {
  char c = JSONReader_PeekNextNonSpace(reader);
  if (c == ']') {
    ++reader->cursor;
    *has_item = 0;
    return 0;
  }
  if (!first) {
    if (c != ',') return BadJSON(reader, "',' or ']'");
    ++reader->cursor;
  }
  *has_item = 1;
  return 0;
}

int JSONReader_NextObjectItem(JSONReader* reader, int first, char* key, size_t key_size,
                              int* has_item) {
  char c = JSONReader_PeekNextNonSpace(reader);
  int too_long;
  if (c == '}') {
    ++reader->cursor;
    *has_item = 0;
    return 0;
  }
  if (!first) {
    if (c != ',') return BadJSON(reader, "',' or '}'");
    ++reader->cursor;
  }
  if (ReadStringInto(reader, key, key_size, &too_long) != 0) return kTvmErrorFunctionCallInvalidArg;
  if (too_long) key[0] = '\0';
  *has_item = 1;
  return JSONReader_Expect(reader, ':', "':'");
}

static int SkipValueAtDepth(JSONReader* reader, int depth) {
  char c = JSONReader_PeekNextNonSpace(reader);
  int has_item, first = 1, too_long;
  if (depth > TVM_CRT_MAX_JSON_DEPTH) {
    return BadJSON(reader, "less nesting (TVM_CRT_MAX_JSON_DEPTH)");
  }
  if (c == '"') return ReadStringInto(reader, NULL, 0, &too_long);
  if (c == '[' || c == '{') {
    char close = c == '[' ? ']' : '}';
    ++reader->cursor;
    for (;; first = 0) {
      int status = close == ']' ? JSONReader_NextArrayItem(reader, first, &has_item)
                                : JSONReader_NextObjectItem(reader, first, NULL, 0, &has_item);
      if (status != 0) return status;
      if (!has_item) return 0;
      status = SkipValueAtDepth(reader, depth + 1);
      if (status != 0) return status;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    /* Any JSON number: sign, digits, fraction, exponent. */
    if (c == '-') ++reader->cursor;
    if (!(*reader->cursor >= '0' && *reader->cursor <= '9')) return BadJSON(reader, "a digit");
    while ((*reader->cursor >= '0' && *reader->cursor <= '9') || *reader->cursor == '.' ||
           *reader->cursor == 'e' || *reader->cursor == 'E' || *reader->cursor == '+' ||
           *reader->cursor == '-') {
      ++reader->cursor;
    }
    return 0;
  }
  {
    static const char* const kWords[] = {"true", "false", "null"};
    size_t i;
    for (i = 0; i < 3; ++i) {
      size_t n = strlen(kWords[i]);
      if (strncmp(reader->cursor, kWords[i], n) == 0) {
        reader->cursor += n;
        return 0;
      }
    }
  }
  return BadJSON(reader, "a value");
}

int JSONReader_SkipValue(JSONReader* reader) { return SkipValueAtDepth(reader, 0); }

int JSONReader_ArrayLength(JSONReader* reader, uint32_t* num_elements) {
  const char* start = reader->cursor;
  int has_item, first, status;
  uint32_t n = 0;
  status = JSONReader_BeginArray(reader, "array");
  for (first = 1; status == 0; first = 0) {
    status = JSONReader_NextArrayItem(reader, first, &has_item);
    if (status != 0 || !has_item) break;
    status = SkipValueAtDepth(reader, 1);
    ++n;
  }
  reader->cursor = start;
  *num_elements = n;
  return status;
}
