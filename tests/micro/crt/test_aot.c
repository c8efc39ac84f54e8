/*
 * test_aot.c - the C AOT executor against hand-written "generated" modules: metadata lookup,
 * argument allocation (inputs, outputs, workspace pool), the run call, and bad metadata.
 */
#include <math.h>
#include <tvm/runtime/crt/aot_executor.h>
#include <tvm/runtime/crt/aot_executor_module.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/module.h>

#include "crt_test.h"
#include "test_platform.h"

static const int64_t kShape23[] = {2, 3};
static const int64_t kPoolShape[] = {64};
static const int64_t kRank7[] = {1, 1, 1, 1, 1, 1, 1};
static const int64_t kHuge[] = {(int64_t)1 << 40};

static const struct TVMTensorInfo kInputs[] = {{"a", kShape23, 2, {kDLFloat, 32, 1}},
                                               {"b", kShape23, 2, {kDLFloat, 32, 1}}};
static const struct TVMTensorInfo kOutputs[] = {{"out", kShape23, 2, {kDLFloat, 32, 1}}};
static const struct TVMTensorInfo kPools[] = {{"global_workspace", kPoolShape, 1, {1, 8, 1}}};
static const struct TVMTensorInfo kBadRank[] = {{"a", kRank7, 7, {kDLFloat, 32, 1}}};
static const struct TVMTensorInfo kHugePool[] = {{"pool", kHuge, 1, {1, 8, 1}}};
static const struct TVMTensorInfo kEleven[11] = {
    {"i0", kShape23, 2, {2, 32, 1}}, {"i1", kShape23, 2, {2, 32, 1}},
    {"i2", kShape23, 2, {2, 32, 1}}, {"i3", kShape23, 2, {2, 32, 1}},
    {"i4", kShape23, 2, {2, 32, 1}}, {"i5", kShape23, 2, {2, 32, 1}},
    {"i6", kShape23, 2, {2, 32, 1}}, {"i7", kShape23, 2, {2, 32, 1}},
    {"i8", kShape23, 2, {2, 32, 1}}, {"i9", kShape23, 2, {2, 32, 1}},
    {"i10", kShape23, 2, {2, 32, 1}}};

static const struct TVMMetadata kGood = {1, kInputs, 2, kOutputs, 1, kPools, 1,
                                         NULL, 0, "tvmgen_default"};
static const struct TVMMetadata kBadRankMd = {1, kBadRank, 1, kOutputs, 1, NULL, 0,
                                              NULL, 0, "tvmgen_badrank"};
static const struct TVMMetadata kTooMany = {1, kEleven, 11, kOutputs, 1, NULL, 0,
                                            NULL, 0, "tvmgen_many"};
static const struct TVMMetadata kVersion2 = {2, kInputs, 2, kOutputs, 1, NULL, 0,
                                             NULL, 0, "tvmgen_v2"};
static const struct TVMMetadata kHugeMd = {1, kInputs, 2, kOutputs, 1, kHugePool, 1,
                                           NULL, 0, "tvmgen_huge"};

static int ReturnMetadata(const struct TVMMetadata* md, TVMValue* ret, int* ret_code) {
  ret->v_handle = (void*)md;
  *ret_code = kTVMOpaqueHandle;
  return 0;
}

#define METADATA_FUNC(fn, md)                                                          \
  static int fn(TVMValue* args, int* codes, int n, TVMValue* ret, int* rc, void* rh) { \
    (void)args, (void)codes, (void)n, (void)rh;                                        \
    return ReturnMetadata(md, ret, rc);                                                \
  }
METADATA_FUNC(GetGood, &kGood)
METADATA_FUNC(GetBadRank, &kBadRankMd)
METADATA_FUNC(GetTooMany, &kTooMany)
METADATA_FUNC(GetVersion2, &kVersion2)
METADATA_FUNC(GetHuge, &kHugeMd)
METADATA_FUNC(GetNull, NULL)

/* out = (a + b) * 2, with a + b staged in the workspace pool as generated code would. */
static int Run(TVMValue* args, int* codes, int n, TVMValue* ret, int* rc, void* rh) {
  const DLTensor *a, *b, *out, *pool;
  float* tmp;
  int i;
  (void)ret, (void)rc, (void)rh;
  if (n != 4 || codes[0] != kTVMDLTensorHandle || codes[3] != kTVMDLTensorHandle) {
    TVMAPISetLastError("run: wrong arguments");
    return -1;
  }
  a = (DLTensor*)args[0].v_handle;
  b = (DLTensor*)args[1].v_handle;
  out = (DLTensor*)args[2].v_handle;
  pool = (DLTensor*)args[3].v_handle;
  if (pool->shape[0] < 24 || pool->dtype.code != kDLUInt) {
    TVMAPISetLastError("run: workspace pool too small");
    return -1;
  }
  tmp = (float*)pool->data;
  for (i = 0; i < 6; ++i) {
    if (isnan(((float*)a->data)[i])) {
      TVMAPISetLastError("run: NaN input");
      return -1;
    }
    tmp[i] = ((float*)a->data)[i] + ((float*)b->data)[i];
  }
  for (i = 0; i < 6; ++i) ((float*)out->data)[i] = tmp[i] * 2.0f;
  return 0;
}

static const TVMBackendPackedCFunc kFuncs[] = {&GetGood,  &Run,         &GetBadRank, &GetTooMany,
                                               &GetVersion2, &GetHuge, &GetNull};
static const TVMFuncRegistry kRegistry = {
    "\007\000"
    "tvmgen_default_get_c_metadata\0tvmgen_default_run\0tvmgen_badrank_get_c_metadata\0"
    "tvmgen_many_get_c_metadata\0tvmgen_v2_get_c_metadata\0tvmgen_huge_get_c_metadata\0"
    "tvmgen_null_get_c_metadata\0",
    kFuncs};
static const TVMModule kModule = {&kRegistry};

static const DLDevice kCPU = {kDLCPU, 0};
static TVMModuleHandle g_mod;

static void test_run_model(void) {
  TVMAotExecutor* ex = NULL;
  const char* name = NULL;
  int i;
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "default"), 0);
  EXPECT_EQ(TVMAotExecutor_GetNumInputs(ex), 2);
  EXPECT_EQ(TVMAotExecutor_GetNumOutputs(ex), 1);
  EXPECT_EQ(TVMAotExecutor_GetInputIndex(ex, "b"), 1);
  EXPECT_EQ(TVMAotExecutor_GetInputIndex(ex, "zz"), -1);
  EXPECT_EQ(TVMAotExecutor_GetInputName(ex, 0, &name), 0);
  EXPECT(name != NULL && strcmp(name, "a") == 0);
  EXPECT_EQ(TVMAotExecutor_GetInputName(ex, 2, &name), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(ex->num_args, 4); /* inputs, output and the workspace pool */
  EXPECT(ex->args[3].dl_tensor.shape[0] == 64);
  for (i = 0; i < 6; ++i) {
    ((float*)ex->args[0].dl_tensor.data)[i] = (float)i;
    ((float*)ex->args[1].dl_tensor.data)[i] = 0.5f;
  }
  EXPECT_EQ(TVMAotExecutor_Run(ex), 0);
  for (i = 0; i < 6; ++i) EXPECT(((float*)ex->args[2].dl_tensor.data)[i] == 2.0f * i + 1.0f);
  /* A failing model returns its error and message. */
  ((float*)ex->args[0].dl_tensor.data)[0] = NAN;
  EXPECT_EQ(TVMAotExecutor_Run(ex), -1);
  EXPECT_ERROR_MENTIONS("NaN input");
  EXPECT_EQ(TVMAotExecutor_Release(ex, kCPU), 0);
  EXPECT_EQ(TestPlatform_LiveAllocations(), 1); /* only the global registry */
}

static void test_bad_metadata(void) {
  TVMAotExecutor* ex = (TVMAotExecutor*)&ex;
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "missing"), kTvmErrorFunctionNameNotFound);
  EXPECT(ex == NULL);
  EXPECT_ERROR_MENTIONS("tvmgen_missing_get_c_metadata");
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "badrank"), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_NDIM");
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "many"), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_ARGS");
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "v2"), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("version 2");
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "null"), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("returned no metadata");
  /* Running out of memory half way leaves nothing allocated behind. */
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, "huge"), kTvmErrorPlatformNoMemory);
  EXPECT(ex == NULL);
  EXPECT_EQ(TestPlatform_LiveAllocations(), 1);
}

static void test_long_module_name(void) {
  TVMAotExecutor* ex;
  char name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME];
  memset(name, 'm', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  EXPECT_EQ(TVMAotExecutor_Create(g_mod, kCPU, &ex, name), kTvmErrorBufferTooSmall);
  EXPECT_ERROR_MENTIONS("raise TVM_CRT_MAX_STRLEN_FUNCTION_NAME");
}

/* Call function `name` of the AOT executor module. */
static int Call(TVMModuleHandle mod, const char* name, TVMValue* args, int* codes, int n,
                TVMValue* ret, int* rc) {
  TVMFunctionHandle f;
  int status = TVMModGetFunction(mod, name, 0, &f);
  if (status != 0) return status;
  return TVMFuncCall(f, args, codes, n, ret, rc);
}

static void test_aot_executor_module(void) {
  TVMFunctionHandle create;
  TVMModuleHandle aot;
  TVMValue args[3], ret;
  int codes[3] = {kTVMModuleHandle, kDLDevice, kTVMStr}, rc, i;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0, 0, 0, 0, 0, 1};
  int64_t shape[2] = {2, 3};
  DLTensor a_t = {a, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor b_t = {b, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  EXPECT_EQ(TVMFuncGetGlobal("tvm.aot_executor.create", &create), 0);
  args[0].v_handle = g_mod;
  args[1].v_device = kCPU;
  args[2].v_str = "default";
  EXPECT_EQ(TVMFuncCall(create, args, codes, 3, &ret, &rc), 0);
  aot = ret.v_handle;
  EXPECT_EQ(TVMFuncCall(create, args, codes, 3, &ret, &rc), kTvmErrorExecutorModuleAlreadyCreated);
  EXPECT_EQ(Call(aot, "get_num_inputs", args, codes, 0, &ret, &rc), 0);
  EXPECT_EQ(ret.v_int64, 2);
  args[0].v_str = "a";
  codes[0] = kTVMStr;
  args[1].v_handle = &a_t;
  codes[1] = kTVMDLTensorHandle;
  EXPECT_EQ(Call(aot, "set_input", args, codes, 2, &ret, &rc), 0);
  args[0].v_int64 = 1;
  codes[0] = kTVMArgInt;
  args[1].v_handle = &b_t;
  EXPECT_EQ(Call(aot, "set_input", args, codes, 2, &ret, &rc), 0);
  EXPECT_EQ(Call(aot, "get_input_name", args, codes, 1, &ret, &rc), 0);
  EXPECT(strcmp(ret.v_str, "b") == 0);
  EXPECT_EQ(Call(aot, "run", args, codes, 0, &ret, &rc), 0);
  args[0].v_int64 = 0;
  EXPECT_EQ(Call(aot, "get_output", args, codes, 1, &ret, &rc), 0);
  EXPECT_EQ(rc, kTVMNDArrayHandle);
  for (i = 0; i < 6; ++i) {
    EXPECT(((float*)((DLTensor*)ret.v_handle)->data)[i] == 2.0f * (a[i] + b[i]));
  }
  args[0].v_int64 = 1;
  EXPECT_EQ(Call(aot, "get_output", args, codes, 1, &ret, &rc), kTvmErrorFunctionCallInvalidArg);
  args[0].v_str = "zz";
  codes[0] = kTVMStr;
  EXPECT_EQ(Call(aot, "get_input", args, codes, 1, &ret, &rc), kTvmErrorExecutorModuleNoSuchInput);
  EXPECT_EQ(Call(aot, "load_params", args, codes, 1, &ret, &rc),
            kTvmErrorFunctionCallNotImplemented);
}

int main(void) {
  EXPECT_EQ(TVMInitializeRuntime(), 0);
  EXPECT_EQ(TVMModCreateFromCModule(&kModule, &g_mod), 0);
  RUN(test_run_model);
  RUN(test_bad_metadata);
  RUN(test_long_module_name);
  EXPECT_EQ(TVMAotExecutorModule_Register(), 0);
  RUN(test_aot_executor_module);
  return g_failures != 0;
}
