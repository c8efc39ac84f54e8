/*
 * test_common.c - the CRT's C API, function registries, modules, packed functions, dtype
 * parsing and backend workspace, on the host platform template.
 */
#include <stdint.h>
#include <tvm/runtime/c_backend_api.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/func_registry.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/module.h>
#include <tvm/runtime/crt/packed_func.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_test.h"

static int AddOne(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* rh) {
  (void)rh;
  if (n != 1 || codes[0] != kTVMArgInt) return -1;
  ret->v_int64 = args[0].v_int64 + 1;
  *ret_code = kTVMArgInt;
  return 0;
}

static int Twice(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* rh) {
  (void)codes;
  (void)n;
  (void)rh;
  ret->v_int64 = args[0].v_int64 * 2;
  *ret_code = kTVMArgInt;
  return 0;
}

static int Fails(TVMValue* args, int* codes, int n, TVMValue* ret, int* ret_code, void* rh) {
  (void)args, (void)codes, (void)n, (void)ret, (void)ret_code, (void)rh;
  TVMAPISetLastError("kernel says no");
  return -1;
}

/* A registry exactly as generated system libraries lay it out. */
static const TVMBackendPackedCFunc kModFuncs[] = {&AddOne, &Twice, &Fails};
static const TVMFuncRegistry kModRegistry = {"\x03\x00" "add_one\0twice\0fails\0", kModFuncs};
static const TVMModule kModule = {&kModRegistry};

static void test_static_registry_lookup(void) {
  tvm_function_index_t idx = 99;
  TVMBackendPackedCFunc f = NULL;
  EXPECT_EQ(TVMFuncRegistry_GetNumFuncs(&kModRegistry), 3);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&kModRegistry, "twice", &idx), kTvmErrorNoError);
  EXPECT_EQ(idx, 1);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&kModRegistry, "fails", &idx), kTvmErrorNoError);
  EXPECT_EQ(idx, 2);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&kModRegistry, "twic", &idx), kTvmErrorFunctionNameNotFound);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&kModRegistry, "twice2", &idx), kTvmErrorFunctionNameNotFound);
  EXPECT_EQ(TVMFuncRegistry_GetByIndex(&kModRegistry, 1, &f), kTvmErrorNoError);
  EXPECT(f == &Twice);
  EXPECT_EQ(TVMFuncRegistry_GetByIndex(&kModRegistry, 3, &f), kTvmErrorFunctionIndexInvalid);
}

static void test_mutable_registry(void) {
  uint8_t buffer[96];
  TVMMutableFuncRegistry reg;
  tvm_function_index_t idx;
  TVMBackendPackedCFunc f;
  int added = 0;
  char name[8];
  EXPECT_EQ(TVMMutableFuncRegistry_Create(&reg, buffer, 8), kTvmErrorBufferTooSmall);
  EXPECT_EQ(TVMMutableFuncRegistry_Create(&reg, buffer + 1, sizeof(buffer) - 1),
            kTvmErrorNoError);
  EXPECT_EQ(TVMFuncRegistry_GetNumFuncs(&reg.registry), 0);
  EXPECT_EQ(TVMMutableFuncRegistry_Set(&reg, "f", &AddOne, 0), kTvmErrorNoError);
  EXPECT_EQ(TVMMutableFuncRegistry_Set(&reg, "f", &Twice, 0), kTvmErrorFunctionAlreadyDefined);
  EXPECT_EQ(TVMMutableFuncRegistry_Set(&reg, "f", &Twice, 1), kTvmErrorNoError);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&reg.registry, "f", &idx), kTvmErrorNoError);
  EXPECT_EQ(TVMFuncRegistry_GetByIndex(&reg.registry, idx, &f), kTvmErrorNoError);
  EXPECT(f == &Twice);
  /* Fill it: the registry reports full instead of writing past its buffer. */
  for (;;) {
    tvm_crt_error_t err;
    snprintf(name, sizeof(name), "g%d", added);
    err = TVMMutableFuncRegistry_Set(&reg, name, &AddOne, 0);
    if (err != kTvmErrorNoError) {
      EXPECT_EQ(err, kTvmErrorFunctionRegistryFull);
      break;
    }
    ++added;
  }
  EXPECT(added >= 2);
  EXPECT_EQ(TVMFuncRegistry_GetNumFuncs(&reg.registry), added + 1);
  EXPECT_EQ(TVMFuncRegistry_Lookup(&reg.registry, "g0", &idx), kTvmErrorNoError);
  EXPECT_EQ(idx, 1);
}

static void test_global_functions(void) {
  TVMFunctionHandle fh = NULL;
  TVMValue arg, ret;
  int code = kTVMArgInt, ret_code;
  EXPECT_EQ(TVMFuncRegisterGlobal("test.add_one", (TVMFunctionHandle)&AddOne, 0), 0);
  EXPECT_EQ(TVMFuncRegisterGlobal("test.add_one", (TVMFunctionHandle)&Twice, 0),
            kTvmErrorFunctionAlreadyDefined);
  EXPECT_ERROR_MENTIONS("already registered");
  EXPECT_EQ(TVMFuncGetGlobal("test.add_one", &fh), 0);
  arg.v_int64 = 41;
  EXPECT_EQ(TVMFuncCall(fh, &arg, &code, 1, &ret, &ret_code), 0);
  EXPECT_EQ(ret.v_int64, 42);
  EXPECT_EQ(ret_code, kTVMArgInt);
  EXPECT_EQ(TVMFuncGetGlobal("test.nope", &fh), kTvmErrorFunctionNameNotFound);
  EXPECT_ERROR_MENTIONS("'test.nope' not found");
  EXPECT(fh == NULL);
  /* Garbage handles are rejected, not dereferenced. */
  EXPECT_EQ(TVMFuncCall((TVMFunctionHandle)(uintptr_t)0x1234, &arg, &code, 1, &ret, &ret_code),
            kTvmErrorFunctionIndexInvalid);
  EXPECT_EQ(TVMFuncCall((TVMFunctionHandle)(uintptr_t)0x80008100u, &arg, &code, 1, &ret,
                        &ret_code),
            kTvmErrorFunctionIndexInvalid);
  /* No system library is linked into this test. */
  EXPECT_EQ(TVMFuncGetGlobal("runtime.SystemLib", &fh), 0);
  EXPECT(TVMFuncCall(fh, NULL, NULL, 0, &ret, &ret_code) != 0);
  EXPECT_ERROR_MENTIONS("no system library");
}

static TVMModuleHandle g_mod;

static void test_modules(void) {
  TVMModuleHandle mod = NULL, second;
  TVMFunctionHandle fh, getter;
  TVMValue args[3], ret;
  int codes[3] = {kTVMArgInt, 0, 0}, ret_code;
  EXPECT_EQ(TVMModCreateFromCModule(&kModule, &mod), 0);
  g_mod = mod;
  EXPECT_EQ(TVMModGetFunction(mod, "twice", 0, &fh), 0);
  args[0].v_int64 = 21;
  EXPECT_EQ(TVMFuncCall(fh, args, codes, 1, &ret, &ret_code), 0);
  EXPECT_EQ(ret.v_int64, 42);
  EXPECT_EQ(TVMModGetFunction(mod, "fails", 0, &fh), 0);
  EXPECT_EQ(TVMFuncCall(fh, args, codes, 1, &ret, &ret_code), -1);
  EXPECT_ERROR_MENTIONS("kernel says no");
  EXPECT_EQ(TVMModGetFunction(mod, "missing", 0, &fh), kTvmErrorFunctionNameNotFound);
  EXPECT_EQ(TVMModGetFunction((TVMModuleHandle)(uintptr_t)0x8005, "twice", 0, &fh),
            kTvmErrorFunctionIndexInvalid);
  /* The global registry and kModule take two of TVM_CRT_MAX_REGISTERED_MODULES slots. */
  {
    int i, status = 0;
    for (i = 2; i < TVM_CRT_MAX_REGISTERED_MODULES; ++i) {
      EXPECT_EQ(TVMModCreateFromCModule(&kModule, &second), 0);
    }
    status = TVMModCreateFromCModule(&kModule, &second);
    EXPECT_EQ(status, kTvmErrorFunctionRegistryFull);
    EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_REGISTERED_MODULES");
  }
  /* The RPC server's lookup returns null for a missing name instead of failing. */
  EXPECT_EQ(TVMFuncGetGlobal("tvm.rpc.server.ModuleGetFunction", &getter), 0);
  args[0].v_handle = mod;
  args[1].v_str = "twice";
  args[2].v_int64 = 0;
  codes[0] = kTVMModuleHandle;
  codes[1] = kTVMStr;
  codes[2] = kTVMArgInt;
  EXPECT_EQ(TVMFuncCall(getter, args, codes, 3, &ret, &ret_code), 0);
  EXPECT_EQ(ret_code, kTVMPackedFuncHandle);
  args[1].v_str = "missing";
  EXPECT_EQ(TVMFuncCall(getter, args, codes, 3, &ret, &ret_code), 0);
  EXPECT_EQ(ret_code, kTVMNullptr);
  codes[1] = kTVMArgInt;
  EXPECT_EQ(TVMFuncCall(getter, args, codes, 3, &ret, &ret_code),
            kTvmErrorFunctionCallWrongArgType);
}

static void test_packed_func_names(void) {
  TVMPackedFunc pf;
  TVMArgs args;
  char long_name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME + 8];
  memset(&args, 0, sizeof(args));
  EXPECT_EQ(TVMPackedFunc_InitGlobalFunc(&pf, "test.add_one", &args), 0);
  args.values[0].v_int64 = 1;
  args.tcodes[0] = kTVMArgInt;
  args.values_count = 1;
  pf.SetArgs(&pf, &args);
  EXPECT_EQ(pf.Call(&pf), 0);
  EXPECT_EQ(pf.ret_value.values[0].v_int64, 2);
  /* A name one character too long is refused, never truncated (TVM issue #8953). */
  memset(long_name, 'x', TVM_CRT_MAX_STRLEN_FUNCTION_NAME);
  long_name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME] = '\0';
  EXPECT_EQ(TVMPackedFunc_InitGlobalFunc(&pf, long_name, &args), kTvmErrorBufferTooSmall);
  EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_STRLEN_FUNCTION_NAME");
  long_name[TVM_CRT_MAX_STRLEN_FUNCTION_NAME - 1] = '\0';
  EXPECT_EQ(TVMPackedFunc_InitGlobalFunc(&pf, long_name, &args), kTvmErrorFunctionNameNotFound);
}

static void test_dtype_strings(void) {
  DLDataType t;
  EXPECT_EQ(TVMParseDLDataType("float32", &t), 0);
  EXPECT(t.code == kDLFloat && t.bits == 32 && t.lanes == 1);
  EXPECT_EQ(TVMParseDLDataType("int8", &t), 0);
  EXPECT(t.code == kDLInt && t.bits == 8);
  EXPECT_EQ(TVMParseDLDataType("uint16x4", &t), 0);
  EXPECT(t.code == kDLUInt && t.bits == 16 && t.lanes == 4);
  EXPECT_EQ(TVMParseDLDataType("bool", &t), 0);
  EXPECT(t.code == kDLUInt && t.bits == 1);
  EXPECT_EQ(TVMParseDLDataType("bfloat16", &t), 0);
  EXPECT(t.code == kDLBfloat && t.bits == 16);
  EXPECT_EQ(TVMParseDLDataType("float", &t), 0);
  EXPECT(t.bits == 32);
  EXPECT_EQ(TVMParseDLDataType("float32x", &t), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(TVMParseDLDataType("int999", &t), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(TVMParseDLDataType("complex64", &t), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("complex64");
  EXPECT_EQ(TVMParseDLDataType("", &t), kTvmErrorFunctionCallInvalidArg);
  t = String2DLDataType("nonsense");
  EXPECT(t.bits == 0);
}

static void test_arrays_and_workspace(void) {
  int64_t shape[2] = {3, 5};
  int64_t bad_shape[7] = {1, 1, 1, 1, 1, 1, 1};
  TVMArrayHandle a, b;
  void* ws;
  EXPECT_EQ(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCPU, 0, &a), 0);
  EXPECT_EQ(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCPU, 0, &b), 0);
  EXPECT(a->ndim == 2 && a->shape[1] == 5);
  ((float*)a->data)[14] = 7.0f;
  EXPECT_EQ(TVMDeviceCopyDataFromTo(a, b, NULL), 0);
  EXPECT(((float*)b->data)[14] == 7.0f);
  shape[1] = 4;
  EXPECT_EQ(TVMArrayFree(b), 0);
  EXPECT_EQ(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCPU, 0, &b), 0);
  EXPECT_EQ(TVMDeviceCopyDataFromTo(a, b, NULL), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("size mismatch");
  EXPECT_EQ(TVMArrayFree(a), 0);
  EXPECT_EQ(TVMArrayFree(b), 0);
  EXPECT_EQ(TVMArrayAlloc(bad_shape, 7, kDLFloat, 32, 1, kDLCPU, 0, &a),
            kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("TVM_CRT_MAX_NDIM");
  shape[0] = -1;
  EXPECT_EQ(TVMArrayAlloc(shape, 2, kDLFloat, 32, 1, kDLCPU, 0, &a),
            kTvmErrorFunctionCallInvalidArg);
  /* Workspace exhaustion is a NULL with a message, not a crash. */
  ws = TVMBackendAllocWorkspace(kDLCPU, 0, (uint64_t)1 << 40, 2, 32);
  EXPECT(ws == NULL);
  EXPECT_ERROR_MENTIONS("cannot allocate");
  ws = TVMBackendAllocWorkspace(kDLCPU, 0, 1000, 2, 32);
  EXPECT(ws != NULL);
  EXPECT_EQ(TVMBackendFreeWorkspace(kDLCPU, 0, ws), 0);
  EXPECT(TVMBackendFreeWorkspace(kDLCPU, 0, ws) != 0); /* double free is reported */
}

static int CountTask(int task_id, TVMParallelGroupEnv* env, void* cdata) {
  int* seen = (int*)cdata;
  seen[task_id] += env->num_task;
  return 0;
}

static void test_serial_parallel_launch(void) {
  int seen[4] = {0, 0, 0, 0};
  EXPECT_EQ(TVMBackendParallelLaunch(&CountTask, seen, 4), 0);
  EXPECT(seen[0] == 4 && seen[3] == 4);
  EXPECT_EQ(TVMBackendParallelLaunch(&CountTask, seen, 0), 0);
  EXPECT(seen[0] == 5 && seen[1] == 4);
}

static void test_platform_template_timer_and_random(void) {
  double seconds = -1.0;
  volatile double sink = 0.0;
  int i, nonzero = 0;
  uint8_t bytes[64];
  TVMFunctionHandle fill;
  TVMValue arg, ret;
  int code = kTVMDLTensorHandle, ret_code;
  int64_t shape[1] = {64};
  DLTensor t = {bytes, {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, shape, NULL, 0};
  EXPECT_EQ(TVMPlatformTimerStop(&seconds), kTvmErrorPlatformTimerBadState);
  EXPECT_EQ(TVMPlatformTimerStart(), kTvmErrorNoError);
  EXPECT_EQ(TVMPlatformTimerStart(), kTvmErrorPlatformTimerBadState);
  for (i = 0; i < 100000; ++i) sink += i;
  EXPECT_EQ(TVMPlatformTimerStop(&seconds), kTvmErrorNoError);
  EXPECT(seconds >= 0.0 && seconds < 10.0);
  memset(bytes, 0, sizeof(bytes));
  EXPECT_EQ(TVMFuncGetGlobal("tvm.contrib.random.random_fill", &fill), 0);
  arg.v_handle = &t;
  EXPECT_EQ(TVMFuncCall(fill, &arg, &code, 1, &ret, &ret_code), 0);
  for (i = 0; i < 64; ++i) nonzero += bytes[i] != 0;
  EXPECT(nonzero > 32);
  code = kTVMArgInt;
  EXPECT_EQ(TVMFuncCall(fill, &arg, &code, 1, &ret, &ret_code), kTvmErrorFunctionCallWrongArgType);
}

static void test_time_evaluator(void) {
  TVMFunctionHandle make, evaluator, stale, max_packet;
  TVMValue args[12], ret;
  int codes[12], rc, i;
  TVMByteArray* result;
  const char* fields[] = {"twice", "", ""};
  for (i = 0; i < 12; ++i) {
    codes[i] = kTVMArgInt;
    args[i].v_int64 = 0;
  }
  codes[0] = kTVMModuleHandle;
  args[0].v_handle = g_mod;
  codes[1] = codes[11] = kTVMStr;
  args[1].v_str = fields[0];
  args[11].v_str = fields[1];
  args[2].v_int64 = kDLCPU;
  args[4].v_int64 = 2;  /* number */
  args[5].v_int64 = 3;  /* repeat */
  args[6].v_int64 = 1;  /* min_repeat_ms */
  args[7].v_int64 = 100;
  EXPECT_EQ(TVMFuncGetGlobal("runtime.RPCTimeEvaluator", &make), 0);
  EXPECT_EQ(TVMFuncCall(make, args, codes, 12, &ret, &rc), 0);
  EXPECT_EQ(rc, kTVMPackedFuncHandle);
  evaluator = ret.v_handle;
  {
    TVMValue x;
    int x_code = kTVMArgInt;
    x.v_int64 = 21;
    EXPECT_EQ(TVMFuncCall(evaluator, &x, &x_code, 1, &ret, &rc), 0);
  }
  EXPECT_EQ(rc, kTVMBytes);
  result = (TVMByteArray*)ret.v_handle;
  EXPECT_EQ(result->size, 3 * sizeof(double));
  for (i = 0; i < 3; ++i) EXPECT(((const double*)result->data)[i] > 0.0);
  EXPECT_EQ(TVMByteArrayFree(result), 0);
  /* A newer evaluator makes the older handle stale. */
  stale = evaluator;
  EXPECT_EQ(TVMFuncCall(make, args, codes, 12, &ret, &rc), 0);
  EXPECT_EQ(TVMFuncCall(stale, args, codes, 1, &ret, &rc), kTvmErrorTimeEvaluatorBadHandle);
  args[8].v_int64 = 10; /* cooldown: the CRT cannot sleep */
  EXPECT_EQ(TVMFuncCall(make, args, codes, 12, &ret, &rc), kTvmErrorFunctionCallNotImplemented);
  args[8].v_int64 = 0;
  args[5].v_int64 = 0;
  EXPECT_EQ(TVMFuncCall(make, args, codes, 12, &ret, &rc), kTvmErrorFunctionCallInvalidArg);
  EXPECT_EQ(TVMFuncCall(make, args, codes, 11, &ret, &rc), kTvmErrorFunctionCallNumArguments);
  EXPECT_EQ(TVMFuncGetGlobal("tvm.rpc.server.GetCRTMaxPacketSize", &max_packet), 0);
  EXPECT_EQ(TVMFuncCall(max_packet, args, codes, 0, &ret, &rc), 0);
  EXPECT_EQ(ret.v_int64, TVM_CRT_MAX_PACKET_SIZE_BYTES - 11);
}

static void test_last_error_truncation(void) {
  char big[1000];
  memset(big, 'e', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  TVMAPISetLastError(big);
  EXPECT_EQ(strlen(TVMGetLastError()), TVM_CRT_MAX_STRLEN_ERROR - 1);
  EXPECT(strcmp(TVMGetLastError() + TVM_CRT_MAX_STRLEN_ERROR - 4, "...") == 0);
}

int main(void) {
  TVMFunctionHandle fh;
  EXPECT_EQ(TVMFuncGetGlobal("runtime.SystemLib", &fh), kTvmErrorPlatformCheckFailure);
  EXPECT_ERROR_MENTIONS("TVMInitializeRuntime");
  EXPECT_EQ(TVMPlatformInitialize(), kTvmErrorNoError);
  EXPECT_EQ(TVMInitializeRuntime(), kTvmErrorNoError);
  EXPECT_EQ(TVMInitializeRuntime(), kTvmErrorPlatformMemoryManagerInitialized);
  RUN(test_static_registry_lookup);
  RUN(test_mutable_registry);
  RUN(test_global_functions);
  RUN(test_modules);
  RUN(test_packed_func_names);
  RUN(test_dtype_strings);
  RUN(test_arrays_and_workspace);
  RUN(test_serial_parallel_launch);
  RUN(test_platform_template_timer_and_random);
  RUN(test_time_evaluator);
  RUN(test_last_error_truncation);
  return g_failures != 0;
}
