/*
 * framing.h - microTVM's framing layer in C: packets over a byte stream (TVM v0.16's wire
 * format; the Python twin is kiln/micro/framing.py, which documents the format).
 *
 * Packet: FF FD, then escaped {u32 LE payload length, payload, u16 LE CRC}. Escapes: FF FF is a
 * literal FF, FF FE is padding, FF FD restarts. CRC-16/CCITT (0x1021, init 0xFFFF) over the
 * escaped wire bytes from FF FD through the payload.
 */
#ifndef TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_FRAMING_H_
#define TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_FRAMING_H_

#include <stddef.h>
#include <stdint.h>
#include <tvm/runtime/crt/error_codes.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MICROTVM_ESCAPE_START 0xFF
#define MICROTVM_ESCAPE_NOP 0xFE
#define MICROTVM_PACKET_START 0xFD

/* Write all `size` bytes to the link; nonzero on failure. */
typedef tvm_crt_error_t (*MicroTVMWriteFunc)(void* context, const uint8_t* data, size_t size);

/* A whole packet arrived: its payload, and whether its CRC matched. */
typedef void (*MicroTVMPacketDoneFunc)(void* context, const uint8_t* payload, size_t size,
                                       int crc_ok);

/* CRC-16/CCITT of `data` continuing from `crc` (0xFFFF to start). */
uint16_t MicroTVMCrc16(const uint8_t* data, size_t size, uint16_t crc);

typedef struct {
  MicroTVMWriteFunc write;
  void* context;
  int after_reset;    /* the next packet is preceded by a lone FE */
  int in_packet;      /* between StartPacket and FinishPacket */
  uint32_t remaining; /* payload bytes still to come in this packet */
  uint16_t crc;
} MicroTVMFramer;

void MicroTVMFramer_Init(MicroTVMFramer* framer, MicroTVMWriteFunc write, void* context);
/* Forget any packet in progress; the next packet resynchronises the receiver first. */
void MicroTVMFramer_Reset(MicroTVMFramer* framer);
tvm_crt_error_t MicroTVMFramer_StartPacket(MicroTVMFramer* framer, size_t payload_size);
/* kTvmErrorFramingInvalidState outside a packet, ...PayloadOverflow past the declared size. */
tvm_crt_error_t MicroTVMFramer_WritePayloadChunk(MicroTVMFramer* framer, const uint8_t* data,
                                                 size_t size);
/* kTvmErrorFramingPayloadIncomplete when fewer bytes than declared were written. */
tvm_crt_error_t MicroTVMFramer_FinishPacket(MicroTVMFramer* framer);
tvm_crt_error_t MicroTVMFramer_Write(MicroTVMFramer* framer, const uint8_t* payload,
                                     size_t size);

typedef enum {
  kMicroTVMUnframerFindPacketStart = 0,
  kMicroTVMUnframerFindPacketLength = 1,
  kMicroTVMUnframerFindPacketCrc = 2, /* TVM's name: reading the payload */
  kMicroTVMUnframerFindCrcEnd = 3,
} MicroTVMUnframerState;

typedef struct {
  MicroTVMPacketDoneFunc packet_done;
  void* context;
  uint8_t* buffer; /* receives the payload; packets longer than capacity are refused */
  size_t capacity;
  MicroTVMUnframerState state;
  int saw_escape;
  uint16_t crc;
  uint8_t field[4]; /* length or CRC bytes so far */
  size_t field_size;
  uint32_t payload_size;
  uint32_t payload_filled;
} MicroTVMUnframer;

void MicroTVMUnframer_Init(MicroTVMUnframer* unframer, uint8_t* buffer, size_t capacity,
                           MicroTVMPacketDoneFunc packet_done, void* context);
void MicroTVMUnframer_Reset(MicroTVMUnframer* unframer);
/*
 * Feed received bytes. Completed packets go to packet_done. On a broken packet it stops and
 * returns kTvmErrorFramingShortPacket, ...InvalidEscape or ...PayloadOverflow with
 * *bytes_consumed telling how far it got; the caller feeds the rest again (the unframer is
 * then looking for the next packet start).
 */
tvm_crt_error_t MicroTVMUnframer_Write(MicroTVMUnframer* unframer, const uint8_t* data,
                                       size_t size, size_t* bytes_consumed);

#ifdef __cplusplus
}
#endif

#endif /* TVM_RUNTIME_CRT_MICROTVM_RPC_COMMON_FRAMING_H_ */
