/*
 * microtvm_rpc_server.h - the on-device RPC server of host-driven microTVM (TVM v0.16's API).
 *
 * Bytes from the host go through the unframer and session layer; each Normal message carries
 * TVM RPC packets (the MinRPC subset: InitServer, CallFunc, Copy{To,From}Remote, GetGlobalFunc,
 * FreeHandle, device memory syscalls, Shutdown), answered through the framer.
 */
#ifndef TVM_RUNTIME_CRT_MICROTVM_RPC_SERVER_H_
#define TVM_RUNTIME_CRT_MICROTVM_RPC_SERVER_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Write up to num_bytes to the host; returns bytes written (> 0) or a negative error. */
typedef ssize_t (*microtvm_rpc_channel_write_t)(void* context, const uint8_t* data,
                                                size_t num_bytes);

typedef void* microtvm_rpc_server_t;

/*
 * Allocate the server (receive buffers of TVM_CRT_MAX_PACKET_SIZE_BYTES through
 * TVMPlatformMemoryAllocate) and announce the boot to the host (TerminateSession). Call after
 * TVMInitializeRuntime. NULL when memory runs out.
 */
microtvm_rpc_server_t MicroTVMRpcServerInit(microtvm_rpc_channel_write_t write_func,
                                            void* write_func_ctx);

/*
 * Feed bytes received from the host; *new_data / *new_data_size_bytes are advanced past what
 * was consumed (all of it). Returns kTvmErrorPlatformShutdown once the host shut the RPC
 * session down, else kTvmErrorNoError.
 */
tvm_crt_error_t MicroTVMRpcServerLoop(microtvm_rpc_server_t server, uint8_t** new_data,
                                      size_t* new_data_size_bytes);

/* Send a log line to the host (a session Log message; allowed before a session exists). */
void MicroTVMRpcServerLog(microtvm_rpc_server_t server, const char* text);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_MICROTVM_RPC_SERVER_H_ */
