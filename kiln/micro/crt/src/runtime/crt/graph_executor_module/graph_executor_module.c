/*
 * graph_executor_module.c - the C graph executor as a module: the global
 * "tvm.graph_executor.create"(graph_json, module, device_type, device_id) returns a module
 * with get_input, get_input_index, get_num_inputs, get_num_outputs, get_output, load_params,
 * run and set_input (TVM v0.16's CRT interface, used by host-driven microTVM over RPC).
 *
 * One executor exists at a time (as in TVM); its module handle is registered once and reused.
 * Unlike TVM's CRT, set_input copies into the executor's own input storage (the C++ graph
 * executor's semantics): a tensor passed over RPC may not outlive the call.
 */
#include <string.h>
#include <tvm/runtime/crt/graph_executor_module.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/internal/graph_executor/graph_executor.h>

static TVMGraphExecutor* g_executor;
static TVMModuleHandle g_module_handle;

#define PACKED_ARGS \
  TVMValue *args, int *tcodes, int nargs, TVMValue *ret_values, int *ret_tcodes, void *rh

/* Check that the executor exists and the arguments of module function `fn`. */
static int CheckArgs(const char* fn, int nargs, const int* tcodes, int expected_nargs,
                     const int* expected_tcodes) {
  if (g_executor == NULL) {
    return TVMCrtError(kTvmErrorExecutorModuleBadContext, "%s: no graph executor exists", fn);
  }
  return TVMCrtCheckArgs(fn, nargs, tcodes, expected_nargs, expected_tcodes);
}

/* The entry of input `name`, or an error. */
static int InputTensor(const char* fn, const char* name, TVMNDArray** out) {
  int index = TVMGraphExecutor_GetInputIndex(g_executor, name);
  if (index < 0) {
    return TVMCrtError(kTvmErrorExecutorModuleNoSuchInput,
                       "%s: Could not find '%s' in graph's inputs", fn, name);
  }
  *out = &g_executor->data_entry[TVMGraphExecutor_GetEntryId(
      g_executor, g_executor->input_nodes[index], 0)];
  return 0;
}

static int GetInput(PACKED_ARGS) {
  static const int kTypes[] = {kTVMStr};
  TVMNDArray* array = NULL;
  int status = CheckArgs("get_input", nargs, tcodes, 1, kTypes);
  (void)rh;
  if (status == 0) status = InputTensor("get_input", args[0].v_str, &array);
  if (status != 0) return status;
  ret_values[0].v_handle = &array->dl_tensor;
  ret_tcodes[0] = kTVMNDArrayHandle;
  return 0;
}

static int GetInputIndex(PACKED_ARGS) {
  static const int kTypes[] = {kTVMStr};
  int status = CheckArgs("get_input_index", nargs, tcodes, 1, kTypes);
  (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMGraphExecutor_GetInputIndex(g_executor, args[0].v_str);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

static int GetNumInputs(PACKED_ARGS) {
  int status = CheckArgs("get_num_inputs", nargs, tcodes, 0, NULL);
  (void)args, (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMGraphExecutor_GetNumInputs(g_executor);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

static int GetNumOutputs(PACKED_ARGS) {
  int status = CheckArgs("get_num_outputs", nargs, tcodes, 0, NULL);
  (void)args, (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMGraphExecutor_GetNumOutputs(g_executor);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

/* get_output(index) returns the output tensor; get_output(index, out) copies into out. */
static int GetOutput(PACKED_ARGS) {
  static const int kTypes[] = {kTVMArgInt, kTVMDLTensorHandle};
  const TVMGraphExecutorNodeEntry* head;
  int64_t index;
  int status = CheckArgs("get_output", nargs, tcodes, nargs == 2 ? 2 : 1, kTypes);
  (void)rh;
  if (status != 0) return status;
  index = args[0].v_int64;
  if (index < 0 || index >= TVMGraphExecutor_GetNumOutputs(g_executor)) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "get_output: index %ld is out of range (%d outputs)", (long)index,
                       TVMGraphExecutor_GetNumOutputs(g_executor));
  }
  if (nargs == 2) {
    ret_tcodes[0] = kTVMNullptr;
    return TVMGraphExecutor_GetOutput(g_executor, (int32_t)index, (DLTensor*)args[1].v_handle);
  }
  head = &g_executor->outputs[index];
  ret_values[0].v_handle =
      &g_executor->data_entry[TVMGraphExecutor_GetEntryId(g_executor, head->node_id, head->index)]
           .dl_tensor;
  ret_tcodes[0] = kTVMNDArrayHandle;
  return 0;
}

static int LoadParams(PACKED_ARGS) {
  static const int kTypes[] = {kTVMBytes};
  const TVMByteArray* bytes;
  int status = CheckArgs("load_params", nargs, tcodes, 1, kTypes);
  (void)rh, (void)ret_values;
  if (status != 0) return status;
  bytes = (const TVMByteArray*)args[0].v_handle;
  if (bytes->size > UINT32_MAX) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "load_params: blob too large");
  }
  ret_tcodes[0] = kTVMNullptr;
  return TVMGraphExecutor_LoadParams(g_executor, bytes->data, (uint32_t)bytes->size);
}

static int Run(PACKED_ARGS) {
  int status = CheckArgs("run", nargs, tcodes, 0, NULL);
  (void)args, (void)rh, (void)ret_values;
  if (status != 0) return status;
  ret_tcodes[0] = kTVMNullptr;
  return TVMGraphExecutor_Run(g_executor);
}

static int SetInput(PACKED_ARGS) {
  static const int kTypes[] = {kTVMStr, kTVMDLTensorHandle};
  TVMNDArray* array = NULL;
  int status = CheckArgs("set_input", nargs, tcodes, 2, kTypes);
  (void)rh, (void)ret_values;
  if (status == 0) status = InputTensor("set_input", args[0].v_str, &array);
  if (status != 0) return status;
  ret_tcodes[0] = kTVMNullptr;
  return TVMDeviceCopyDataFromTo((DLTensor*)args[1].v_handle, &array->dl_tensor, NULL);
}

static int NotImplemented(PACKED_ARGS) {
  (void)args, (void)tcodes, (void)nargs, (void)ret_values, (void)ret_tcodes, (void)rh;
  return TVMCrtError(kTvmErrorFunctionCallNotImplemented,
                     "this graph executor module function is not implemented on the CRT");
}

static const TVMBackendPackedCFunc kFuncs[] = {
    &GetInput, &GetInputIndex, &NotImplemented, &GetNumInputs, &GetNumOutputs,
    &GetOutput, &LoadParams, &Run, &SetInput, &NotImplemented,
};

static const TVMFuncRegistry kRegistry = {
    "\012\000"
    "get_input\0get_input_index\0get_input_info\0get_num_inputs\0get_num_outputs\0"
    "get_output\0load_params\0run\0set_input\0share_params\0",
    kFuncs};

static const TVMModule kModule = {&kRegistry};

/* tvm.graph_executor.create(graph_json, module, device_type, device_id) */
static int Create(PACKED_ARGS) {
  DLDevice dev;
  int status;
  (void)rh;
  if (g_executor != NULL) {
    return TVMCrtError(kTvmErrorExecutorModuleAlreadyCreated,
                       "tvm.graph_executor.create: a graph executor already exists");
  }
  if (nargs != 4) {
    return TVMCrtError(kTvmErrorFunctionCallNumArguments,
                       "tvm.graph_executor.create expects 4 arguments, got %d", nargs);
  }
  if (tcodes[0] != kTVMStr || tcodes[1] != kTVMModuleHandle || tcodes[2] != kTVMArgInt ||
      tcodes[3] != kTVMArgInt) {
    return TVMCrtError(kTvmErrorFunctionCallWrongArgType,
                       "tvm.graph_executor.create expects (str, module, int, int)");
  }
  if (args[2].v_int64 != kDLCPU || args[3].v_int64 != 0) {
    return TVMCrtError(kTvmErrorExecutorModuleBadContext,
                       "tvm.graph_executor.create: only device (1, 0) exists on the CRT");
  }
  dev.device_type = kDLCPU;
  dev.device_id = 0;
  if (g_module_handle == NULL) {
    status = TVMModCreateFromCModule(&kModule, &g_module_handle);
    if (status != 0) return status;
  }
  status = TVMGraphExecutor_Create(args[0].v_str, args[1].v_handle, &dev, &g_executor);
  if (status != 0) return status;
  ret_values[0].v_handle = g_module_handle;
  ret_tcodes[0] = kTVMModuleHandle;
  return 0;
}

tvm_crt_error_t TVMGraphExecutorModule_Register(void) {
  return (tvm_crt_error_t)TVMFuncRegisterGlobal("tvm.graph_executor.create",
                                                (TVMFunctionHandle)&Create, 0);
}
