/*
 * crt_loaders_driver.c - mutation fuzzer for the C graph executor's two loaders: the graph
 * JSON reader (TVMGraphExecutor_Create) and the params blob loader (LoadParams).
 *
 *   crt_fuzz graph|params ITERATIONS RNG_SEED OUT_DIR GRAPH PARAMS [GRAPH PARAMS ...]
 *
 * Each iteration mutates one seed (graph JSON in "graph" mode, params blob in "params" mode)
 * into an exactly sized heap buffer and feeds it to the CRT, built with ASan + UBSan. For every
 * accepted graph it also loads the seed params, runs every op with a kernel that reads and
 * writes every byte of every argument (so storage smaller than an entry is an ASan report),
 * copies every output out, and releases. A finding aborts after saving the input to
 * OUT_DIR/finding.bin: a sanitizer report, an abort, a leaked allocation, or an error code
 * without a message. At the end it prints one line of counts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/graph_executor.h>
#include <tvm/runtime/crt/internal/graph_executor/graph_executor.h>

#include "crt_test.h"
#include "fuzz_rng.h"
#include "test_platform.h"

#define MAX_SEEDS 8


typedef struct {
  char* data;
  size_t size;
  size_t capacity;
} Buffer;

static void Reserve(Buffer* b, size_t n) {
  if (n > b->capacity) {
    b->capacity = n * 2;
    b->data = (char*)realloc(b->data, b->capacity);
  }
}

static void Assign(Buffer* b, const char* data, size_t size) {
  Reserve(b, size + 1);
  memcpy(b->data, data, size);
  b->size = size;
}

/* Replace [at, at + len) (clipped to the buffer) by `with` (with_len bytes). */
static void Splice(Buffer* b, size_t at, size_t len, const char* with, size_t with_len) {
  if (len > b->size - at) len = b->size - at;
  Reserve(b, b->size - len + with_len + 1);
  memmove(b->data + at + with_len, b->data + at + len, b->size - at - len);
  memcpy(b->data + at, with, with_len);
  b->size = b->size - len + with_len;
}

static const char* const kTokens[] = {
    "[", "]", "{", "}", ",", ":", "\"", "\\", "\\u0041", "\\u00ff", "null", "true", "-",
    "0", "1", "-1", "4294967295", "4294967296", "2147483648", "9223372036854775807",
    "99999999999999999999", "1e5", "1.5", "\"tvm_op\"", "\"null\"", "\"list_int\"",
    "\"list_shape\"", "\"list_str\"", "\"float32\"", "\"int8\"", "\"__nop\"", "[[[[[[[[[[[[[[[[[[",
    "\"nodes\"", "\"heads\"", "\"attrs\"", "\"storage_id\"", "\"node_row_ptr\"",
    "\"arg_nodes\"", "\"shape\"", "\"dltype\"", "[0, 0, 0]", "[]", "{}", "\"flatten_data\": \"1\"",
};

static const uint64_t kInteresting[] = {0, 1, 2, 7, 8, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffff,
                                        0x80000000u, 0xffffffffu, UINT64_C(0x100000000),
                                        UINT64_C(0x7fffffffffffffff), UINT64_C(0xffffffffffffffff)};

static const char* const kStrings[] = {
    "float32", "int8", "uint8", "int32", "float64", "bool", "float16", "int64", "handle",
    "float32x4", "int", "tvm_op", "null", "__nop", "list_int", "list_str", "list_shape", "",
    "p0", "x", "nodes", "x_very_long_name_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
};

/* Structure-keeping JSON mutations: change one number, or one string's contents. */
static void MutateToken(Buffer* b, int string) {
  size_t start = Below(b->size), end;
  char text[32];
  if (string) {
    const char* s = kStrings[Below(sizeof(kStrings) / sizeof(kStrings[0]))];
    while (start < b->size && b->data[start] != '"') ++start;
    if (start >= b->size) return;
    for (end = ++start; end < b->size && b->data[end] != '"'; ++end) {
    }
    Splice(b, start, end - start, s, strlen(s));
    return;
  }
  while (start < b->size && (b->data[start] < '0' || b->data[start] > '9')) ++start;
  for (end = start; end < b->size && b->data[end] >= '0' && b->data[end] <= '9'; ++end) {
  }
  if (start >= b->size) return;
  if (Below(2)) {
    /* Nudge the number by -2..2 (unsigned arithmetic: wrapping is part of the fun). */
    unsigned long long v = 0;
    size_t k;
    for (k = start; k < end; ++k) v = v * 10 + (unsigned)(b->data[k] - '0');
    v = v + Below(5) - 2;
    snprintf(text, sizeof(text), "%llu", v);
  } else {
    uint64_t v = kInteresting[Below(sizeof(kInteresting) / sizeof(kInteresting[0]))];
    snprintf(text, sizeof(text), "%llu", (unsigned long long)v);
  }
  Splice(b, start, end - start, text, strlen(text));
}

/* Apply one random mutation; `json` selects text-aware mutations. */
static void Mutate(Buffer* b, const Buffer* seeds, int num_seeds, int json) {
  size_t at = Below(b->size + 1);
  if (json && Below(2)) {
    MutateToken(b, (int)Below(2));
    return;
  }
  switch (Below(json ? 9 : 8)) {
    case 0: /* flip a bit */
      if (b->size) b->data[Below(b->size)] ^= (char)(1u << Below(8));
      break;
    case 1: /* random byte */
      if (b->size) b->data[Below(b->size)] = (char)Next();
      break;
    case 2: { /* delete a range */
      size_t len = Below(b->size - at < 64 ? b->size - at + 1 : 64);
      Splice(b, at, len, "", 0);
      break;
    }
    case 3: { /* insert random bytes */
      char bytes[8];
      size_t i, len = 1 + Below(8);
      for (i = 0; i < len; ++i) bytes[i] = (char)Next();
      Splice(b, at, 0, bytes, len);
      break;
    }
    case 4: { /* duplicate a range */
      size_t len = Below(b->size - at < 128 ? b->size - at + 1 : 128);
      char* copy = (char*)malloc(len + 1);
      memcpy(copy, b->data + at, len);
      Splice(b, Below(b->size + 1), 0, copy, len);
      free(copy);
      break;
    }
    case 5: { /* splice a piece of another seed */
      const Buffer* other = &seeds[Below((size_t)num_seeds)];
      size_t from = Below(other->size + 1);
      size_t len = Below(other->size - from < 256 ? other->size - from + 1 : 256);
      Splice(b, at, Below(32), other->data + from, len);
      break;
    }
    case 6: /* truncate */
      b->size = at;
      break;
    case 7: { /* an interesting integer: little-endian in blobs, decimal in text */
      uint64_t v = kInteresting[Below(sizeof(kInteresting) / sizeof(kInteresting[0]))];
      if (json) {
        char text[32];
        size_t end = at;
        while (end < b->size && b->data[end] >= '0' && b->data[end] <= '9') ++end;
        snprintf(text, sizeof(text), "%s%llu", Below(4) == 0 ? "-" : "", (unsigned long long)v);
        Splice(b, at, end - at, text, strlen(text));
      } else if (b->size >= 8) {
        size_t pos = Below(b->size - 7);
        int width = Below(2) ? 8 : 4, i;
        for (i = 0; i < width && pos + (size_t)i < b->size; ++i) {
          b->data[pos + i] = (char)(v >> (8 * i));
        }
      }
      break;
    }
    default: { /* a JSON token */
      const char* token = kTokens[Below(sizeof(kTokens) / sizeof(kTokens[0]))];
      Splice(b, at, Below(3), token, strlen(token));
      break;
    }
  }
}

/* Stands in for every kernel: touches every byte of every tensor argument. */
static int TouchAll(TVMValue* args, int* codes, int n, TVMValue* ret, int* rc, void* rh) {
  int i;
  (void)ret, (void)rc, (void)rh;
  for (i = 0; i < n; ++i) {
    DLTensor* t = (DLTensor*)args[i].v_handle;
    int64_t bytes = ((int64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
    int32_t d;
    volatile uint8_t* p = (volatile uint8_t*)t->data + t->byte_offset;
    if (codes[i] != kTVMDLTensorHandle) abort();
    for (d = 0; d < t->ndim; ++d) bytes *= t->shape[d];
    for (int64_t k = 0; k < bytes; ++k) p[k] = (uint8_t)(p[k] + 1);
  }
  return 0;
}

/* Registry names come from kernel_names.h, generated from the seed graphs. */
#include "kernel_names.h"

static TVMBackendPackedCFunc g_funcs[KERNEL_COUNT];
static TVMFuncRegistry g_registry = {KERNEL_NAMES, g_funcs};
static TVMModule g_module = {&g_registry};

static const char* g_out_dir;
static const Buffer* g_current;

static void Finding(const char* what) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof(path), "%s/finding.bin", g_out_dir);
  f = fopen(path, "wb");
  if (f != NULL) {
    fwrite(g_current->data, 1, g_current->size, f);
    fclose(f);
  }
  fprintf(stderr, "FINDING: %s (input saved to %s)\n", what, path);
  abort();
}

/* Every failure must come with a message; the message buffer is cleared before each call. */
static int Checked(int status) {
  if (status != 0 && TVMGetLastError()[0] == '\0') Finding("error code without a message");
  return status;
}

/* Run an accepted executor end to end and release it. */
static void Exercise(TVMGraphExecutor* ex, const Buffer* params) {
  static uint8_t out[1 << 16];
  int i;
  TVMAPISetLastError("");
  Checked(TVMGraphExecutor_LoadParams(ex, params->data, (uint32_t)params->size));
  TVMAPISetLastError("");
  Checked(TVMGraphExecutor_Run(ex));
  for (i = 0; i < TVMGraphExecutor_GetNumOutputs(ex); ++i) {
    const TVMGraphExecutorNodeEntry* head = &ex->outputs[i];
    DLTensor t = ex->data_entry[TVMGraphExecutor_GetEntryId(ex, head->node_id, head->index)]
                     .dl_tensor;
    int64_t bytes = TVMNDArray_DataSizeBytes(
        &ex->data_entry[TVMGraphExecutor_GetEntryId(ex, head->node_id, head->index)]);
    if (bytes < 0 || bytes > (int64_t)sizeof(out)) continue;
    t.data = out;
    TVMAPISetLastError("");
    Checked(TVMGraphExecutor_GetOutput(ex, i, &t));
  }
  TVMGraphExecutor_Release(&ex);
}

int main(int argc, char** argv) {
  Buffer graphs[MAX_SEEDS], params[MAX_SEEDS], input = {NULL, 0, 0};
  DLDevice dev = {kDLCPU, 0};
  TVMModuleHandle mod;
  int num_seeds = 0, graph_mode, baseline, i;
  long iterations, it, accepted = 0, rejected = 0;
  if (argc < 7 || (argc - 5) % 2 != 0) return 64;
  graph_mode = strcmp(argv[1], "graph") == 0;
  iterations = atol(argv[2]);
  g_rng = (uint64_t)atoll(argv[3]) * UINT64_C(0x9E3779B97F4A7C15) + 1;
  g_out_dir = argv[4];
  for (i = 5; i + 1 < argc && num_seeds < MAX_SEEDS; i += 2, ++num_seeds) {
    Buffer* g = &graphs[num_seeds];
    Buffer* p = &params[num_seeds];
    g->data = ReadFile(argv[i], &g->size);
    p->data = ReadFile(argv[i + 1], &p->size);
    g->capacity = g->size + 1;
    p->capacity = p->size + 1;
    if (g->data == NULL || p->data == NULL) return 3;
  }
  for (i = 0; i < KERNEL_COUNT; ++i) g_funcs[i] = &TouchAll;
  if (TVMInitializeRuntime() != 0 || TVMModCreateFromCModule(&g_module, &mod) != 0) return 3;
  TestPlatform_SetBudget((size_t)4 << 20);
  baseline = TestPlatform_LiveAllocations();
  g_current = &input;
  for (it = 0; it < iterations; ++it) {
    int seed = (int)Below((size_t)num_seeds), m, status;
    const Buffer* source = graph_mode ? &graphs[seed] : &params[seed];
    TVMGraphExecutor* ex = NULL;
    Assign(&input, source->data, source->size);
    for (m = 1 + (int)Below(4); m > 0; --m) {
      Mutate(&input, graph_mode ? graphs : params, num_seeds, graph_mode);
    }
    /* Hand the CRT an exactly sized copy so ASan flags a read one byte past the end. */
    {
      size_t n = input.size;
      char* exact = (char*)malloc(n + (graph_mode ? 1 : 0) + (n == 0 ? 1 : 0));
      memcpy(exact, input.data, n);
      if (graph_mode) {
        exact[n] = '\0';
        /* A NUL inside the text ends the document there, as for any C string. */
        TVMAPISetLastError("");
        status = Checked(TVMGraphExecutor_Create(exact, mod, &dev, &ex));
        if (status == 0) {
          Exercise(ex, &params[seed]);
        }
      } else {
        TVMAPISetLastError("");
        status = Checked(TVMGraphExecutor_Create(graphs[seed].data, mod, &dev, &ex));
        if (status != 0) Finding("a seed graph was rejected");
        TVMAPISetLastError("");
        status = Checked(TVMGraphExecutor_LoadParams(ex, exact, (uint32_t)n));
        TVMGraphExecutor_Release(&ex);
      }
      free(exact);
    }
    if (status == 0) {
      ++accepted;
    } else {
      ++rejected;
    }
    if (TestPlatform_LiveAllocations() != baseline) Finding("leaked CRT allocations");
  }
  printf("mode %s inputs %ld accepted %ld rejected %ld findings 0\n", argv[1], iterations,
         accepted, rejected);
  for (i = 0; i < num_seeds; ++i) {
    free(graphs[i].data);
    free(params[i].data);
  }
  free(input.data);
  return 0;
}
