/*
 * aot_executor.c - the metadata-driven C AOT executor.
 *
 * Generated AOT code exports tvmgen_<mod>_get_c_metadata (returning a TVMMetadata*) and a
 * packed entry point <mod_name>_run taking inputs, outputs and workspace pools as DLTensors.
 * The executor checks the metadata, allocates every argument through the platform, and calls
 * the entry point. Metadata comes from generated code, but it is still checked: a mismatched
 * header or a hand-edited file must give an error, not a wild write.
 */
#include <string.h>
#include <tvm/runtime/crt/aot_executor.h>
#include <tvm/runtime/crt/internal/common/crt_error.h>
#include <tvm/runtime/crt/packed_func.h>
#include <tvm/runtime/crt/platform.h>

/* TVMMetadata.version this executor understands (TVM's kMetadataVersion). */
#define TVM_METADATA_VERSION 1

int TVMAotExecutor_GetNumInputs(TVMAotExecutor* executor) {
  return (int)executor->metadata->num_inputs;
}

int TVMAotExecutor_GetNumOutputs(TVMAotExecutor* executor) {
  return (int)executor->metadata->num_outputs;
}

int TVMAotExecutor_GetInputIndex(TVMAotExecutor* executor, const char* name) {
  int64_t i;
  for (i = 0; i < executor->metadata->num_inputs; ++i) {
    if (strcmp(executor->metadata->inputs[i].name, name) == 0) return (int)i;
  }
  return -1;
}

int TVMAotExecutor_GetInputName(TVMAotExecutor* executor, int index, const char** name) {
  if (index < 0 || index >= executor->metadata->num_inputs) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "AOT executor: input index %d is out of range (%d inputs)", index,
                       (int)executor->metadata->num_inputs);
  }
  *name = executor->metadata->inputs[index].name;
  return 0;
}

/* Write prefix + middle + suffix into out, or fail naming the limit (never truncate). */
static int JoinName(char* out, size_t out_size, const char* prefix, const char* middle,
                    const char* suffix) {
  size_t a = strlen(prefix), b = strlen(middle), c = strlen(suffix);
  if (a + b + c >= out_size) {
    return TVMCrtError(kTvmErrorBufferTooSmall,
                       "AOT executor: function name %s%s%s has %lu characters; the limit is %lu "
                       "(raise TVM_CRT_MAX_STRLEN_FUNCTION_NAME in crt_config.h)",
                       prefix, middle, suffix, (unsigned long)(a + b + c),
                       (unsigned long)(out_size - 1));
  }
  memcpy(out, prefix, a);
  memcpy(out + a, middle, b);
  memcpy(out + a + b, suffix, c + 1);
  return 0;
}

static int CheckTensorInfos(const struct TVMTensorInfo* infos, int64_t count, const char* what) {
  int64_t i, d;
  if (count < 0 || (count > 0 && infos == NULL)) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "AOT metadata: bad %s list (%ld)", what,
                       (long)count);
  }
  for (i = 0; i < count; ++i) {
    const struct TVMTensorInfo* info = &infos[i];
    if (info->name == NULL || info->num_shape < 0 || info->num_shape > TVM_CRT_MAX_NDIM ||
        (info->num_shape > 0 && info->shape == NULL)) {
      return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                         "AOT metadata: %s %ld has a bad name or rank %ld (limit "
                         "TVM_CRT_MAX_NDIM = %d)",
                         what, (long)i, (long)info->num_shape, TVM_CRT_MAX_NDIM);
    }
    for (d = 0; d < info->num_shape; ++d) {
      if (info->shape[d] < 0) {
        return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                           "AOT metadata: %s '%s' has negative dimension %ld", what, info->name,
                           (long)info->shape[d]);
      }
    }
  }
  return 0;
}

static int CheckMetadata(const TVMMetadata* md) {
  int status;
  if (md->version != TVM_METADATA_VERSION) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                       "AOT metadata version %ld; this runtime reads version %d", (long)md->version,
                       TVM_METADATA_VERSION);
  }
  if (md->mod_name == NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "AOT metadata has no mod_name");
  }
  status = CheckTensorInfos(md->inputs, md->num_inputs, "input");
  if (status == 0) status = CheckTensorInfos(md->outputs, md->num_outputs, "output");
  if (status == 0) {
    status = CheckTensorInfos(md->workspace_pools, md->num_workspace_pools, "workspace pool");
  }
  /* Each count is >= 0 here; bounding them one by one keeps the sum from overflowing. */
  if (status == 0 &&
      (md->num_inputs > TVM_CRT_MAX_ARGS || md->num_outputs > TVM_CRT_MAX_ARGS ||
       md->num_workspace_pools > TVM_CRT_MAX_ARGS ||
       md->num_inputs + md->num_outputs + md->num_workspace_pools > TVM_CRT_MAX_ARGS)) {
    status = TVMCrtError(kTvmErrorFunctionCallInvalidArg,
                         "AOT model takes %ld arguments; the limit is %d (raise "
                         "TVM_CRT_MAX_ARGS in crt_config.h)",
                         (long)(md->num_inputs + md->num_outputs + md->num_workspace_pools),
                         TVM_CRT_MAX_ARGS);
  }
  return status;
}

/* Allocate one argument per tensor info, appending to executor->args. */
static int AllocateArgs(TVMAotExecutor* executor, const struct TVMTensorInfo* infos,
                        int64_t count) {
  int64_t i;
  for (i = 0; i < count; ++i) {
    TVMNDArray* array = &executor->args[executor->num_args];
    int status = TVMNDArray_Empty((int32_t)infos[i].num_shape, infos[i].shape, infos[i].dtype,
                                  executor->device, array);
    if (status != 0) return status;
    executor->num_args++;
  }
  return 0;
}

int TVMAotExecutor_Create(TVMModuleHandle module_handle, const DLDevice device,
                          TVMAotExecutor** executor, const char* module_name) {
  TVMAotExecutor* ex = NULL;
  TVMPackedFunc get_c_metadata;
  TVMArgs no_args;
  char name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  const TVMMetadata* md;
  int64_t num_args;
  int status;
  *executor = NULL;
  memset(&no_args, 0, sizeof(no_args));
  status = JoinName(name, sizeof(name), "tvmgen_", module_name, "_get_c_metadata");
  if (status == 0) {
    status = TVMPackedFunc_InitModuleFunc(&get_c_metadata, module_handle, name, &no_args);
  }
  if (status != 0) return status;
  status = get_c_metadata.Call(&get_c_metadata);
  if (status != 0) return status;
  md = (const TVMMetadata*)get_c_metadata.ret_value.values[0].v_handle;
  if (get_c_metadata.ret_value.tcodes[0] != kTVMOpaqueHandle || md == NULL) {
    return TVMCrtError(kTvmErrorFunctionCallInvalidArg, "%s returned no metadata", name);
  }
  status = CheckMetadata(md);
  if (status != 0) return status;
  status = TVMPlatformMemoryAllocate(sizeof(*ex), device, (void**)&ex);
  if (status != 0) return TVMCrtError(status, "AOT executor: out of memory");
  memset(ex, 0, sizeof(*ex));
  ex->metadata = md;
  ex->module_handle = module_handle;
  ex->device = device;
  num_args = md->num_inputs + md->num_outputs + md->num_workspace_pools;
  if (num_args > 0) {
    status = TVMPlatformMemoryAllocate((size_t)num_args * sizeof(TVMNDArray), device,
                                       (void**)&ex->args);
    if (status != 0) status = TVMCrtError(status, "AOT executor: out of memory");
  }
  if (status == 0) status = AllocateArgs(ex, md->inputs, md->num_inputs);
  if (status == 0) status = AllocateArgs(ex, md->outputs, md->num_outputs);
  if (status == 0) status = AllocateArgs(ex, md->workspace_pools, md->num_workspace_pools);
  if (status != 0) {
    TVMAotExecutor_Release(ex, device);
    return status;
  }
  *executor = ex;
  return 0;
}

int TVMAotExecutor_Run(TVMAotExecutor* executor) {
  TVMPackedFunc run;
  TVMArgs args;
  char name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  int64_t i;
  int status = JoinName(name, sizeof(name), executor->metadata->mod_name, "", "_run");
  if (status != 0) return status;
  memset(&args, 0, sizeof(args));
  for (i = 0; i < executor->num_args; ++i) {
    args.values[i].v_handle = &executor->args[i].dl_tensor;
    args.tcodes[i] = kTVMDLTensorHandle;
  }
  args.values_count = (uint32_t)executor->num_args;
  status = TVMPackedFunc_InitModuleFunc(&run, executor->module_handle, name, &args);
  if (status != 0) return status;
  return run.Call(&run);
}

int TVMAotExecutor_Release(TVMAotExecutor* executor, const DLDevice device) {
  int64_t i;
  int status = 0;
  if (executor == NULL) return 0;
  for (i = 0; i < executor->num_args; ++i) {
    int s = TVMNDArray_Release(&executor->args[i]);
    if (status == 0) status = s;
  }
  if (executor->args != NULL) TVMPlatformMemoryFree(executor->args, device);
  TVMPlatformMemoryFree(executor, device);
  return status;
}
