/*
 * test_graph_module.c - "tvm.graph_executor.create" and the graph executor module's functions
 * (the interface host-driven microTVM calls over RPC), on a hand-written one-op graph.
 */
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/graph_executor_module.h>
#include <tvm/runtime/crt/internal/common/ndarray.h>
#include <tvm/runtime/crt/module.h>

#include "crt_test.h"
#include "test_platform.h"

/* out = x + 1 over float32[4] */
static int AddOne(TVMValue* args, int* codes, int n, TVMValue* ret, int* rc, void* rh) {
  int i;
  (void)codes, (void)ret, (void)rc, (void)rh;
  if (n != 2) return -1;
  for (i = 0; i < 4; ++i) {
    ((float*)((DLTensor*)args[1].v_handle)->data)[i] =
        ((float*)((DLTensor*)args[0].v_handle)->data)[i] + 1.0f;
  }
  return 0;
}

static const TVMBackendPackedCFunc kFuncs[] = {&AddOne};
static const TVMFuncRegistry kRegistry = {"\001\000add_one\0", kFuncs};
static const TVMModule kKernels = {&kRegistry};

static const char* kGraph =
    "{\"nodes\": [{\"op\": \"null\", \"name\": \"x\", \"inputs\": []},"
    " {\"op\": \"tvm_op\", \"name\": \"add\", \"attrs\": {\"func_name\": \"add_one\","
    " \"num_inputs\": \"1\", \"num_outputs\": \"1\", \"flatten_data\": \"0\"},"
    " \"inputs\": [[0, 0, 0]]}],"
    " \"arg_nodes\": [0], \"heads\": [[1, 0, 0]],"
    " \"attrs\": {\"dltype\": [\"list_str\", [\"float32\", \"float32\"]],"
    " \"shape\": [\"list_shape\", [[4], [4]]], \"storage_id\": [\"list_int\", [0, 1]]},"
    " \"node_row_ptr\": [0, 1, 2]}";

static TVMModuleHandle g_kernels, g_graph;

/* Call function `name` of the graph executor module. */
static int Call(const char* name, TVMValue* args, int* codes, int n, TVMValue* ret, int* rc) {
  TVMFunctionHandle f;
  int status = TVMModGetFunction(g_graph, name, 0, &f);
  if (status != 0) return status;
  return TVMFuncCall(f, args, codes, n, ret, rc);
}

static void test_create(void) {
  TVMFunctionHandle create;
  TVMValue args[4], ret;
  int codes[4] = {kTVMStr, kTVMModuleHandle, kTVMArgInt, kTVMArgInt}, rc;
  EXPECT_EQ(TVMFuncGetGlobal("tvm.graph_executor.create", &create), 0);
  args[0].v_str = kGraph;
  args[1].v_handle = g_kernels;
  args[2].v_int64 = kDLCPU;
  args[3].v_int64 = 1;
  EXPECT_EQ(TVMFuncCall(create, args, codes, 4, &ret, &rc), kTvmErrorExecutorModuleBadContext);
  args[3].v_int64 = 0;
  EXPECT_EQ(TVMFuncCall(create, args, codes, 3, &ret, &rc), kTvmErrorFunctionCallNumArguments);
  EXPECT_EQ(TVMFuncCall(create, args, codes, 4, &ret, &rc), 0);
  EXPECT_EQ(rc, kTVMModuleHandle);
  g_graph = ret.v_handle;
  EXPECT_EQ(TVMFuncCall(create, args, codes, 4, &ret, &rc),
            kTvmErrorExecutorModuleAlreadyCreated);
}

static void test_module_functions(void) {
  float x[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  int64_t shape[1] = {4};
  DLTensor in_t = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor out_t = {out, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  TVMValue args[2], ret;
  int codes[2], rc, i;
  EXPECT_EQ(Call("get_num_inputs", args, codes, 0, &ret, &rc), 0);
  EXPECT_EQ(ret.v_int64, 1);
  EXPECT_EQ(Call("get_num_outputs", args, codes, 0, &ret, &rc), 0);
  EXPECT_EQ(ret.v_int64, 1);
  args[0].v_str = "x";
  codes[0] = kTVMStr;
  EXPECT_EQ(Call("get_input_index", args, codes, 1, &ret, &rc), 0);
  EXPECT_EQ(ret.v_int64, 0);
  args[1].v_handle = &in_t;
  codes[1] = kTVMDLTensorHandle;
  EXPECT_EQ(Call("set_input", args, codes, 2, &ret, &rc), 0);
  x[0] = 100; /* set_input copied: this change is not seen */
  EXPECT_EQ(Call("run", args, codes, 0, &ret, &rc), 0);
  args[0].v_int64 = 0;
  codes[0] = kTVMArgInt;
  args[1].v_handle = &out_t;
  EXPECT_EQ(Call("get_output", args, codes, 2, &ret, &rc), 0);
  for (i = 0; i < 4; ++i) EXPECT(out[i] == (float)i + 2.0f);
  EXPECT_EQ(Call("get_output", args, codes, 1, &ret, &rc), 0);
  EXPECT_EQ(rc, kTVMNDArrayHandle);
  EXPECT(((float*)((DLTensor*)ret.v_handle)->data)[3] == 5.0f);
  args[0].v_str = "x";
  codes[0] = kTVMStr;
  EXPECT_EQ(Call("get_input", args, codes, 1, &ret, &rc), 0);
  EXPECT(((float*)((DLTensor*)ret.v_handle)->data)[0] == 1.0f);
}

static void test_module_errors(void) {
  TVMValue args[2], ret;
  int codes[2], rc;
  args[0].v_str = "nope";
  codes[0] = kTVMStr;
  EXPECT_EQ(Call("get_input", args, codes, 1, &ret, &rc), kTvmErrorExecutorModuleNoSuchInput);
  EXPECT_ERROR_MENTIONS("Could not find 'nope'");
  args[0].v_int64 = 1;
  codes[0] = kTVMArgInt;
  EXPECT_EQ(Call("get_output", args, codes, 1, &ret, &rc), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("out of range");
  EXPECT_EQ(Call("get_input_index", args, codes, 1, &ret, &rc),
            kTvmErrorFunctionCallWrongArgType);
  EXPECT_EQ(Call("share_params", args, codes, 0, &ret, &rc),
            kTvmErrorFunctionCallNotImplemented);
}

static void test_load_params(void) {
  /* A params blob with x = [10, 20, 30, 40], written with the CRT's NDArray saver. */
  static char blob[256];
  TVMNDArray arr;
  int64_t shape[1] = {4};
  DLDevice dev = {kDLCPU, 0};
  DLDataType f32 = {kDLFloat, 32, 1};
  float values[4] = {10, 20, 30, 40}, out[4];
  DLTensor out_t = {out, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  TVMByteArray bytes;
  TVMValue args[2], ret;
  int codes[2], rc;
  size_t n, head = 0;
  uint64_t header[4] = {0xF7E58D4F05049CB7ULL, 0, 1, 1};
  memcpy(blob, header, 24); /* magic, reserved, one name (host is little endian) */
  head = 24;
  memcpy(blob + head, &header[3], 8); /* its length: 1 */
  blob[head + 8] = 'x';
  head += 9;
  memcpy(blob + head, &header[3], 8); /* one array */
  head += 8;
  EXPECT_EQ(TVMNDArray_Create(1, shape, f32, dev, &arr), 0);
  arr.dl_tensor.data = values;
  EXPECT_EQ(TVMNDArray_Save(&arr, blob + head, sizeof(blob) - head, &n), 0);
  bytes.data = blob;
  bytes.size = head + n;
  args[0].v_handle = &bytes;
  codes[0] = kTVMBytes;
  EXPECT_EQ(Call("load_params", args, codes, 1, &ret, &rc), 0);
  EXPECT_EQ(Call("run", args, codes, 0, &ret, &rc), 0);
  args[0].v_int64 = 0;
  codes[0] = kTVMArgInt;
  args[1].v_handle = &out_t;
  codes[1] = kTVMDLTensorHandle;
  EXPECT_EQ(Call("get_output", args, codes, 2, &ret, &rc), 0);
  EXPECT(out[0] == 11.0f && out[3] == 41.0f);
  bytes.size = head + n - 1;
  args[0].v_handle = &bytes;
  codes[0] = kTVMBytes;
  EXPECT_EQ(Call("load_params", args, codes, 1, &ret, &rc), kTvmErrorFunctionCallInvalidArg);
  EXPECT_ERROR_MENTIONS("truncated");
}

int main(void) {
  EXPECT_EQ(TVMInitializeRuntime(), 0);
  EXPECT_EQ(TVMGraphExecutorModule_Register(), 0);
  EXPECT_EQ(TVMModCreateFromCModule(&kKernels, &g_kernels), 0);
  RUN(test_create);
  RUN(test_module_functions);
  RUN(test_module_errors);
  RUN(test_load_params);
  return g_failures != 0;
}
