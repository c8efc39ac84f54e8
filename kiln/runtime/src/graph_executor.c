/*
 * The graph executor's run loop: one C call runs every operator of a graph.
 *
 * Entry points (called from kiln/runtime/graph_executor.py through ctypes):
 *   kiln_graph_run          run ops [begin, end) once, in order, the thread pool held hot
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
 * It is compiled with the other runtime sources into the one runtime support library
 * (kiln/runtime/native.py); every name carries the kiln_graph_ prefix.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif

#include <tvm/runtime/c_backend_api.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

/* One operator call; the layout is mirrored by a ctypes.Structure in graph_executor.py. */
typedef struct {
  TVMBackendPackedCFunc fn;
  TVMValue* args;  /* DLTensor* inputs then outputs */
  int* type_codes; /* all kTVMDLTensorHandle */
  int32_t num_args;
  int32_t reserved;
  void* resource_handle;
} KilnGraphOp;

static double kiln_graph_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t kiln_graph_call(const KilnGraphOp* op) {
  TVMValue ret_value;
  int ret_code = kTVMNullptr;
  ret_value.v_int64 = 0;
  return op->fn(op->args, op->type_codes, op->num_args, &ret_value, &ret_code,
                op->resource_handle);
}

static int32_t kiln_graph_run_ops(const KilnGraphOp* ops, int64_t begin, int64_t end,
                                  int64_t* failed_op) {
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

/* The pool stays hot for the whole run: the serial kernels between two parallel ones would
   otherwise let the workers fall asleep, and every parallel kernel would pay a wake-up. */
int32_t kiln_graph_run(const KilnGraphOp* ops, int64_t begin, int64_t end, int64_t* failed_op) {
  KilnRuntimePoolHold(1);
  int32_t rc = kiln_graph_run_ops(ops, begin, end, failed_op);
  KilnRuntimePoolHold(0);
  return rc;
}

int32_t kiln_graph_run_repeated(const KilnGraphOp* ops, int64_t begin, int64_t end,
                                int64_t number, int64_t* failed_op) {
  int32_t rc = 0;
  KilnRuntimePoolHold(1);
  for (int64_t k = 0; k < number && rc == 0; ++k) {
    rc = kiln_graph_run_ops(ops, begin, end, failed_op);
  }
  KilnRuntimePoolHold(0);
  return rc;
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

static uint64_t kiln_graph_nbytes(const DLTensor* t) {
  uint64_t n = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
  for (int32_t d = 0; d < t->ndim; ++d) n *= (uint64_t)t->shape[d];
  return n;
}

/* `__copy` node: args = {src DLTensor*, dst DLTensor*}. Every kiln device is host memory,
 * so a cross-device copy is a memcpy; sizes were checked when the executor was built. */
int kiln_graph_copy(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
                    int* out_ret_tcode, void* resource_handle) {
  (void)type_codes;
  (void)out_ret_value;
  (void)out_ret_tcode;
  (void)resource_handle;
  if (num_args != 2) {
    TVMAPISetLastError("__copy expects 2 arguments (source, destination)");
    return -1;
  }
  const DLTensor* src = (const DLTensor*)args[0].v_handle;
  DLTensor* dst = (DLTensor*)args[1].v_handle;
  uint64_t nbytes = kiln_graph_nbytes(src);
  if (nbytes != kiln_graph_nbytes(dst)) {
    TVMAPISetLastError("__copy: source and destination sizes differ");
    return -1;
  }
  memmove((char*)dst->data + dst->byte_offset, (const char*)src->data + src->byte_offset,
          (size_t)nbytes);
  return 0;
}
