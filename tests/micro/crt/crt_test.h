/*
 * crt_test.h - a tiny assertion harness for the CRT's C unit tests (run by pytest).
 * Each failed expectation prints file:line and what was expected; main returns the count.
 */
#ifndef KILN_CRT_TEST_H_
#define KILN_CRT_TEST_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/c_runtime_api.h>

static int g_failures __attribute__((unused));

#define EXPECT(cond)                                                        \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);   \
      g_failures++;                                                         \
    }                                                                       \
  } while (0)

#define EXPECT_EQ(a, b)                                                                   \
  do {                                                                                    \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                 \
    if (va_ != vb_) {                                                                     \
      fprintf(stderr, "%s:%d: expected %s == %s, got 0x%llx and 0x%llx (last error: %s)\n", \
              __FILE__, __LINE__, #a, #b, va_, vb_, TVMGetLastError());                   \
      g_failures++;                                                                       \
    }                                                                                     \
  } while (0)

/* The last error message contains `text`. */
#define EXPECT_ERROR_MENTIONS(text)                                                     \
  do {                                                                                  \
    if (strstr(TVMGetLastError(), (text)) == NULL) {                                    \
      fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__,   \
              __LINE__, TVMGetLastError(), (text));                                     \
      g_failures++;                                                                     \
    }                                                                                   \
  } while (0)

#define RUN(test)                               \
  do {                                          \
    int before_ = g_failures;                   \
    test();                                     \
    printf("%s %s\n", g_failures == before_ ? "ok" : "FAIL", #test); \
  } while (0)

/* The whole file, NUL-terminated (not counted in *size); NULL if it cannot be read. */
static inline char* ReadFile(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  char* data;
  long n;
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  data = (char*)malloc((size_t)n + 1);
  *size = fread(data, 1, (size_t)n, f);
  data[*size] = '\0';
  fclose(f);
  return data;
}

/* Report a failed CRT call the way the Python tests parse it. */
static inline int Fail(int code) {
  printf("error 0x%x: %s\n", (unsigned)code, TVMGetLastError());
  return 2;
}

#endif /* KILN_CRT_TEST_H_ */
