/*
 * aot_executor_module.c - the C AOT executor as a module: the global
 * "tvm.aot_executor.create"(module, device, module_name) returns a module with get_input,
 * get_input_index, get_input_name, get_num_inputs, get_num_outputs, get_output, run and
 * set_input (TVM v0.16's CRT interface for host-driven AOT; set_input copies, where TVM left
 * it to a Python wrapper).
 */
#include <string.h>
#include <tvm/runtime/crt/aot_executor.h>
#include <tvm/runtime/crt/aot_executor_module.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/module.h>

static TVMAotExecutor* g_executor;
static TVMModuleHandle g_module_handle;

#define PACKED_ARGS \
  TVMValue *args, int *tcodes, int nargs, TVMValue *ret_values, int *ret_tcodes, void *rh

/* Check that the executor exists and that `fn` got `expected_nargs` arguments. */
static int CheckCount(const char* fn, int nargs, int expected_nargs) {
  if (g_executor == NULL) {
    return TVMCrtError(kTvmErrorExecutorModuleBadContext, "%s: no AOT executor exists", fn);
  }
  if (nargs != expected_nargs) {
    return TVMCrtError(kTvmErrorFunctionCallNumArguments, "%s expects %d arguments, got %d", fn,
                       expected_nargs, nargs);
  }
  return 0;
}

/* CheckCount, then the type codes. */
static int CheckArgs(const char* fn, int nargs, const int* tcodes, int expected_nargs,
                     const int* expected_tcodes) {
  int status = CheckCount(fn, nargs, expected_nargs);
  if (status != 0) return status;
  return TVMCrtCheckArgs(fn, nargs, tcodes, expected_nargs, expected_tcodes);
}

/* Argument index of input `args[0]` (an index or a name). */
static int InputIndex(const char* fn, TVMValue* args, int* tcodes, int64_t* index) {
  if (tcodes[0] == kTVMArgInt) {
    *index = args[0].v_int64;
  } else if (tcodes[0] == kTVMStr) {
    *index = TVMAotExecutor_GetInputIndex(g_executor, args[0].v_str);
    if (*index < 0) {
      return TVMCrtError(kTvmErrorExecutorModuleNoSuchInput, "%s: no input named '%s'", fn,
                         args[0].v_str);
    }
  } else {
    return TVMCrtError(kTvmErrorFunctionCallWrongArgType, "%s: expects an input index or name",
                       fn);
  }
  if (*index < 0 || *index >= TVMAotExecutor_GetNumInputs(g_executor)) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "%s: input %ld is out of range", fn,
                       (long)*index);
  }
  return 0;
}

static int GetInput(PACKED_ARGS) {
  int64_t index;
  int status = CheckCount("get_input", nargs, 1);
  (void)rh;
  if (status == 0) status = InputIndex("get_input", args, tcodes, &index);
  if (status != 0) return status;
  ret_values[0].v_handle = &g_executor->args[index].dl_tensor;
  ret_tcodes[0] = kTVMNDArrayHandle;
  return 0;
}

static int SetInput(PACKED_ARGS) {
  int64_t index;
  int status = CheckCount("set_input", nargs, 2);
  (void)rh, (void)ret_values;
  if (status == 0 && tcodes[1] != kTVMDLTensorHandle && tcodes[1] != kTVMNDArrayHandle) {
    status = TVMCrtError(kTvmErrorFunctionCallWrongArgType, "set_input: expects a tensor");
  }
  if (status == 0) status = InputIndex("set_input", args, tcodes, &index);
  if (status != 0) return status;
  ret_tcodes[0] = kTVMNullptr;
  return TVMDeviceCopyDataFromTo((DLTensor*)args[1].v_handle, &g_executor->args[index].dl_tensor,
                                 NULL);
}

static int GetInputIndex(PACKED_ARGS) {
  static const int kTypes[] = {kTVMStr};
  int status = CheckArgs("get_input_index", nargs, tcodes, 1, kTypes);
  (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMAotExecutor_GetInputIndex(g_executor, args[0].v_str);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

static int GetInputName(PACKED_ARGS) {
  static const int kTypes[] = {kTVMArgInt};
  const char* name = NULL;
  int status = CheckArgs("get_input_name", nargs, tcodes, 1, kTypes);
  (void)rh;
  if (status == 0) {
    status = args[0].v_int64 < 0 || args[0].v_int64 > 0x7fffffff
                 ? TVMCrtError(kTvmErrorFunctionCallInvalidArg, "get_input_name: bad index")
                 : TVMAotExecutor_GetInputName(g_executor, (int)args[0].v_int64, &name);
  }
  if (status != 0) return status;
  ret_values[0].v_str = name;
  ret_tcodes[0] = kTVMStr;
  return 0;
}

static int GetNumInputs(PACKED_ARGS) {
  int status = CheckArgs("get_num_inputs", nargs, tcodes, 0, NULL);
  (void)args, (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMAotExecutor_GetNumInputs(g_executor);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

static int GetNumOutputs(PACKED_ARGS) {
  int status = CheckArgs("get_num_outputs", nargs, tcodes, 0, NULL);
  (void)args, (void)rh;
  if (status != 0) return status;
  ret_values[0].v_int64 = TVMAotExecutor_GetNumOutputs(g_executor);
  ret_tcodes[0] = kTVMArgInt;
  return 0;
}

static int GetOutput(PACKED_ARGS) {
  static const int kTypes[] = {kTVMArgInt};
  int64_t index;
  int status = CheckArgs("get_output", nargs, tcodes, 1, kTypes);
  (void)rh;
  if (status != 0) return status;
  index = args[0].v_int64;
  if (index < 0 || index >= TVMAotExecutor_GetNumOutputs(g_executor)) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "get_output: index %ld is out of range (%d outputs)", (long)index,
                       TVMAotExecutor_GetNumOutputs(g_executor));
  }
  /* Outputs follow the inputs in the argument list. */
  index += TVMAotExecutor_GetNumInputs(g_executor);
  ret_values[0].v_handle = &g_executor->args[index].dl_tensor;
  ret_tcodes[0] = kTVMNDArrayHandle;
  return 0;
}

static int Run(PACKED_ARGS) {
  int status = CheckArgs("run", nargs, tcodes, 0, NULL);
  (void)args, (void)rh, (void)ret_values;
  if (status != 0) return status;
  ret_tcodes[0] = kTVMNullptr;
  return TVMAotExecutor_Run(g_executor);
}

static int NotImplemented(PACKED_ARGS) {
  (void)args, (void)tcodes, (void)nargs, (void)ret_values, (void)ret_tcodes, (void)rh;
  return TVMCrtError(kTvmErrorFunctionCallNotImplemented,
                     "this AOT executor module function is not implemented on the CRT");
}

static const TVMBackendPackedCFunc kFuncs[] = {
    &GetInput, &GetInputIndex, &NotImplemented, &GetNumInputs,   &GetNumOutputs, &GetOutput,
    &NotImplemented, &Run,     &SetInput,       &NotImplemented, &GetInputName,
};

static const TVMFuncRegistry kRegistry = {
    "\013\000"
    "get_input\0get_input_index\0get_input_info\0get_num_inputs\0get_num_outputs\0"
    "get_output\0load_params\0run\0set_input\0share_params\0get_input_name\0",
    kFuncs};

static const TVMModule kModule = {&kRegistry};

/* tvm.aot_executor.create(module, device, module_name) */
static int Create(PACKED_ARGS) {
  static const int kTypes[] = {kTVMModuleHandle, kDLDevice, kTVMStr};
  int status;
  (void)rh;
  if (g_executor != NULL) {
    return TVMCrtError(kTvmErrorExecutorModuleAlreadyCreated,
                       "tvm.aot_executor.create: an AOT executor already exists");
  }
  status = TVMCrtCheckArgs("tvm.aot_executor.create", nargs, tcodes, 3, kTypes);
  if (status != 0) return status;
  if (args[1].v_device.device_type != kDLCPU || args[1].v_device.device_id != 0) {
    return TVMCrtError(kTvmErrorExecutorModuleBadContext,
                       "tvm.aot_executor.create: only device (1, 0) exists on the CRT");
  }
  if (g_module_handle == NULL) {
    status = TVMModCreateFromCModule(&kModule, &g_module_handle);
    if (status != 0) return status;
  }
  status = TVMAotExecutor_Create(args[0].v_handle, args[1].v_device, &g_executor, args[2].v_str);
  if (status != 0) return status;
  ret_values[0].v_handle = g_module_handle;
  ret_tcodes[0] = kTVMModuleHandle;
  return 0;
}

tvm_crt_error_t TVMAotExecutorModule_Register(void) {
  return (tvm_crt_error_t)TVMFuncRegisterGlobal("tvm.aot_executor.create",
                                                (TVMFunctionHandle)&Create, 0);
}
