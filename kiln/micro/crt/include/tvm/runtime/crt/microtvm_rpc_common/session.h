/*
 * session.h - microTVM's session layer in C (the device end; TVM v0.16's session.cc). The
 * host end and the format are described in kiln/micro/session_layer.py.
 *
 * Use: MicroTVMSession_Initialize(...) at boot (sends TerminateSession so a host mid-session
 * learns of the reset), hand MicroTVMSession_PacketDone to the unframer as its packet_done, and
 * send with MicroTVMSession_SendMessage or Start/SendBodyChunk/FinishMessage.
 */
#ifndef TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_SESSION_H_
#define TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_SESSION_H_

#include <stddef.h>
#include <stdint.h>
#include <tvm/runtime/crt/error_codes.h>
#include <tvm/runtime/crt/microtvm_rpc_common/framing.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  kMicroTVMStartSessionInit = 0x00,
  kMicroTVMStartSessionReply = 0x01,
  kMicroTVMTerminateSession = 0x02,
  kMicroTVMLog = 0x03,
  kMicroTVMNormal = 0x10,
} MicroTVMMessageType;

typedef enum {
  kMicroTVMSessionReset = 0,
  kMicroTVMSessionNoSessionEstablished = 1,
  kMicroTVMSessionStartSessionSent = 2,
  kMicroTVMSessionEstablished = 3,
} MicroTVMSessionState;

#define MICROTVM_SESSION_VERSION 1
#define MICROTVM_SESSION_HEADER_SIZE 3
#define MICROTVM_INVALID_NONCE 0

/*
 * A message for the user: kMicroTVMNormal and kMicroTVMLog with their body; also
 * kMicroTVMStartSessionReply (session established) and kMicroTVMTerminateSession (host ended
 * it) with an empty body.
 */
typedef void (*MicroTVMMessageReceivedFunc)(void* context, MicroTVMMessageType type,
                                            const uint8_t* body, size_t size);

typedef struct {
  MicroTVMFramer* framer;
  MicroTVMMessageReceivedFunc message_received;
  void* context;
  MicroTVMSessionState state;
  uint8_t local_nonce;
  uint16_t session_id; /* initiator nonce | responder nonce << 8 */
} MicroTVMSession;

tvm_crt_error_t MicroTVMSession_Initialize(MicroTVMSession* session, MicroTVMFramer* framer,
                                           uint8_t initial_nonce,
                                           MicroTVMMessageReceivedFunc message_received,
                                           void* context);
/* Initiate a session (the device side normally waits for the host to). */
tvm_crt_error_t MicroTVMSession_StartSession(MicroTVMSession* session);
tvm_crt_error_t MicroTVMSession_TerminateSession(MicroTVMSession* session);
int MicroTVMSession_IsEstablished(const MicroTVMSession* session);
/* kTvmErrorSessionInvalidState unless established (kMicroTVMLog may always be sent). */
tvm_crt_error_t MicroTVMSession_SendMessage(MicroTVMSession* session, MicroTVMMessageType type,
                                            const uint8_t* body, size_t size);
tvm_crt_error_t MicroTVMSession_StartMessage(MicroTVMSession* session, MicroTVMMessageType type,
                                             size_t body_size);
tvm_crt_error_t MicroTVMSession_SendBodyChunk(MicroTVMSession* session, const uint8_t* chunk,
                                              size_t size);
tvm_crt_error_t MicroTVMSession_FinishMessage(MicroTVMSession* session);
/* The unframer's packet_done: `context` is the MicroTVMSession. */
void MicroTVMSession_PacketDone(void* context, const uint8_t* payload, size_t size, int crc_ok);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_SESSION_H_ */
