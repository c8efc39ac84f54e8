/*
 * micro_framing_driver.c - mutation fuzzer for the CRT's microTVM unframer (framing.c).
 *
 *   micro_framing_fuzz ITERATIONS RNG_SEED OUT_DIR
 *
 * Each iteration frames 1-4 random payloads with the C framer, damages the wire bytes in 0-6
 * ways (flipped bytes, inserted FF / FF FD / FF FE, deletions, duplicated or random runs,
 * truncation) and feeds them, split at random points, to an unframer whose payload buffer is
 * an exactly sized heap block (ASan catches any write past it). Undamaged streams must give
 * back exactly the payloads sent; damaged ones any mix of packets and error codes. A finding
 * (sanitizer report, wrong payload, packet larger than the buffer, unknown error code) saves
 * the stream to OUT_DIR/finding.bin and exits nonzero. Prints one line of counts at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/microtvm_rpc_common/framing.h>

#include "fuzz_rng.h"

#define MAX_WIRE 4096

static const char* g_out_dir;
static uint8_t g_wire[MAX_WIRE * 2];
static size_t g_wire_size;

static void Finding(const char* what) {
  char path[4096];
  FILE* f;
  snprintf(path, sizeof(path), "%s/finding.bin", g_out_dir);
  f = fopen(path, "wb");
  if (f != NULL) {
    fwrite(g_wire, 1, g_wire_size, f);
    fclose(f);
  }
  fprintf(stderr, "finding: %s (stream saved to %s)\n", what, path);
  exit(1);
}

static tvm_crt_error_t AppendWire(void* context, const uint8_t* data, size_t size) {
  (void)context;
  if (g_wire_size + size > MAX_WIRE) return kTvmErrorWriteStreamShortWrite;
  memcpy(g_wire + g_wire_size, data, size);
  g_wire_size += size;
  return kTvmErrorNoError;
}

typedef struct {
  uint8_t payloads[4][256];
  size_t sizes[4];
  size_t count;    /* payloads sent */
  size_t received; /* packets delivered with a good CRC */
  size_t capacity;
  int damaged;
} Expectation;

static unsigned long g_packets, g_bad_crc, g_errors, g_inputs;

static void OnPacket(void* context, const uint8_t* payload, size_t size, int crc_ok) {
  Expectation* e = (Expectation*)context;
  if (size > e->capacity) Finding("packet larger than the unframer's buffer");
  if (!crc_ok) {
    g_bad_crc++;
    if (!e->damaged) Finding("bad CRC on an undamaged stream");
    return;
  }
  g_packets++;
  if (!e->damaged) {
    if (e->received >= e->count || e->sizes[e->received] != size ||
        memcmp(e->payloads[e->received], payload, size) != 0) {
      Finding("undamaged stream gave a different payload");
    }
  }
  e->received++;
}

static void Damage(void) {
  static const uint8_t kSpecial[] = {0xFF, 0xFE, 0xFD, 0x00};
  size_t k, rounds = Below(7);
  for (k = 0; k < rounds && g_wire_size > 0; ++k) {
    size_t at = Below(g_wire_size), n = 1 + Below(8);
    switch (Below(6)) {
      case 0:
        g_wire[at] = (Next() & 1) ? kSpecial[Below(4)] : (uint8_t)Next();
        break;
      case 1: /* insert FF, FF FD or FF FE */
        if (g_wire_size + 2 <= MAX_WIRE) {
          memmove(g_wire + at + 2, g_wire + at, g_wire_size - at);
          g_wire[at] = 0xFF;
          g_wire[at + 1] = kSpecial[Below(3)];
          g_wire_size += 2;
        }
        break;
      case 2: /* delete a run */
        if (n > g_wire_size - at) n = g_wire_size - at;
        memmove(g_wire + at, g_wire + at + n, g_wire_size - at - n);
        g_wire_size -= n;
        break;
      case 3: /* duplicate a run */
        if (n > g_wire_size - at) n = g_wire_size - at;
        if (g_wire_size + n <= MAX_WIRE) {
          memmove(g_wire + at + n, g_wire + at, g_wire_size - at);
          g_wire_size += n;
        }
        break;
      case 4: /* overwrite with random bytes */
        for (; n > 0 && at < g_wire_size; --n, ++at) g_wire[at] = (uint8_t)Next();
        break;
      default: /* truncate */
        g_wire_size = at;
        break;
    }
  }
}

static void OneInput(void) {
  Expectation e;
  MicroTVMFramer framer;
  MicroTVMUnframer unframer;
  uint8_t* buffer;
  size_t i, at = 0;
  memset(&e, 0, sizeof(e));
  g_wire_size = 0;
  MicroTVMFramer_Init(&framer, AppendWire, NULL);
  e.count = 1 + Below(4);
  for (i = 0; i < e.count; ++i) {
    size_t j;
    e.sizes[i] = Below(4) == 0 ? Below(4) : Below(257);
    for (j = 0; j < e.sizes[i]; ++j) {
      /* Plenty of escape bytes: they are where the unframer's states branch. */
      e.payloads[i][j] = (Next() & 3) == 0 ? (uint8_t)(0xFD + Below(3)) : (uint8_t)Next();
    }
    if (MicroTVMFramer_Write(&framer, e.payloads[i], e.sizes[i]) != kTvmErrorNoError) {
      Finding("framer failed on a valid payload");
    }
  }
  e.damaged = Below(8) != 0;
  if (e.damaged) Damage();
  e.capacity = e.damaged && Below(2) ? Below(300) : 256;
  buffer = (uint8_t*)malloc(e.capacity ? e.capacity : 1);
  MicroTVMUnframer_Init(&unframer, buffer, e.capacity, OnPacket, &e);
  while (at < g_wire_size) {
    size_t n = 1 + Below(g_wire_size - at), consumed;
    tvm_crt_error_t err = MicroTVMUnframer_Write(&unframer, g_wire + at, n, &consumed);
    if (consumed > n) Finding("unframer consumed more than it was given");
    if (err != kTvmErrorNoError) {
      g_errors++;
      if (!e.damaged) Finding("error on an undamaged stream");
      if (err != kTvmErrorFramingShortPacket && err != kTvmErrorFramingInvalidEscape &&
          err != kTvmErrorFramingPayloadOverflow) {
        Finding("unexpected error code");
      }
    } else if (consumed != n) {
      Finding("unframer stopped early without an error");
    }
    at += consumed;
  }
  if (!e.damaged && e.received != e.count) Finding("undamaged stream lost a packet");
  free(buffer);
  g_inputs++;
}

int main(int argc, char** argv) {
  unsigned long i, iterations;
  if (argc != 4) {
    fprintf(stderr, "usage: micro_framing_fuzz ITERATIONS RNG_SEED OUT_DIR\n");
    return 2;
  }
  iterations = strtoul(argv[1], NULL, 10);
  g_rng = strtoull(argv[2], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
  g_out_dir = argv[3];
  for (i = 0; i < iterations; ++i) OneInput();
  printf("inputs %lu packets %lu bad_crc %lu errors %lu\n", g_inputs, g_packets, g_bad_crc,
         g_errors);
  return 0;
}
