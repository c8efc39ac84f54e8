/*
 * session.c - the device end of microTVM's session layer (see session.h).
 *
 * Handshake as TVM v0.16: a StartSessionInit with a valid initiator nonce is answered with a
 * fresh responder nonce; when both ends initiated at once the lower nonce wins and a tie
 * restarts. Packets with a bad CRC or too short for a header are dropped.
 */
#include <tvm/runtime/crt/microtvm_rpc_common/session.h>

static uint8_t InitiatorNonce(uint16_t session_id) { return (uint8_t)(session_id & 0xFF); }

static uint8_t ResponderNonce(uint16_t session_id) { return (uint8_t)(session_id >> 8); }

static void RegenerateNonce(MicroTVMSession* session) {
  uint8_t n = session->local_nonce;
  n = (uint8_t)((uint8_t)((n << 5) | (n >> 5)) + 1);
  if (n == MICROTVM_INVALID_NONCE) n++;
  session->local_nonce = n;
}

tvm_crt_error_t MicroTVMSession_StartMessage(MicroTVMSession* session, MicroTVMMessageType type,
                                             size_t body_size) {
  uint16_t id = type == kMicroTVMLog ? 0 : session->session_id;
  uint8_t header[MICROTVM_SESSION_HEADER_SIZE];
  tvm_crt_error_t err;
  header[0] = (uint8_t)id;
  header[1] = (uint8_t)(id >> 8);
  header[2] = (uint8_t)type;
  err = MicroTVMFramer_StartPacket(session->framer, body_size + sizeof(header));
  if (err != kTvmErrorNoError) return err;
  return MicroTVMFramer_WritePayloadChunk(session->framer, header, sizeof(header));
}

tvm_crt_error_t MicroTVMSession_SendBodyChunk(MicroTVMSession* session, const uint8_t* chunk,
                                              size_t size) {
  return MicroTVMFramer_WritePayloadChunk(session->framer, chunk, size);
}

tvm_crt_error_t MicroTVMSession_FinishMessage(MicroTVMSession* session) {
  return MicroTVMFramer_FinishPacket(session->framer);
}

static tvm_crt_error_t SendInternal(MicroTVMSession* session, MicroTVMMessageType type,
                                    const uint8_t* body, size_t size) {
  tvm_crt_error_t err = MicroTVMSession_StartMessage(session, type, size);
  if (err == kTvmErrorNoError && size > 0) err = MicroTVMSession_SendBodyChunk(session, body, size);
  if (err == kTvmErrorNoError) err = MicroTVMSession_FinishMessage(session);
  return err;
}

tvm_crt_error_t MicroTVMSession_Initialize(MicroTVMSession* session, MicroTVMFramer* framer,
                                           uint8_t initial_nonce,
                                           MicroTVMMessageReceivedFunc message_received,
                                           void* context) {
  session->framer = framer;
  session->message_received = message_received;
  session->context = context;
  session->local_nonce = initial_nonce;
  return MicroTVMSession_TerminateSession(session);
}

tvm_crt_error_t MicroTVMSession_TerminateSession(MicroTVMSession* session) {
  session->session_id = 0;
  session->state = kMicroTVMSessionNoSessionEstablished;
  return SendInternal(session, kMicroTVMTerminateSession, NULL, 0);
}

tvm_crt_error_t MicroTVMSession_StartSession(MicroTVMSession* session) {
  static const uint8_t kVersion = MICROTVM_SESSION_VERSION;
  tvm_crt_error_t err;
  if (session->state == kMicroTVMSessionReset) return kTvmErrorSessionInvalidState;
  RegenerateNonce(session);
  session->session_id = session->local_nonce;
  err = SendInternal(session, kMicroTVMStartSessionInit, &kVersion, 1);
  if (err == kTvmErrorNoError) session->state = kMicroTVMSessionStartSessionSent;
  return err;
}

int MicroTVMSession_IsEstablished(const MicroTVMSession* session) {
  return session->state == kMicroTVMSessionEstablished;
}

tvm_crt_error_t MicroTVMSession_SendMessage(MicroTVMSession* session, MicroTVMMessageType type,
                                            const uint8_t* body, size_t size) {
  if (session->state != kMicroTVMSessionEstablished && type != kMicroTVMLog) {
    return kTvmErrorSessionInvalidState;
  }
  return SendInternal(session, type, body, size);
}

static void Notify(MicroTVMSession* session, MicroTVMMessageType type) {
  session->message_received(session->context, type, NULL, 0);
}

static void SendStartReply(MicroTVMSession* session, uint16_t their_id) {
  static const uint8_t kVersion = MICROTVM_SESSION_VERSION;
  RegenerateNonce(session);
  session->session_id = (uint16_t)(InitiatorNonce(their_id) | (session->local_nonce << 8));
  session->state = kMicroTVMSessionEstablished;
  /* A failed reply leaves the host retrying; nothing better to do on the device. */
  (void)SendInternal(session, kMicroTVMStartSessionReply, &kVersion, 1);
  Notify(session, kMicroTVMStartSessionReply);
}

static void ProcessStartInit(MicroTVMSession* session, uint16_t id, const uint8_t* body,
                             size_t size) {
  if (InitiatorNonce(id) == MICROTVM_INVALID_NONCE || size != 1) return;
  switch (session->state) {
    case kMicroTVMSessionStartSessionSent:
      if (InitiatorNonce(id) < session->local_nonce) {
        if (body[0] == MICROTVM_SESSION_VERSION) SendStartReply(session, id);
      } else if (InitiatorNonce(id) == session->local_nonce) {
        (void)MicroTVMSession_StartSession(session);
      }
      break;
    default: /* no session, or the host restarted it: answer */
      if (body[0] == MICROTVM_SESSION_VERSION) SendStartReply(session, id);
      break;
  }
}

static void ProcessStartReply(MicroTVMSession* session, uint16_t id, const uint8_t* body,
                              size_t size) {
  if (ResponderNonce(id) == MICROTVM_INVALID_NONCE || size != 1) return;
  if (session->state == kMicroTVMSessionStartSessionSent &&
      InitiatorNonce(id) == session->local_nonce && body[0] == MICROTVM_SESSION_VERSION) {
    session->session_id = id;
    session->state = kMicroTVMSessionEstablished;
    Notify(session, kMicroTVMStartSessionReply);
  }
}

void MicroTVMSession_PacketDone(void* context, const uint8_t* payload, size_t size,
                                int crc_ok) {
  MicroTVMSession* session = (MicroTVMSession*)context;
  uint16_t id;
  MicroTVMMessageType type;
  const uint8_t* body = payload + MICROTVM_SESSION_HEADER_SIZE;
  size_t body_size;
  if (!crc_ok || size < MICROTVM_SESSION_HEADER_SIZE) return;
  id = (uint16_t)(payload[0] | (payload[1] << 8));
  type = (MicroTVMMessageType)payload[2];
  body_size = size - MICROTVM_SESSION_HEADER_SIZE;
  switch (type) {
    case kMicroTVMStartSessionInit:
      ProcessStartInit(session, id, body, body_size);
      break;
    case kMicroTVMStartSessionReply:
      ProcessStartReply(session, id, body, body_size);
      break;
    case kMicroTVMTerminateSession:
      if (session->state == kMicroTVMSessionEstablished) {
        session->state = kMicroTVMSessionNoSessionEstablished;
        session->session_id = 0;
        Notify(session, kMicroTVMTerminateSession);
      }
      break;
    case kMicroTVMLog:
      if (id == 0 || id == session->session_id) {
        session->message_received(session->context, type, body, body_size);
      }
      break;
    default:
      if (session->state == kMicroTVMSessionEstablished && id == session->session_id) {
        session->message_received(session->context, type, body, body_size);
      }
      break;
  }
}
