/*
 * framing_tool.c - drives the C framer/unframer from pytest (test_micro_framing.py).
 *
 *   framing_tool unframe CHUNK CAPACITY < wire   prints one line per outcome, in order:
 *       "packet <crc_ok> <payload hex>" or "error <code hex>"; input fed CHUNK bytes at a time.
 *   framing_tool frame CHUNK < payloads          payloads are u32 LE length + bytes; writes
 *       their framing to stdout, each payload written CHUNK bytes at a time.
 *   framing_tool misuse                           checks the framer's state errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/microtvm_rpc_common/framing.h>

#include "crt_test.h"

static uint8_t* ReadAll(FILE* f, size_t* size) {
  size_t capacity = 4096, n = 0, got;
  uint8_t* data = (uint8_t*)malloc(capacity);
  while ((got = fread(data + n, 1, capacity - n, f)) > 0) {
    n += got;
    if (n == capacity) data = (uint8_t*)realloc(data, capacity *= 2);
  }
  *size = n;
  return data;
}

static void PrintPacket(void* context, const uint8_t* payload, size_t size, int crc_ok) {
  size_t i;
  (void)context;
  printf("packet %d ", crc_ok);
  for (i = 0; i < size; ++i) printf("%02x", payload[i]);
  printf("\n");
}

static tvm_crt_error_t WriteStdout(void* context, const uint8_t* data, size_t size) {
  (void)context;
  return fwrite(data, 1, size, stdout) == size ? kTvmErrorNoError : kTvmErrorWriteStreamShortWrite;
}

static int Unframe(size_t chunk, size_t capacity) {
  size_t size, at = 0;
  uint8_t* wire = ReadAll(stdin, &size);
  uint8_t* buffer = (uint8_t*)malloc(capacity ? capacity : 1);
  MicroTVMUnframer unframer;
  MicroTVMUnframer_Init(&unframer, buffer, capacity, PrintPacket, NULL);
  while (at < size) {
    size_t n = size - at < chunk ? size - at : chunk, consumed = 0;
    while (n > 0) {
      tvm_crt_error_t err = MicroTVMUnframer_Write(&unframer, wire + at, n, &consumed);
      if (err != kTvmErrorNoError) printf("error %x\n", (unsigned)err);
      at += consumed;
      n -= consumed;
    }
  }
  free(buffer);
  free(wire);
  return 0;
}

static int Frame(size_t chunk) {
  size_t size, at = 0;
  uint8_t* input = ReadAll(stdin, &size);
  MicroTVMFramer framer;
  MicroTVMFramer_Init(&framer, WriteStdout, NULL);
  while (at + 4 <= size) {
    uint32_t length = (uint32_t)input[at] | ((uint32_t)input[at + 1] << 8) |
                      ((uint32_t)input[at + 2] << 16) | ((uint32_t)input[at + 3] << 24);
    size_t done = 0;
    at += 4;
    if (length > size - at) return 2;
    if (MicroTVMFramer_StartPacket(&framer, length) != kTvmErrorNoError) return 3;
    while (done < length) {
      size_t n = length - done < chunk ? length - done : chunk;
      if (MicroTVMFramer_WritePayloadChunk(&framer, input + at + done, n)) return 4;
      done += n;
    }
    if (MicroTVMFramer_FinishPacket(&framer) != kTvmErrorNoError) return 5;
    at += length;
  }
  free(input);
  return 0;
}

static tvm_crt_error_t Discard(void* context, const uint8_t* data, size_t size) {
  (void)context, (void)data, (void)size;
  return kTvmErrorNoError;
}

static tvm_crt_error_t Broken(void* context, const uint8_t* data, size_t size) {
  (void)context, (void)data, (void)size;
  return kTvmErrorWriteStreamShortWrite;
}

static int Misuse(void) {
  static const uint8_t payload[3] = {1, 2, 3};
  MicroTVMFramer framer;
  MicroTVMFramer_Init(&framer, Discard, NULL);
  EXPECT_EQ(MicroTVMFramer_WritePayloadChunk(&framer, payload, 1), kTvmErrorFramingInvalidState);
  EXPECT_EQ(MicroTVMFramer_FinishPacket(&framer), kTvmErrorFramingInvalidState);
  EXPECT_EQ(MicroTVMFramer_StartPacket(&framer, 2), kTvmErrorNoError);
  EXPECT_EQ(MicroTVMFramer_WritePayloadChunk(&framer, payload, 3),
            kTvmErrorFramingPayloadOverflow);
  EXPECT_EQ(MicroTVMFramer_WritePayloadChunk(&framer, payload, 1), kTvmErrorNoError);
  EXPECT_EQ(MicroTVMFramer_FinishPacket(&framer), kTvmErrorFramingPayloadIncomplete);
  EXPECT_EQ(MicroTVMFramer_WritePayloadChunk(&framer, payload, 1), kTvmErrorNoError);
  EXPECT_EQ(MicroTVMFramer_FinishPacket(&framer), kTvmErrorNoError);
  EXPECT_EQ(framer.after_reset, 0);
  /* A failing link resets the framer: the next packet resynchronises the receiver. */
  framer.write = Broken;
  EXPECT_EQ(MicroTVMFramer_Write(&framer, payload, 3), kTvmErrorWriteStreamShortWrite);
  EXPECT_EQ(framer.after_reset, 1);
  EXPECT_EQ(framer.in_packet, 0);
  printf("%s misuse\n", g_failures ? "FAIL" : "ok");
  return g_failures;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "unframe") == 0) {
    return Unframe((size_t)atol(argv[2]), (size_t)atol(argv[3]));
  }
  if (argc == 3 && strcmp(argv[1], "frame") == 0) return Frame((size_t)atol(argv[2]));
  if (argc == 2 && strcmp(argv[1], "misuse") == 0) return Misuse();
  fprintf(stderr, "usage: framing_tool unframe CHUNK CAPACITY | frame CHUNK | misuse\n");
  return 2;
}
