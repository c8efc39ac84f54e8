/*
 * params_tool.c - load NDArray blobs or a params blob with the CRT and save every array back,
 * so the tests can compare bytes with kiln.runtime's writer (the oracle).
 *
 *   params_tool ndarrays IN OUT   IN holds NDArray blobs back to back
 *   params_tool params IN OUT     IN is a params blob; prints one "name" line per array
 *   params_tool prefixes IN OUT   reads every proper prefix of the params blob IN (each in an
 *                                 exactly sized heap copy, so ASan sees any over-read); prints
 *                                 "<length> error 0x<code>: <message>" per prefix
 * OUT receives the re-saved arrays back to back. On bad input prints
 * "error 0x<code>: <message>" and exits 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_test.h"

/* Save `arr` to `out` and release it. */
static int SaveAndRelease(TVMNDArray* arr, FILE* out) {
  static char buffer[1 << 20];
  size_t written;
  int status = TVMNDArray_Save(arr, buffer, sizeof(buffer), &written);
  if (status == 0) fwrite(buffer, 1, written, out);
  TVMNDArray_Release(arr);
  return status;
}

/* Read a whole params blob, releasing every array; 0 or the first error. */
static int ReadParams(const char* data, size_t size, FILE* out) {
  TVMParamsReader reader;
  TVMNDArray arr;
  char name[TVM_CRT_MAX_STRLEN_PARAM_NAME];
  int status = TVMParamsReader_Init(&reader, data, size);
  while (status == 0) {
    int got = TVMParamsReader_Next(&reader, name, sizeof(name), &arr);
    if (got != 1) return got;
    if (out != NULL) {
      printf("%s\n", name);
      status = SaveAndRelease(&arr, out);
    } else {
      TVMNDArray_Release(&arr);
    }
  }
  return status;
}

int main(int argc, char** argv) {
  size_t size = 0;
  char* data;
  FILE* out;
  TVMNDArray arr;
  int status = 0;
  if (argc != 4) return 64;
  if (TVMPlatformInitialize() != 0) return 3;
  data = ReadFile(argv[2], &size);
  out = fopen(argv[3], "wb");
  if (data == NULL || out == NULL) return 3;
  if (strcmp(argv[1], "ndarrays") == 0) {
    const char* cursor = data;
    while (status == 0 && cursor < data + size) {
      status = TVMNDArray_Load(&arr, &cursor, data + size);
      if (status == 0) status = SaveAndRelease(&arr, out);
    }
  } else if (strcmp(argv[1], "prefixes") == 0) {
    size_t cut;
    for (cut = 0; cut < size; ++cut) {
      char* prefix = (char*)malloc(cut > 0 ? cut : 1);
      memcpy(prefix, data, cut);
      status = ReadParams(prefix, cut, NULL);
      printf("%lu error 0x%x: %s\n", (unsigned long)cut, (unsigned)status,
             status == 0 ? "(none)" : TVMGetLastError());
      free(prefix);
    }
    status = 0;
  } else {
    status = ReadParams(data, size, out);
  }
  fclose(out);
  free(data);
  return status == 0 ? 0 : Fail(status);
}
