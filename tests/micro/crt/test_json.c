/*
 * test_json.c - the graph executor's JSON reader: values, escapes, limits and error messages.
 */
#include <tvm/runtime/crt/internal/graph_executor/load_json.h>

#include "crt_config.h"

#include "crt_test.h"

static void test_strings(void) {
  JSONReader r;
  char out[16];
  JSONReader_Create(
      "  \"a\\\"b\\\\c\\/\\n\\u0041\"  \"0123456789abcdef\" \"x\\u00e9\" \"\\q\"", &r);
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "name", "LIMIT"), 0);
  EXPECT(strcmp(out, "a\"b\\c/\nA") == 0);
  /* 16 characters do not fit 16 bytes with the NUL: an error naming the limit. */
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "node name", "LIMIT_NAME"),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("node name at offset 23 is longer than 15 characters (raise LIMIT_NAME");
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "s", "L"),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("ASCII \\u escape");
  JSONReader_Create("\"\\q\"", &r);
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "s", "L"),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("a valid escape");
  JSONReader_Create("\"unterminated", &r);
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "s", "L"),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("found the end of the text");
  JSONReader_Create("\"\\u00", &r); /* the NUL stops the hex digits */
  EXPECT_EQ(JSONReader_ReadString(&r, out, sizeof(out), "s", "L"),
            kTvmErrorFunctionCallInvalidArg);
}

static void test_integers(void) {
  JSONReader r;
  int64_t v;
  uint32_t u;
  JSONReader_Create(" -12 9223372036854775807 9223372036854775808 1.5 4294967296 -1 ", &r);
  EXPECT_EQ(JSONReader_ReadInteger(&r, &v, "int"), 0);
  EXPECT_EQ(v, -12);
  EXPECT_EQ(JSONReader_ReadInteger(&r, &v, "int"), 0);
  EXPECT_EQ(v, INT64_MAX);
  EXPECT_EQ(JSONReader_ReadInteger(&r, &v, "a dimension"), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("expected a dimension at offset");
  JSONReader_Create("1.5", &r);
  EXPECT_EQ(JSONReader_ReadInteger(&r, &v, "int"), kTvmErrorFunctionCallInvalidArg);
  JSONReader_Create("4294967296 -1 4294967295", &r);
  EXPECT_EQ(JSONReader_ReadUInt32(&r, &u, "id"), kTvmErrorFunctionCallInvalidArg);
  JSONReader_Create("-1", &r);
  EXPECT_EQ(JSONReader_ReadUInt32(&r, &u, "id"), kTvmErrorFunctionCallInvalidArg);
  JSONReader_Create("4294967295", &r);
  EXPECT_EQ(JSONReader_ReadUInt32(&r, &u, "id"), 0);
  EXPECT_EQ(u, UINT32_MAX);
}

static void test_arrays_objects_and_skipping(void) {
  JSONReader r;
  uint32_t n = 99;
  int has_item;
  char key[8];
  JSONReader_Create("[1, [2, 3], {\"k\": [true, false, null]}, \"s\", -4.5e3] tail", &r);
  EXPECT_EQ(JSONReader_ArrayLength(&r, &n), 0);
  EXPECT_EQ(n, 5);
  EXPECT(*r.cursor == '['); /* not consumed */
  EXPECT_EQ(JSONReader_SkipValue(&r), 0);
  EXPECT(strcmp(r.cursor, " tail") == 0);
  JSONReader_Create("{\"a_very_long_key\": 1, \"b\": 2}", &r);
  EXPECT_EQ(JSONReader_BeginObject(&r, "o"), 0);
  EXPECT_EQ(JSONReader_NextObjectItem(&r, 1, key, sizeof(key), &has_item), 0);
  EXPECT(has_item && key[0] == '\0'); /* too long for any known key: read as "" */
  EXPECT_EQ(JSONReader_SkipValue(&r), 0);
  EXPECT_EQ(JSONReader_NextObjectItem(&r, 0, key, sizeof(key), &has_item), 0);
  EXPECT(has_item && strcmp(key, "b") == 0);
  EXPECT_EQ(JSONReader_SkipValue(&r), 0);
  EXPECT_EQ(JSONReader_NextObjectItem(&r, 0, key, sizeof(key), &has_item), 0);
  EXPECT(!has_item);
  JSONReader_Create("[1 2]", &r);
  EXPECT_EQ(JSONReader_SkipValue(&r), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("expected ',' or ']' at offset 3, found '2'");
  JSONReader_Create("{\"a\" 1}", &r);
  EXPECT_EQ(JSONReader_SkipValue(&r), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("expected ':'");
  JSONReader_Create("[tru]", &r);
  EXPECT_EQ(JSONReader_SkipValue(&r), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("expected a value");
}

static void test_depth_limit(void) {
  char deep[2 * (TVM_CRT_MAX_JSON_DEPTH + 4) + 1];
  JSONReader r;
  uint32_t n;
  int depth = TVM_CRT_MAX_JSON_DEPTH + 1, i;
  for (i = 0; i < depth; ++i) deep[i] = '[';
  for (i = 0; i < depth; ++i) deep[depth + i] = ']';
  deep[2 * depth] = '\0';
  JSONReader_Create(deep, &r);
  EXPECT_EQ(JSONReader_SkipValue(&r), 0);
  for (i = 0; i < depth + 1; ++i) deep[i] = '[';
  for (i = 0; i < depth + 1; ++i) deep[depth + 1 + i] = ']';
  deep[2 * depth + 2] = '\0';
  JSONReader_Create(deep, &r);
  EXPECT_EQ(JSONReader_SkipValue(&r), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_JSON_DEPTH");
  JSONReader_Create(deep, &r);
  EXPECT_EQ(JSONReader_ArrayLength(&r, &n), kTvmErrorFunctionCallInvalidArg);
}

int main(void) {
  RUN(test_strings);
  RUN(test_integers);
  RUN(test_arrays_objects_and_skipping);
  RUN(test_depth_limit);
  return g_failures != 0;
}
