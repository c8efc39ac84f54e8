/*
 * rpc_server.c - the on-device RPC server: session layer below, TVM's RPC packets above.
 *
 * RPC packets (u64 length, i32 code, body; little-endian) arrive as the bodies of session
 * Normal messages and are reassembled into one buffer of TVM_CRT_MAX_PACKET_SIZE_BYTES; the
 * host keeps every packet within that (tvm.rpc.server.GetCRTMaxPacketSize). Every read of a
 * packet is bounds-checked: a malformed packet is answered with kException, never trusted.
 * Addresses the host sends (tensor data) are trusted, as in TVM: the host owns the device.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/crt/crt.h>
#include <tvm/runtime/crt/microtvm_rpc_common/framing.h>
#include <tvm/runtime/crt/microtvm_rpc_common/session.h>
#include <tvm/runtime/crt/microtvm_rpc_server.h>
#include <tvm/runtime/crt/platform.h>

#include "crt_config.h"

/* RPCCode of TVM's minrpc/rpc_reference.h. */
enum {
  kRPCShutdown = 1,
  kRPCInitServer = 2,
  kRPCCallFunc = 3,
  kRPCReturn = 4,
  kRPCException = 5,
  kRPCCopyFromRemote = 6,
  kRPCCopyToRemote = 7,
  kRPCCopyAck = 8,
  kRPCGetGlobalFunc = 9,
  kRPCFreeHandle = 10,
  kRPCDevSetDevice = 11,
  kRPCDevGetAttr = 12,
  kRPCDevAllocData = 13,
  kRPCDevFreeData = 14,
  kRPCDevStreamSync = 15,
  kRPCCopyAmongRemote = 16,
  kRPCDevAllocDataWithScope = 17,
  kRPCDevCreateStream = 18,
  kRPCDevFreeStream = 19,
  kRPCDevSetStream = 20,
  kRPCDevGetCurrentStream = 21,
};

#define RPC_PROTOCOL_VERSION "0.8.0"

/* Arguments of one RPC request: runtime.RPCTimeEvaluator alone takes 12. */
#if TVM_CRT_MAX_ARGS > 16
#define RPC_MAX_ARGS TVM_CRT_MAX_ARGS
#else
#define RPC_MAX_ARGS 16
#endif

typedef struct {
  MicroTVMFramer framer;
  MicroTVMUnframer unframer;
  MicroTVMSession session;
  microtvm_rpc_channel_write_t write;
  void* write_context;
  uint8_t* frame;  /* the unframer's payload buffer */
  uint8_t* packet; /* RPC packets being reassembled */
  size_t packet_size;
  int shutdown;
  int nonce_drawn; /* this session's nonce came from TVMPlatformGenerateRandom */
} MicroTVMRpcServer;

/* The server TVMLogf writes to (the last one initialized; a device runs one). */
static MicroTVMRpcServer* g_log_server;

/* ---- reading a packet body ---- */

typedef struct {
  uint8_t* at;
  uint8_t* end;
  int bad; /* a read ran past the end or a value was out of range */
} Reader;

static uint8_t* Take(Reader* r, size_t n) {
  uint8_t* at = r->at;
  if (r->bad || (size_t)(r->end - r->at) < n) {
    r->bad = 1;
    return NULL;
  }
  r->at += n;
  return at;
}

static uint64_t ReadU64(Reader* r) {
  uint8_t* p = Take(r, 8);
  uint64_t v = 0;
  int i;
  if (p == NULL) return 0;
  for (i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

static int32_t ReadI32(Reader* r) {
  uint8_t* p = Take(r, 4);
  if (p == NULL) return 0;
  return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                   ((uint32_t)p[3] << 24));
}

/* A u64-length-prefixed string, NUL-terminated in place: its bytes move over the length. */
static char* ReadString(Reader* r, size_t* size) {
  uint64_t n = ReadU64(r);
  uint8_t* start = r->at - 8;
  if (r->bad || n > (uint64_t)(r->end - r->at)) {
    r->bad = 1;
    return NULL;
  }
  memmove(start, r->at, (size_t)n);
  start[n] = '\0';
  r->at += n;
  if (size != NULL) *size = (size_t)n;
  return (char*)start;
}

static DLDataType ReadDType(Reader* r) {
  DLDataType t = {0, 0, 0};
  uint8_t* p = Take(r, 4);
  if (p != NULL) {
    t.code = p[0];
    t.bits = p[1];
    t.lanes = (uint16_t)(p[2] | (p[3] << 8));
  }
  return t;
}

static DLDevice ReadDevice(Reader* r) {
  DLDevice d;
  d.device_type = (DLDeviceType)ReadI32(r);
  d.device_id = ReadI32(r);
  return d;
}

/* A DLTensor as TVM sends it; the shape goes to `shape` (TVM_CRT_MAX_NDIM slots). */
static void ReadTensor(Reader* r, DLTensor* t, int64_t* shape) {
  int i;
  t->data = (void*)(uintptr_t)ReadU64(r);
  t->device = ReadDevice(r);
  t->ndim = ReadI32(r);
  t->dtype = ReadDType(r);
  if (t->ndim < 0 || t->ndim > TVM_CRT_MAX_NDIM) {
    r->bad = 1;
    return;
  }
  for (i = 0; i < t->ndim; ++i) shape[i] = (int64_t)ReadU64(r);
  t->shape = shape;
  t->strides = NULL;
  t->byte_offset = ReadU64(r);
}

/* ---- decoded arguments of one request ---- */

static TVMValue g_values[RPC_MAX_ARGS];
static int g_codes[RPC_MAX_ARGS];
static DLTensor g_tensors[RPC_MAX_ARGS];
static int64_t g_shapes[RPC_MAX_ARGS][TVM_CRT_MAX_NDIM];
static TVMByteArray g_bytes[RPC_MAX_ARGS];

/* A packed sequence into g_values/g_codes; the count, or -1 (the reader is then bad). */
static int ReadPackedSeq(Reader* r) {
  int32_t n = ReadI32(r), i;
  if (n < 0 || n > RPC_MAX_ARGS) r->bad = 1;
  if (r->bad) return -1;
  for (i = 0; i < n; ++i) g_codes[i] = ReadI32(r);
  for (i = 0; i < n && !r->bad; ++i) {
    switch (g_codes[i]) {
      case kTVMArgInt:
      case kDLUInt:
        g_values[i].v_int64 = (int64_t)ReadU64(r);
        g_codes[i] = kTVMArgInt;
        break;
      case kTVMArgFloat: {
        uint64_t bits = ReadU64(r);
        memcpy(&g_values[i].v_float64, &bits, sizeof(bits));
        break;
      }
      case kTVMOpaqueHandle:
      case kTVMModuleHandle:
      case kTVMPackedFuncHandle:
        g_values[i].v_handle = (void*)(uintptr_t)ReadU64(r);
        break;
      case kTVMNullptr:
        g_values[i].v_handle = NULL;
        break;
      case kTVMDataType:
        g_values[i].v_type = ReadDType(r);
        (void)Take(r, 4); /* padding to 8 bytes */
        break;
      case kTVMDLTensorHandle:
        ReadTensor(r, &g_tensors[i], g_shapes[i]);
        g_values[i].v_handle = &g_tensors[i];
        break;
      case kTVMStr:
        g_values[i].v_str = ReadString(r, NULL);
        break;
      case kTVMBytes: {
        uint64_t size = ReadU64(r);
        g_bytes[i].size = (size_t)size;
        g_bytes[i].data = (const char*)Take(r, (size_t)size);
        g_values[i].v_handle = &g_bytes[i];
        break;
      }
      default:
        if (g_codes[i] == 6 /* kDLDevice */) {
          DLDevice d = ReadDevice(r);
          g_values[i].v_device = d;
        } else {
          r->bad = 1;
        }
        break;
    }
  }
  return r->bad ? -1 : n;
}

/* ---- writing replies ---- */

static void PutU64(uint8_t* p, uint64_t v) {
  int i;
  for (i = 0; i < 8; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static void PutI32(uint8_t* p, int32_t v) {
  uint32_t u = (uint32_t)v;
  p[0] = (uint8_t)u;
  p[1] = (uint8_t)(u >> 8);
  p[2] = (uint8_t)(u >> 16);
  p[3] = (uint8_t)(u >> 24);
}

/* One RPC packet: code, `head` then `tail` (large data sent from where it lies). */
static void SendPacket(MicroTVMRpcServer* s, int32_t code, const uint8_t* head, size_t head_size,
                       const uint8_t* tail, size_t tail_size) {
  uint8_t header[12];
  size_t total = 12 + head_size + tail_size;
  tvm_crt_error_t err;
  PutU64(header, 4 + head_size + tail_size);
  PutI32(header + 8, code);
  err = MicroTVMSession_StartMessage(&s->session, kMicroTVMNormal, total);
  if (err == kTvmErrorNoError) err = MicroTVMSession_SendBodyChunk(&s->session, header, 12);
  if (err == kTvmErrorNoError && head_size) {
    err = MicroTVMSession_SendBodyChunk(&s->session, head, head_size);
  }
  if (err == kTvmErrorNoError && tail_size) {
    err = MicroTVMSession_SendBodyChunk(&s->session, tail, tail_size);
  }
  if (err == kTvmErrorNoError) err = MicroTVMSession_FinishMessage(&s->session);
  if (err != kTvmErrorNoError) MicroTVMFramer_Reset(&s->framer); /* the host will time out */
}

static void SendException(MicroTVMRpcServer* s, const char* message) {
  uint8_t head[16];
  size_t n = strlen(message);
  PutI32(head, 1);
  PutI32(head + 4, kTVMStr);
  PutU64(head + 8, n);
  SendPacket(s, kRPCException, head, sizeof(head), (const uint8_t*)message, n);
}

static void SendErrorCode(MicroTVMRpcServer* s, int status) {
  char message[200];
  const char* last = TVMGetLastError();
  snprintf(message, sizeof(message), "device error 0x%x: %s", (unsigned)status,
           (last != NULL && last[0]) ? last : "(no message)");
  SendException(s, message);
}

/* kReturn of a plain value: the packed sequence [(code, value)] (syscall replies). */
static void SendPlain(MicroTVMRpcServer* s, int code, uint64_t value) {
  uint8_t head[16];
  PutI32(head, 1);
  PutI32(head + 4, code);
  PutU64(head + 8, value);
  SendPacket(s, kRPCReturn, head, code == kTVMNullptr ? 8 : 16, NULL, 0);
}

/* kReturn of a call: [(int, type code), value...] as TVM's EncodeReturn. */
static void SendCallReturn(MicroTVMRpcServer* s, TVMValue value, int code) {
  uint8_t head[128];
  size_t n;
  PutI32(head + 4, kTVMArgInt);
  switch (code) {
    case kTVMNullptr:
      PutI32(head, 2);
      PutI32(head + 8, kTVMNullptr);
      PutU64(head + 12, kTVMNullptr);
      SendPacket(s, kRPCReturn, head, 20, NULL, 0);
      return;
    case kTVMArgInt:
    case kTVMArgFloat:
    case kTVMOpaqueHandle:
    case kTVMModuleHandle:
    case kTVMPackedFuncHandle: {
      uint64_t bits = code == kTVMArgInt     ? (uint64_t)value.v_int64
                      : code == kTVMArgFloat ? 0
                                             : (uint64_t)(uintptr_t)value.v_handle;
      if (code == kTVMArgFloat) memcpy(&bits, &value.v_float64, sizeof(bits));
      PutI32(head, 2);
      PutI32(head + 8, code == kTVMArgInt || code == kTVMArgFloat ? code : kTVMOpaqueHandle);
      PutU64(head + 12, (uint64_t)code);
      PutU64(head + 20, bits);
      SendPacket(s, kRPCReturn, head, 28, NULL, 0);
      return;
    }
    case kTVMStr:
    case kTVMBytes: {
      const char* data = code == kTVMStr ? value.v_str : ((TVMByteArray*)value.v_handle)->data;
      n = code == kTVMStr ? strlen(data) : ((TVMByteArray*)value.v_handle)->size;
      PutI32(head, 2);
      PutI32(head + 8, code);
      PutU64(head + 12, (uint64_t)code);
      PutU64(head + 20, n);
      SendPacket(s, kRPCReturn, head, 28, (const uint8_t*)data, n);
      /* Byte arrays the CRT returns are the caller's to free (time evaluator results). */
      if (code == kTVMBytes) (void)TVMByteArrayFree((TVMByteArray*)value.v_handle);
      return;
    }
    case kTVMDLTensorHandle:
    case kTVMNDArrayHandle: {
      DLTensor* t = (DLTensor*)value.v_handle;
      size_t at = 0;
      int i;
      if (t->ndim > TVM_CRT_MAX_NDIM) break;
      PutI32(head, 3);
      PutI32(head + 8, kTVMDLTensorHandle);
      PutI32(head + 12, kTVMOpaqueHandle);
      PutU64(head + 16, kTVMNDArrayHandle);
      at = 24;
      PutU64(head + at, (uint64_t)(uintptr_t)t->data);
      PutI32(head + at + 8, (int32_t)t->device.device_type);
      PutI32(head + at + 12, t->device.device_id);
      PutI32(head + at + 16, t->ndim);
      head[at + 20] = t->dtype.code;
      head[at + 21] = t->dtype.bits;
      head[at + 22] = (uint8_t)t->dtype.lanes;
      head[at + 23] = (uint8_t)(t->dtype.lanes >> 8);
      at += 24;
      for (i = 0; i < t->ndim; ++i, at += 8) PutU64(head + at, (uint64_t)t->shape[i]);
      PutU64(head + at, t->byte_offset);
      PutU64(head + at + 8, (uint64_t)(uintptr_t)t);
      SendPacket(s, kRPCReturn, head, at + 16, NULL, 0);
      return;
    }
    default:
      break;
  }
  SendException(s, "the device cannot return a value of this type over RPC");
}

/* ---- requests ---- */

static void HandleInitServer(MicroTVMRpcServer* s, Reader* r) {
  const char* version = ReadString(r, NULL);
  if (ReadPackedSeq(r) < 0 || r->at != r->end) {
    SendException(s, "malformed InitServer packet");
  } else if (strcmp(version, RPC_PROTOCOL_VERSION) != 0) {
    SendException(s, "RPC protocol version mismatch: the device speaks " RPC_PROTOCOL_VERSION);
  } else {
    SendPlain(s, kTVMNullptr, 0);
  }
}

static void HandleCallFunc(MicroTVMRpcServer* s, Reader* r) {
  uint64_t handle = ReadU64(r);
  int n = ReadPackedSeq(r), status;
  TVMValue ret;
  int ret_code = kTVMNullptr;
  if (n < 0 || r->at != r->end) {
    SendException(s, "malformed CallFunc packet");
    return;
  }
  ret.v_handle = NULL;
  status = TVMFuncCall((TVMFunctionHandle)(uintptr_t)handle, g_values, g_codes, n, &ret,
                       &ret_code);
  if (status != 0) {
    SendErrorCode(s, status);
  } else {
    SendCallReturn(s, ret, ret_code);
  }
}

/* The bytes [data + byte_offset, + nbytes) of a tensor request; NULL if malformed. */
static uint8_t* CopyTarget(Reader* r, uint64_t* nbytes) {
  DLTensor t;
  int64_t shape[TVM_CRT_MAX_NDIM];
  ReadTensor(r, &t, shape);
  *nbytes = ReadU64(r);
  if (r->bad || t.data == NULL) return NULL;
  return (uint8_t*)t.data + t.byte_offset;
}

static void HandleCopyFromRemote(MicroTVMRpcServer* s, Reader* r) {
  uint64_t nbytes;
  uint8_t* from = CopyTarget(r, &nbytes);
  if (from == NULL || r->at != r->end || nbytes > TVM_CRT_MAX_PACKET_SIZE_BYTES) {
    SendException(s, "malformed CopyFromRemote packet");
    return;
  }
  SendPacket(s, kRPCCopyAck, NULL, 0, from, (size_t)nbytes);
}

static void HandleCopyToRemote(MicroTVMRpcServer* s, Reader* r) {
  uint64_t nbytes;
  uint8_t* to = CopyTarget(r, &nbytes);
  uint8_t* data = to == NULL ? NULL : Take(r, (size_t)nbytes);
  if (data == NULL || r->at != r->end) {
    SendException(s, "malformed CopyToRemote packet");
    return;
  }
  memcpy(to, data, (size_t)nbytes);
  SendPlain(s, kTVMNullptr, 0);
}

static void HandleSyscall(MicroTVMRpcServer* s, int32_t code, Reader* r) {
  int n = ReadPackedSeq(r), status = 0;
  void* ptr = NULL;
  if (n < 0 || r->at != r->end) {
    SendException(s, "malformed RPC syscall packet");
    return;
  }
#define EXPECT_ARGS(count, first_code)                                             \
  if (n != (count) || g_codes[0] != (first_code)) {                                \
    SendException(s, "RPC syscall with wrong arguments");                          \
    return;                                                                        \
  }
  switch (code) {
    case kRPCGetGlobalFunc: {
      TVMFunctionHandle f = NULL;
      EXPECT_ARGS(1, kTVMStr);
      if (TVMFuncGetGlobal(g_values[0].v_str, &f) != 0) f = NULL;
      SendPlain(s, f == NULL ? kTVMNullptr : kTVMOpaqueHandle, (uint64_t)(uintptr_t)f);
      return;
    }
    case kRPCFreeHandle:
      EXPECT_ARGS(2, kTVMOpaqueHandle);
      if (g_values[1].v_int64 == kTVMModuleHandle) {
        status = TVMModFree(g_values[0].v_handle);
      } else if (g_values[1].v_int64 == kTVMPackedFuncHandle) {
        status = TVMFuncFree(g_values[0].v_handle);
      } /* NDArrays the device returns belong to its executors: nothing to free. */
      break;
    case kRPCDevGetAttr:
      EXPECT_ARGS(2, 6);
      /* kExist (0) is the only attribute a micro device has. */
      SendPlain(s, kTVMArgInt, g_values[1].v_int64 == 0 ? 1 : 0);
      return;
    case kRPCDevAllocData:
      EXPECT_ARGS(4, 6);
      status = TVMDeviceAllocDataSpace(g_values[0].v_device, (size_t)g_values[1].v_int64,
                                       (size_t)g_values[2].v_int64, g_values[3].v_type, &ptr);
      if (status == 0) {
        SendPlain(s, kTVMOpaqueHandle, (uint64_t)(uintptr_t)ptr);
        return;
      }
      break;
    case kRPCDevAllocDataWithScope: {
      DLTensor* t = (DLTensor*)g_values[0].v_handle;
      EXPECT_ARGS(2, kTVMDLTensorHandle);
      status = TVMDeviceAllocDataSpaceWithScope(t->device, t->ndim, t->shape, t->dtype, NULL,
                                                &ptr);
      if (status == 0) {
        SendPlain(s, kTVMOpaqueHandle, (uint64_t)(uintptr_t)ptr);
        return;
      }
      break;
    }
    case kRPCDevFreeData:
      EXPECT_ARGS(2, 6);
      status = TVMDeviceFreeDataSpace(g_values[0].v_device, g_values[1].v_handle);
      break;
    case kRPCCopyAmongRemote:
      EXPECT_ARGS(3, kTVMDLTensorHandle);
      status = TVMDeviceCopyDataFromTo((DLTensor*)g_values[0].v_handle,
                                       (DLTensor*)g_values[1].v_handle, NULL);
      break;
    case kRPCDevSetDevice:
    case kRPCDevStreamSync:
    case kRPCDevCreateStream:
    case kRPCDevFreeStream:
    case kRPCDevSetStream:
    case kRPCDevGetCurrentStream:
      break; /* a micro device has one synchronous stream */
    default:
      SendException(s, "RPC code not supported by the microTVM device");
      return;
  }
#undef EXPECT_ARGS
  if (status != 0) {
    SendErrorCode(s, status);
  } else {
    SendPlain(s, kTVMNullptr, 0);
  }
}

static void HandlePacket(MicroTVMRpcServer* s, uint8_t* body, size_t size) {
  Reader r;
  int32_t code;
  r.at = body;
  r.end = body + size;
  r.bad = 0;
  code = ReadI32(&r);
  switch (code) {
    case kRPCShutdown:
      s->shutdown = 1;
      break;
    case kRPCInitServer:
      HandleInitServer(s, &r);
      break;
    case kRPCCallFunc:
      HandleCallFunc(s, &r);
      break;
    case kRPCCopyFromRemote:
      HandleCopyFromRemote(s, &r);
      break;
    case kRPCCopyToRemote:
      HandleCopyToRemote(s, &r);
      break;
    default:
      if (code >= kRPCGetGlobalFunc && code <= kRPCDevGetCurrentStream) {
        HandleSyscall(s, code, &r);
      } else {
        SendException(s, "unknown RPC code");
      }
      break;
  }
}

/* ---- session plumbing ---- */

static void OnMessage(void* context, MicroTVMMessageType type, const uint8_t* body,
                      size_t size) {
  MicroTVMRpcServer* s = (MicroTVMRpcServer*)context;
  if (type == kMicroTVMStartSessionReply || type == kMicroTVMTerminateSession) {
    s->packet_size = 0; /* a new RPC session starts clean */
    if (type == kMicroTVMTerminateSession) s->nonce_drawn = 0;
    return;
  }
  if (type != kMicroTVMNormal) return;
  if (size > TVM_CRT_MAX_PACKET_SIZE_BYTES - s->packet_size) {
    /* The host broke the packet limit: the RPC stream cannot be resynchronised. */
    s->packet_size = 0;
    (void)MicroTVMSession_TerminateSession(&s->session);
    return;
  }
  memcpy(s->packet + s->packet_size, body, size);
  s->packet_size += size;
  while (s->packet_size >= 8) {
    Reader r;
    uint64_t length;
    r.at = s->packet;
    r.end = s->packet + 8;
    r.bad = 0;
    length = ReadU64(&r);
    if (length > TVM_CRT_MAX_PACKET_SIZE_BYTES - 8) {
      s->packet_size = 0;
      (void)MicroTVMSession_TerminateSession(&s->session);
      return;
    }
    if (s->packet_size < 8 + length) return;
    HandlePacket(s, s->packet + 8, (size_t)length);
    s->packet_size -= 8 + (size_t)length;
    memmove(s->packet, s->packet + 8 + length, s->packet_size);
  }
}

static tvm_crt_error_t WriteAll(void* context, const uint8_t* data, size_t size) {
  MicroTVMRpcServer* s = (MicroTVMRpcServer*)context;
  while (size > 0) {
    ssize_t n = s->write(s->write_context, data, size);
    if (n <= 0) return kTvmErrorWriteStreamShortWrite;
    if ((size_t)n > size) return kTvmErrorWriteStreamLongWrite;
    data += n;
    size -= (size_t)n;
  }
  return kTvmErrorNoError;
}

microtvm_rpc_server_t MicroTVMRpcServerInit(microtvm_rpc_channel_write_t write_func,
                                            void* write_func_ctx) {
  static const DLDevice kHost = {kDLCPU, 0};
  MicroTVMRpcServer* s = NULL;
  uint8_t nonce = 0;
  if (TVMPlatformMemoryAllocate(sizeof(*s), kHost, (void**)&s) != kTvmErrorNoError) return NULL;
  memset(s, 0, sizeof(*s));
  if (TVMPlatformMemoryAllocate(TVM_CRT_MAX_PACKET_SIZE_BYTES, kHost, (void**)&s->frame) !=
          kTvmErrorNoError ||
      TVMPlatformMemoryAllocate(TVM_CRT_MAX_PACKET_SIZE_BYTES, kHost, (void**)&s->packet) !=
          kTvmErrorNoError) {
    return NULL;
  }
  s->write = write_func;
  s->write_context = write_func_ctx;
  MicroTVMFramer_Init(&s->framer, WriteAll, s);
  MicroTVMUnframer_Init(&s->unframer, s->frame, TVM_CRT_MAX_PACKET_SIZE_BYTES,
                        MicroTVMSession_PacketDone, &s->session);
  (void)TVMPlatformGenerateRandom(&nonce, 1);
  (void)MicroTVMSession_Initialize(&s->session, &s->framer, nonce, OnMessage, s);
  g_log_server = s;
  return s;
}

/* Each session gets a nonce drawn when its first bytes arrive, not one derived from a value
 * fixed at boot: a device that reset between two sessions then answers with an unrelated
 * nonce, and a platform whose generator mixes in a timer draws a different one per boot. */
static void DrawSessionNonce(MicroTVMRpcServer* s) {
  uint8_t nonce = MICROTVM_INVALID_NONCE;
  if (TVMPlatformGenerateRandom(&nonce, 1) == kTvmErrorNoError) {
    s->session.local_nonce = nonce == MICROTVM_INVALID_NONCE ? 1 : nonce;
  }
  s->nonce_drawn = 1;
}

tvm_crt_error_t MicroTVMRpcServerLoop(microtvm_rpc_server_t server, uint8_t** new_data,
                                      size_t* new_data_size_bytes) {
  MicroTVMRpcServer* s = (MicroTVMRpcServer*)server;
  if (*new_data_size_bytes > 0 && !s->nonce_drawn && !MicroTVMSession_IsEstablished(&s->session)) {
    DrawSessionNonce(s);
  }
  while (*new_data_size_bytes > 0 && !s->shutdown) {
    size_t consumed = 0;
    /* A framing error only drops the damaged packet; the host retries or times out. */
    (void)MicroTVMUnframer_Write(&s->unframer, *new_data, *new_data_size_bytes, &consumed);
    *new_data += consumed;
    *new_data_size_bytes -= consumed;
  }
  if (s->shutdown) {
    s->shutdown = 0;
    s->packet_size = 0;
    s->nonce_drawn = 0;
    return kTvmErrorPlatformShutdown;
  }
  return kTvmErrorNoError;
}

void MicroTVMRpcServerLog(microtvm_rpc_server_t server, const char* text) {
  MicroTVMRpcServer* s = (MicroTVMRpcServer*)server;
  (void)MicroTVMSession_SendMessage(&s->session, kMicroTVMLog, (const uint8_t*)text,
                                    strlen(text));
}

/* TVM's TVMLogf for a device serving RPC: the formatted line (without its trailing newline)
 * goes to the host as a session Log message, which the host writes to its log. */
void TVMLogf(const char* fmt, ...) {
  char line[256];
  va_list args;
  size_t n;
  if (g_log_server == NULL) return;
  va_start(args, fmt);
  n = TVMPlatformFormatMessage(line, sizeof(line), fmt, args);
  va_end(args);
  if (n >= sizeof(line)) n = sizeof(line) - 1;
  while (n > 0 && line[n - 1] == '\n') --n;
  line[n] = '\0';
  MicroTVMRpcServerLog(g_log_server, line);
}
