/*
 * The graph executor's run loop: one C call runs every operator of a graph.
 *
 * Entry points (called from kiln/runtime/graph_executor.py through ctypes):
 *   kiln_graph_run          run ops [begin, end) once, in order
 *   kiln_graph_run_repeated run ops [begin, end) `number` times (benchmark loop)
 *   kiln_graph_run_timed    run each op `number` times and record its mean seconds (debugger)
 *   kiln_graph_copy         packed function behind `__copy` nodes (copy input to output)
 *
 * The Python side builds one KilnGraphOp record per operator when the executor is created:
 * the kernel's packed-function pointer and the TVMValue/type-code arrays (DLTensor* inputs
 * then outputs, type code kTVMDLTensorHandle). Running allocates and converts nothing.
 * On a nonzero kernel return the loop stops, stores the failing op's index and returns the
 * kernel's code; the Python side reads the kernel's last-error message and names the node.
 *
 * This file is self-contained (no kiln headers) so it compiles alongside the other runtime
 * sources into the one runtime support library; every name carries the kiln_graph_ prefix.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

/* TVM's packed calling convention for generated kernels (TVMBackendPackedCFunc). */
typedef int32_t (*kiln_graph_packed_fn)(void* args, int32_t* type_codes, int32_t num_args,
                                        void* out_ret_value, int32_t* out_ret_tcode,
                                        void* resource_handle);

/* One operator call; the layout is mirrored by a ctypes.Structure in graph_executor.py. */
typedef struct {
  kiln_graph_packed_fn fn;
  void* args;          /* TVMValue[num_args] */
  int32_t* type_codes; /* int[num_args] */
  int32_t num_args;
  int32_t reserved;
  void* resource_handle;
} KilnGraphOp;

/* The DLTensor layout from dlpack.h, needed by the __copy node. */
typedef struct {
  void* data;
  int32_t device_type;
  int32_t device_id;
  int32_t ndim;
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} KilnGraphDLTensor;

/* The TVMValue union (8 bytes); the loop only needs somewhere to put a kernel's result. */
typedef union {
  int64_t v_int64;
  double v_float64;
  void* v_handle;
} KilnGraphValue;

static double kiln_graph_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t kiln_graph_call(const KilnGraphOp* op) {
  KilnGraphValue ret_value;
  int32_t ret_code = 4; /* kTVMNullptr */
  ret_value.v_int64 = 0;
  return op->fn(op->args, op->type_codes, op->num_args, &ret_value, &ret_code,
                op->resource_handle);
}

int32_t kiln_graph_run(const KilnGraphOp* ops, int64_t begin, int64_t end, int64_t* failed_op) {
  for (int64_t i = begin; i < end; ++i) {
    int32_t rc = kiln_graph_call(&ops[i]);
    if (rc != 0) {
      *failed_op = i;
      return rc;
    }
  }
  *failed_op = -1;
  return 0;
}

int32_t kiln_graph_run_repeated(const KilnGraphOp* ops, int64_t begin, int64_t end,
                                int64_t number, int64_t* failed_op) {
  for (int64_t k = 0; k < number; ++k) {
    int32_t rc = kiln_graph_run(ops, begin, end, failed_op);
    if (rc != 0) return rc;
  }
  return 0;
}

int32_t kiln_graph_run_timed(const KilnGraphOp* ops, int64_t num_ops, int64_t number,
                             double* seconds_per_op, int64_t* failed_op) {
  if (number < 1) number = 1;
  for (int64_t i = 0; i < num_ops; ++i) {
    double start = kiln_graph_now_seconds();
    for (int64_t k = 0; k < number; ++k) {
      int32_t rc = kiln_graph_call(&ops[i]);
      if (rc != 0) {
        *failed_op = i;
        return rc;
      }
    }
    seconds_per_op[i] = (kiln_graph_now_seconds() - start) / (double)number;
  }
  *failed_op = -1;
  return 0;
}

static uint64_t kiln_graph_nbytes(const KilnGraphDLTensor* t) {
  uint64_t n = ((uint64_t)t->bits * t->lanes + 7) / 8;
  for (int32_t d = 0; d < t->ndim; ++d) n *= (uint64_t)t->shape[d];
  return n;
}

/* `__copy` node: args = {src DLTensor*, dst DLTensor*}. Every kiln device is host memory,
 * so a cross-device copy is a memcpy; sizes were checked when the executor was built. */
int32_t kiln_graph_copy(void* args, int32_t* type_codes, int32_t num_args, void* out_ret_value,
                        int32_t* out_ret_tcode, void* resource_handle) {
  (void)type_codes;
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  if (num_args != 2) return -1;
  KilnGraphValue* values = (KilnGraphValue*)args;
  const KilnGraphDLTensor* src = (const KilnGraphDLTensor*)values[0].v_handle;
  KilnGraphDLTensor* dst = (KilnGraphDLTensor*)values[1].v_handle;
  uint64_t nbytes = kiln_graph_nbytes(src);
  if (nbytes != kiln_graph_nbytes(dst)) return -1;
  memmove((char*)dst->data + dst->byte_offset, (const char*)src->data + src->byte_offset,
          (size_t)nbytes);
  return 0;
}
