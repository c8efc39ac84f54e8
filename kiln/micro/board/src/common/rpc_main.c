/* A host-driven microTVM program: the CRT with the model's system library and both executor
 * modules, serving TVM RPC over the console link (stdin/stdout on the host, the UART under
 * QEMU) through the microTVM session layer. The host drives it with tvm.micro.Session.
 *
 * A kShutdown ends one RPC session; the program then waits for the next StartSession. It exits
 * when the link closes (host board) and, like every kiln program, on TVMPlatformAbort, which
 * the host can trigger through the global "kiln.testing.abort" (to test device resets).
 * "kiln.testing.log" sends a TVMLogf line, which reaches the host's log.
 */
#include <tvm/runtime/crt/aot_executor_module.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/graph_executor_module.h>
#include <tvm/runtime/crt/logging.h>
#include <tvm/runtime/crt/microtvm_rpc_server.h>
#include <tvm/runtime/crt/platform.h>

#include "kiln_board.h"

static int abort_device(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_value,
                        int* ret_type_code, void* resource_handle) {
  (void)args, (void)type_codes, (void)num_args, (void)ret_value, (void)ret_type_code;
  (void)resource_handle;
  TVMPlatformAbort(kTvmErrorPlatformCheckFailure);
}

/* kiln.testing.log(text): TVMLogf("kiln.testing.log: %s", text), to test log routing. */
static int log_text(TVMValue* args, int* type_codes, int num_args, TVMValue* ret_value,
                    int* ret_type_code, void* resource_handle) {
  (void)ret_value, (void)resource_handle;
  if (num_args != 1 || type_codes[0] != kTVMStr) {
    TVMAPISetLastError("kiln.testing.log takes one string");
    return -1;
  }
  TVMLogf("kiln.testing.log: %s\n", args[0].v_str);
  *ret_type_code = kTVMNullptr;
  return 0;
}

static ssize_t write_console(void* context, const uint8_t* data, size_t nbytes) {
  (void)context;
  kiln_board_send(data, nbytes);
  return (ssize_t)nbytes;
}

int main(int argc, char** argv) {
  kiln_board_init(argc, argv);
  if (TVMPlatformInitialize() != kTvmErrorNoError || TVMInitializeRuntime() != kTvmErrorNoError ||
      TVMGraphExecutorModule_Register() != kTvmErrorNoError ||
      TVMAotExecutorModule_Register() != kTvmErrorNoError ||
      TVMFuncRegisterGlobal("kiln.testing.abort", (TVMFunctionHandle)&abort_device, 0) != 0 ||
      TVMFuncRegisterGlobal("kiln.testing.log", (TVMFunctionHandle)&log_text, 0) != 0) {
    kiln_board_puts("kiln-error: runtime initialization failed");
    kiln_board_exit(KILN_EXIT_INIT);
  }
  microtvm_rpc_server_t server = MicroTVMRpcServerInit(write_console, NULL);
  if (server == NULL) {
    kiln_board_puts("kiln-error: no memory for the RPC server");
    kiln_board_exit(KILN_EXIT_INIT);
  }
  for (;;) {
    uint8_t buf[256];
    size_t n = kiln_board_receive(buf, sizeof(buf));
    if (n == 0) kiln_board_exit(KILN_EXIT_OK);
    uint8_t* data = buf;
    /* kTvmErrorPlatformShutdown: the RPC session ended; serve the next one. */
    (void)MicroTVMRpcServerLoop(server, &data, &n);
  }
}
