/*
 * session_echo.c - a device speaking the C session layer over stdin/stdout, for pytest
 * (test_micro_session.py drives it with kiln.micro.session_layer).
 *
 *   session_echo NONCE [DEAF_PACKETS]
 *
 * At boot it sends TerminateSession and a Log "booted"; it ignores the first DEAF_PACKETS
 * packets (a device that is not ready yet). Normal messages: "echo:X" -> "X"; "log:X" -> Log X
 * then "logged"; "big:N" -> N bytes i & 0xFF sent in chunks; "reset" -> re-initialises (as
 * after a reboot); "exit" -> exits (as if the device died).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/crt/microtvm_rpc_common/session.h>
#include <unistd.h>

static MicroTVMFramer g_framer;
static MicroTVMSession g_session;
static MicroTVMUnframer g_unframer;
static uint8_t g_receive[2048];
static long g_deaf;

static tvm_crt_error_t WriteStdout(void* context, const uint8_t* data, size_t size) {
  (void)context;
  while (size > 0) {
    ssize_t n = write(1, data, size);
    if (n <= 0) return kTvmErrorWriteStreamShortWrite;
    data += n;
    size -= (size_t)n;
  }
  return kTvmErrorNoError;
}

static void Check(tvm_crt_error_t err, const char* what) {
  if (err != kTvmErrorNoError) {
    fprintf(stderr, "session_echo: %s failed: 0x%x\n", what, (unsigned)err);
    exit(2);
  }
}

static int StartsWith(const uint8_t* body, size_t size, const char* prefix) {
  size_t n = strlen(prefix);
  return size >= n && memcmp(body, prefix, n) == 0;
}

static void OnMessage(void* context, MicroTVMMessageType type, const uint8_t* body,
                      size_t size) {
  (void)context;
  if (type != kMicroTVMNormal) return;
  if (StartsWith(body, size, "echo:")) {
    Check(MicroTVMSession_SendMessage(&g_session, kMicroTVMNormal, body + 5, size - 5), "echo");
  } else if (StartsWith(body, size, "log:")) {
    Check(MicroTVMSession_SendMessage(&g_session, kMicroTVMLog, body + 4, size - 4), "log");
    Check(MicroTVMSession_SendMessage(&g_session, kMicroTVMNormal, (const uint8_t*)"logged", 6),
          "logged");
  } else if (StartsWith(body, size, "big:")) {
    char digits[16] = {0};
    uint8_t chunk[100];
    size_t total, sent = 0, i;
    memcpy(digits, body + 4, size - 4 < 15 ? size - 4 : 15);
    total = (size_t)atol(digits);
    Check(MicroTVMSession_StartMessage(&g_session, kMicroTVMNormal, total), "big start");
    while (sent < total) {
      size_t n = total - sent < sizeof(chunk) ? total - sent : sizeof(chunk);
      for (i = 0; i < n; ++i) chunk[i] = (uint8_t)(sent + i);
      Check(MicroTVMSession_SendBodyChunk(&g_session, chunk, n), "big chunk");
      sent += n;
    }
    Check(MicroTVMSession_FinishMessage(&g_session), "big finish");
  } else if (StartsWith(body, size, "reset")) {
    MicroTVMFramer_Reset(&g_framer);
    Check(MicroTVMSession_Initialize(&g_session, &g_framer, 0x42, OnMessage, NULL), "reset");
  } else if (StartsWith(body, size, "exit")) {
    exit(0);
  }
}

static void PacketDone(void* context, const uint8_t* payload, size_t size, int crc_ok) {
  if (g_deaf > 0) {
    g_deaf--;
    return;
  }
  MicroTVMSession_PacketDone(context, payload, size, crc_ok);
}

int main(int argc, char** argv) {
  static const uint8_t kBooted[] = "booted";
  uint8_t data[512];
  ssize_t n;
  if (argc < 2) {
    fprintf(stderr, "usage: session_echo NONCE [DEAF_PACKETS]\n");
    return 2;
  }
  g_deaf = argc > 2 ? atol(argv[2]) : 0;
  MicroTVMFramer_Init(&g_framer, WriteStdout, NULL);
  MicroTVMUnframer_Init(&g_unframer, g_receive, sizeof(g_receive), PacketDone, &g_session);
  Check(MicroTVMSession_Initialize(&g_session, &g_framer, (uint8_t)atoi(argv[1]), OnMessage,
                                   NULL),
        "initialize");
  Check(MicroTVMSession_SendMessage(&g_session, kMicroTVMLog, kBooted, sizeof(kBooted) - 1),
        "boot log");
  while ((n = read(0, data, sizeof(data))) > 0) {
    size_t at = 0;
    while (at < (size_t)n) {
      size_t consumed = 0;
      /* Framing errors only drop the damaged packet; carry on with the rest. */
      (void)MicroTVMUnframer_Write(&g_unframer, data + at, (size_t)n - at, &consumed);
      at += consumed;
    }
  }
  return 0;
}
