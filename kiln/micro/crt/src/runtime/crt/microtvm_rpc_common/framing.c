/*
 * framing.c - microTVM framer and unframer (see framing.h and kiln/micro/framing.py).
 *
 * The unframer is a byte-at-a-time state machine; it owns no memory beyond the payload buffer
 * its user hands it, so a hostile stream can at worst fill that buffer.
 */
#include <string.h>
#include <tvm/runtime/crt/microtvm_rpc_common/framing.h>

uint16_t MicroTVMCrc16(const uint8_t* data, size_t size, uint16_t crc) {
  size_t i;
  int bit;
  for (i = 0; i < size; ++i) {
    crc ^= (uint16_t)(data[i] << 8);
    for (bit = 0; bit < 8; ++bit) {
      crc = (uint16_t)((crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1));
    }
  }
  return crc;
}

void MicroTVMFramer_Init(MicroTVMFramer* framer, MicroTVMWriteFunc write, void* context) {
  framer->write = write;
  framer->context = context;
  MicroTVMFramer_Reset(framer);
}

void MicroTVMFramer_Reset(MicroTVMFramer* framer) {
  framer->after_reset = 1;
  framer->in_packet = 0;
  framer->remaining = 0;
  framer->crc = 0xFFFF;
}

/* Send `data`, doubling every FF when `escape`, and fold the sent bytes into the CRC. */
static tvm_crt_error_t WriteEscaped(MicroTVMFramer* framer, const uint8_t* data, size_t size,
                                    int escape, int update_crc) {
  uint8_t chunk[64];
  while (size > 0) {
    size_t used = 0, taken = 0;
    tvm_crt_error_t err;
    while (taken < size && used + 2 <= sizeof(chunk)) {
      uint8_t c = data[taken++];
      chunk[used++] = c;
      if (escape && c == MICROTVM_ESCAPE_START) chunk[used++] = c;
    }
    err = framer->write(framer->context, chunk, used);
    if (err != kTvmErrorNoError) {
      MicroTVMFramer_Reset(framer);
      return err;
    }
    if (update_crc) framer->crc = MicroTVMCrc16(chunk, used, framer->crc);
    data += taken;
    size -= taken;
  }
  return kTvmErrorNoError;
}

tvm_crt_error_t MicroTVMFramer_StartPacket(MicroTVMFramer* framer, size_t payload_size) {
  static const uint8_t kNop = MICROTVM_ESCAPE_NOP;
  static const uint8_t kStart[2] = {MICROTVM_ESCAPE_START, MICROTVM_PACKET_START};
  uint8_t length[4];
  tvm_crt_error_t err;
  if ((size_t)(uint32_t)payload_size != payload_size) return kTvmErrorFramingPayloadOverflow;
  if (framer->after_reset) {
    err = WriteEscaped(framer, &kNop, 1, 0, 0);
    if (err != kTvmErrorNoError) return err;
    framer->after_reset = 0;
  }
  framer->crc = 0xFFFF;
  err = WriteEscaped(framer, kStart, sizeof(kStart), 0, 1);
  if (err != kTvmErrorNoError) return err;
  length[0] = (uint8_t)payload_size;
  length[1] = (uint8_t)(payload_size >> 8);
  length[2] = (uint8_t)(payload_size >> 16);
  length[3] = (uint8_t)(payload_size >> 24);
  err = WriteEscaped(framer, length, sizeof(length), 1, 1);
  if (err != kTvmErrorNoError) return err;
  framer->in_packet = 1;
  framer->remaining = (uint32_t)payload_size;
  return kTvmErrorNoError;
}

tvm_crt_error_t MicroTVMFramer_WritePayloadChunk(MicroTVMFramer* framer, const uint8_t* data,
                                                 size_t size) {
  tvm_crt_error_t err;
  if (!framer->in_packet) return kTvmErrorFramingInvalidState;
  if (size > framer->remaining) return kTvmErrorFramingPayloadOverflow;
  err = WriteEscaped(framer, data, size, 1, 1);
  if (err != kTvmErrorNoError) return err;
  framer->remaining -= (uint32_t)size;
  return kTvmErrorNoError;
}

tvm_crt_error_t MicroTVMFramer_FinishPacket(MicroTVMFramer* framer) {
  uint8_t crc[2];
  tvm_crt_error_t err;
  if (!framer->in_packet) return kTvmErrorFramingInvalidState;
  if (framer->remaining != 0) return kTvmErrorFramingPayloadIncomplete;
  crc[0] = (uint8_t)framer->crc;
  crc[1] = (uint8_t)(framer->crc >> 8);
  err = WriteEscaped(framer, crc, sizeof(crc), 1, 0);
  if (err != kTvmErrorNoError) return err;
  framer->in_packet = 0;
  return kTvmErrorNoError;
}

tvm_crt_error_t MicroTVMFramer_Write(MicroTVMFramer* framer, const uint8_t* payload,
                                     size_t size) {
  tvm_crt_error_t err = MicroTVMFramer_StartPacket(framer, size);
  if (err == kTvmErrorNoError) err = MicroTVMFramer_WritePayloadChunk(framer, payload, size);
  if (err == kTvmErrorNoError) err = MicroTVMFramer_FinishPacket(framer);
  return err;
}

void MicroTVMUnframer_Init(MicroTVMUnframer* unframer, uint8_t* buffer, size_t capacity,
                           MicroTVMPacketDoneFunc packet_done, void* context) {
  unframer->buffer = buffer;
  unframer->capacity = capacity;
  unframer->packet_done = packet_done;
  unframer->context = context;
  unframer->saw_escape = 0;
  MicroTVMUnframer_Reset(unframer);
}

/* Look for the next packet; the escape flag is kept (a short packet leaves its FF seen). */
void MicroTVMUnframer_Reset(MicroTVMUnframer* unframer) {
  unframer->state = kMicroTVMUnframerFindPacketStart;
  unframer->field_size = 0;
  unframer->payload_size = 0;
  unframer->payload_filled = 0;
  unframer->crc = 0xFFFF;
}

/* One unescaped byte of the length, payload or CRC field; nonzero error refuses the packet. */
static tvm_crt_error_t Accept(MicroTVMUnframer* u, uint8_t c) {
  if (u->state == kMicroTVMUnframerFindPacketCrc) {
    u->buffer[u->payload_filled++] = c;
  } else {
    u->field[u->field_size++] = c;
    if (u->state == kMicroTVMUnframerFindPacketLength && u->field_size == 4) {
      uint32_t length = (uint32_t)u->field[0] | ((uint32_t)u->field[1] << 8) |
                        ((uint32_t)u->field[2] << 16) | ((uint32_t)u->field[3] << 24);
      u->field_size = 0;
      if (length > u->capacity) return kTvmErrorFramingPayloadOverflow;
      u->payload_size = length;
      u->payload_filled = 0;
      u->state = kMicroTVMUnframerFindPacketCrc;
    } else if (u->state == kMicroTVMUnframerFindCrcEnd && u->field_size == 2) {
      uint16_t crc = (uint16_t)(u->field[0] | (u->field[1] << 8));
      /* Reset before the callback: it may send, and must see a quiet unframer. */
      uint32_t size = u->payload_size;
      uint16_t expected = u->crc;
      MicroTVMUnframer_Reset(u);
      u->packet_done(u->context, u->buffer, size, crc == expected);
      return kTvmErrorNoError;
    }
  }
  if (u->state == kMicroTVMUnframerFindPacketCrc && u->payload_filled == u->payload_size) {
    u->state = kMicroTVMUnframerFindCrcEnd;
  }
  return kTvmErrorNoError;
}

tvm_crt_error_t MicroTVMUnframer_Write(MicroTVMUnframer* u, const uint8_t* data, size_t size,
                                       size_t* bytes_consumed) {
  size_t i;
  tvm_crt_error_t err = kTvmErrorNoError;
  for (i = 0; i < size && err == kTvmErrorNoError; ++i) {
    uint8_t c = data[i];
    int in_crc = u->state == kMicroTVMUnframerFindCrcEnd;
    if (u->state == kMicroTVMUnframerFindPacketStart) {
      if (c == MICROTVM_PACKET_START && u->saw_escape) {
        static const uint8_t kStart[2] = {MICROTVM_ESCAPE_START, MICROTVM_PACKET_START};
        u->crc = MicroTVMCrc16(kStart, sizeof(kStart), 0xFFFF);
        u->state = kMicroTVMUnframerFindPacketLength;
      }
      u->saw_escape = c == MICROTVM_ESCAPE_START;
      continue;
    }
    if (u->saw_escape) {
      u->saw_escape = 0;
      if (c == MICROTVM_PACKET_START) {
        /* The sender restarted: leave FD unconsumed, FF seen, to begin the next packet. */
        u->saw_escape = 1;
        err = kTvmErrorFramingShortPacket;
        break;
      }
      if (c == MICROTVM_ESCAPE_NOP) {
        if (!in_crc) u->crc = MicroTVMCrc16(&c, 1, u->crc);
        continue;
      }
      if (c != MICROTVM_ESCAPE_START) {
        err = kTvmErrorFramingInvalidEscape;
        continue; /* consumed; the loop ends on err */
      }
    } else if (c == MICROTVM_ESCAPE_START) {
      u->saw_escape = 1;
      if (!in_crc) u->crc = MicroTVMCrc16(&c, 1, u->crc);
      continue;
    }
    if (!in_crc) u->crc = MicroTVMCrc16(&c, 1, u->crc);
    err = Accept(u, c);
  }
  *bytes_consumed = i;
  if (err != kTvmErrorNoError) MicroTVMUnframer_Reset(u);
  return err;
}
