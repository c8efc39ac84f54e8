/*
 * graph_runner.c - run a model on the C graph executor from files (test driver).
 *
 *   graph_runner GRAPH_JSON PARAMS|- OUT_DIR [INPUT_NAME=RAW_FILE ...]
 *
 * Loads the system library linked into this program, creates the executor, loads the params
 * blob (unless "-"), binds each raw input, runs, and writes output i to OUT_DIR/output<i>.bin.
 * Any failure prints "error 0x<code>: <message>" and exits 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/graph_executor.h>
#include <tvm/runtime/crt/internal/graph_executor/graph_executor.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_test.h"

int main(int argc, char** argv) {
  DLDevice dev = {kDLCPU, 0};
  TVMFunctionHandle syslib;
  TVMValue ret;
  int ret_code, i, status;
  size_t size;
  char* json;
  TVMGraphExecutor* executor = NULL;
  char* inputs[16];
  int num_inputs = 0;
  if (argc < 4) return 64;
  if (TVMPlatformInitialize() != 0 || TVMInitializeRuntime() != 0) return 3;
  status = TVMFuncGetGlobal("runtime.SystemLib", &syslib);
  if (status == 0) status = TVMFuncCall(syslib, NULL, NULL, 0, &ret, &ret_code);
  if (status != 0) return Fail(status);
  json = ReadFile(argv[1], &size);
  if (json == NULL) return 3;
  status = TVMGraphExecutor_Create(json, ret.v_handle, &dev, &executor);
  free(json);
  if (status != 0) return Fail(status);
  if (strcmp(argv[2], "-") != 0) {
    char* params = ReadFile(argv[2], &size);
    if (params == NULL) return 3;
    status = TVMGraphExecutor_LoadParams(executor, params, (uint32_t)size);
    free(params);
    if (status != 0) return Fail(status);
  }
  for (i = 4; i < argc && num_inputs < 16; ++i) {
    char* eq = strchr(argv[i], '=');
    int index;
    DLTensor tensor;
    if (eq == NULL) return 64;
    *eq = '\0';
    index = TVMGraphExecutor_GetInputIndex(executor, argv[i]);
    /* Take the layout from the graph so the test only has to supply bytes. */
    tensor = index < 0 ? executor->data_entry[0].dl_tensor
                       : executor->data_entry[TVMGraphExecutor_GetEntryId(
                                                  executor, executor->input_nodes[index], 0)]
                             .dl_tensor;
    inputs[num_inputs] = ReadFile(eq + 1, &size);
    if (inputs[num_inputs] == NULL) return 3;
    tensor.data = inputs[num_inputs++];
    status = TVMGraphExecutor_SetInput(executor, argv[i], &tensor);
    if (status != 0) return Fail(status);
  }
  status = TVMGraphExecutor_Run(executor);
  if (status != 0) return Fail(status);
  for (i = 0; i < TVMGraphExecutor_GetNumOutputs(executor); ++i) {
    const TVMGraphExecutorNodeEntry* head = &executor->outputs[i];
    TVMNDArray* entry =
        &executor->data_entry[TVMGraphExecutor_GetEntryId(executor, head->node_id, head->index)];
    int64_t nbytes = TVMNDArray_DataSizeBytes(entry);
    DLTensor out = entry->dl_tensor;
    char path[4096];
    FILE* f;
    out.data = malloc((size_t)nbytes + 1);
    status = TVMGraphExecutor_GetOutput(executor, i, &out);
    if (status != 0) return Fail(status);
    snprintf(path, sizeof(path), "%s/output%d.bin", argv[3], i);
    f = fopen(path, "wb");
    fwrite(out.data, 1, (size_t)nbytes, f);
    fclose(f);
    free(out.data);
  }
  printf("ok %d outputs\n", i);
  status = TVMGraphExecutor_Release(&executor);
  for (i = 0; i < num_inputs; ++i) free(inputs[i]);
  return status == 0 ? 0 : Fail(status);
}
