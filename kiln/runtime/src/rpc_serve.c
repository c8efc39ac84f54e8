/*
 * rpc_serve.c — the hot loop of an RPC server session (kiln/rpc/serving.py drives it).
 *
 * Entry points (for kiln/rpc/native_serve.py, through ctypes):
 *   KilnRpcLoopCreate / KilnRpcLoopFree    one loop per served session
 *   KilnRpcLoopBind / KilnRpcLoopUnbind    which function handles the loop may answer itself
 *   KilnRpcServe                           receive and answer packets until one needs Python
 *   KilnRpcRecv                            one receive that spins briefly before it sleeps
 *   KilnRpcExchange                        a client's request and its expected reply
 *   KilnRpcTestingNop                      TVM's global "testing.nop" (kernel ABI, does nothing)
 *
 * The loop reads the session's socket into the channel's own receive buffer (shared with
 * Python: start/end say what is buffered) and answers the packets that dominate a session's
 * round trips without leaving C: a kCallFunc (TVM v0.16 encoding) of a bound handle whose
 * arguments are plain numbers. A native function (kernel ABI) is called directly; a Python
 * function is called through its answer closure with the GIL taken only for that call. Any
 * other packet, an error, EOF or a timeout returns to Python with the bytes left buffered,
 * so Python's general path sees exactly what it would have received itself.
 *
 * Every read is bounded by the socket's SO_RCVTIMEO (set by SocketChannel): never a hang.
 *
 * Waiting for the peer (KilnRpcWait): a request/reply ping-pong whose two ends sleep in recv()
 * on two otherwise idle CPUs pays two wake-ups of an idle CPU per round trip (on the 2-vCPU
 * VMs kiln is measured on, about 20 us each: more than the call's own work), and the scheduler
 * keeps such a pair on two CPUs once it put it there. So a receive that finds nothing polls
 * the socket with non-blocking receives for up to spin_ns before it sleeps: with the peer
 * on another CPU the reply arrives while this end still runs, and neither CPU ever idles.
 * It does not yield between polls: a yield would hand a loaded CPU to another process for a
 * whole time slice while the reply waits. With the peer on the same CPU (or slow, or gone)
 * a spin catches nothing, since the peer cannot run while it spins; then the next waits
 * sleep at once, 1, 2, 4 ... up to KILN_RPC_MAX_BACKOFF of them after each spin that caught
 * nothing, so such a pair spends about 1% of a call on spinning and an idle session nothing.
 */
#define _DEFAULT_SOURCE

#include <tvm/runtime/c_backend_api.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* What KilnRpcServe returns (mirrored in native_serve.py). */
enum {
  KILN_RPC_PYTHON = 0,        /* a packet for Python's general path is buffered */
  KILN_RPC_CLOSED = 1,        /* EOF: buffered bytes (end - start) of a packet did arrive */
  KILN_RPC_RECV_ERROR = 2,    /* recv failed: errno in err (EAGAIN: the timeout passed) */
  KILN_RPC_SEND_ERROR = 3,    /* send failed: errno in err */
  KILN_RPC_NATIVE_FAILED = 4, /* a native function returned rc (in err): its last error */
  KILN_RPC_NATIVE_VALUE = 5,  /* a native function returned ret/ret_code for Python to send */
  KILN_RPC_PY_STOPPED = 6,    /* an answer closure asked the loop to stop (or failed) */
};

enum { kCallFunc = 3, kReturn = 4 };
#define KILN_RPC_MAX_FAST_ARGS 8

typedef struct {
  uint64_t handle; /* 0: an empty slot (0 is the null handle, never bound) */
  TVMBackendPackedCFunc func;
  void* resource;
  void* answer; /* PyObject*: the answer closure of a Python function, else NULL */
} KilnRpcEntry;

/* The Python C API entry points the loop needs, passed in from ctypes.pythonapi (stable ABI:
 * no Python headers are needed to build this file). */
typedef int (*KilnGILEnsure)(void);
typedef void (*KilnGILRelease)(int);
typedef void* (*KilnCallObject)(void* callable, void* args);
typedef void (*KilnDecRef)(void* object);
typedef void (*KilnErrClear)(void);

/* How long a receive may spin before it sleeps (mirrored by native_serve._WaitState). */
typedef struct {
  int64_t spin_ns; /* 0: never spin */
  int64_t skip;    /* waits left that sleep at once (after a spin that caught nothing) */
  int64_t backoff; /* what skip becomes after the next spin that catches nothing */
} KilnRpcWait;

#define KILN_RPC_MAX_BACKOFF 256

static int64_t kiln_rpc_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* One recv() of up to cap bytes into buf: what arrived (> 0), 0 at EOF, or -errno (-EAGAIN:
 * SO_RCVTIMEO passed). Spins first as the wait state allows (see the top of this file). */
TVM_DLL int64_t KilnRpcRecv(KilnRpcWait* wait, int fd, uint8_t* buf, int64_t cap) {
  ssize_t n;
  if (wait->skip > 0) {
    wait->skip--;
  } else if (wait->spin_ns > 0) {
    int64_t start = kiln_rpc_now_ns();
    for (int polls = 0;; ++polls) {
      n = recv(fd, buf, (size_t)cap, MSG_DONTWAIT);
      if (n >= 0) {
        /* only data that came while spinning shows spinning helps: data there at once does
         * not (a peer on this CPU that preempted us answers before we poll) */
        if (polls > 0) wait->backoff = 1;
        return n;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
      if (kiln_rpc_now_ns() - start >= wait->spin_ns) break;
    }
    wait->skip = wait->backoff;
    if (wait->backoff < KILN_RPC_MAX_BACKOFF) wait->backoff *= 2;
  }
  n = recv(fd, buf, (size_t)cap, 0); /* sleeps, bounded by SO_RCVTIMEO */
  return n >= 0 ? n : -errno;
}

/* Mirrored field by field by KilnRpcLoop in native_serve.py. */
typedef struct {
  int fd;
  int err;
  uint8_t* buf;
  int64_t cap;
  int64_t start; /* buffered, not yet consumed: buf[start:end] */
  int64_t end;
  const uint8_t* null_reply; /* the whole kReturn packet of a void result */
  int64_t null_reply_len;
  TVMValue ret;
  int ret_code;
  uint64_t answered; /* packets answered in C since the loop was created */
  KilnGILEnsure gil_ensure;
  KilnGILRelease gil_release;
  KilnCallObject call_object;
  KilnDecRef decref;
  KilnErrClear err_clear;
  void* py_true; /* Py_True and Py_None: what answer closures return (see kiln_rpc_call) */
  void* py_none;
  KilnRpcEntry* table;
  int64_t table_mask; /* capacity - 1 (a power of two) */
  int64_t table_count;
  KilnRpcWait* wait; /* the channel's: shared with its Python receives */
} KilnRpcLoop;

static int64_t kiln_rpc_slot(const KilnRpcLoop* loop, uint64_t handle) {
  uint64_t h = handle * 0x9E3779B97F4A7C15ull; /* handles are multiples of 16: spread them */
  return (int64_t)((h >> 32) & (uint64_t)loop->table_mask);
}

static KilnRpcEntry* kiln_rpc_find(const KilnRpcLoop* loop, uint64_t handle) {
  for (int64_t i = kiln_rpc_slot(loop, handle);; i = (i + 1) & loop->table_mask) {
    KilnRpcEntry* entry = &loop->table[i];
    if (entry->handle == handle) return entry;
    if (entry->handle == 0) return NULL;
  }
}

TVM_DLL KilnRpcLoop* KilnRpcLoopCreate(void) {
  KilnRpcLoop* loop = (KilnRpcLoop*)calloc(1, sizeof(KilnRpcLoop));
  if (loop == NULL) return NULL;
  loop->table = (KilnRpcEntry*)calloc(16, sizeof(KilnRpcEntry));
  if (loop->table == NULL) {
    free(loop);
    return NULL;
  }
  loop->table_mask = 15;
  return loop;
}

TVM_DLL void KilnRpcLoopFree(KilnRpcLoop* loop) {
  if (loop == NULL) return;
  free(loop->table);
  free(loop);
}

static void kiln_rpc_insert(KilnRpcLoop* loop, const KilnRpcEntry* entry) {
  int64_t i = kiln_rpc_slot(loop, entry->handle);
  while (loop->table[i].handle != 0 && loop->table[i].handle != entry->handle) {
    i = (i + 1) & loop->table_mask;
  }
  if (loop->table[i].handle == 0) loop->table_count++;
  loop->table[i] = *entry;
}

/* Let the loop answer calls of `handle`: a native function (func, resource) or a Python one
 * (answer closure, kept alive by the caller until Unbind). Returns -1 when out of memory. */
TVM_DLL int KilnRpcLoopBind(KilnRpcLoop* loop, uint64_t handle, TVMBackendPackedCFunc func,
                            void* resource, void* answer) {
  if (handle == 0) return -1;
  if ((loop->table_count + 1) * 2 > loop->table_mask + 1) { /* keep the load under 1/2 */
    KilnRpcEntry* old = loop->table;
    int64_t old_cap = loop->table_mask + 1;
    KilnRpcEntry* grown = (KilnRpcEntry*)calloc((size_t)old_cap * 2, sizeof(KilnRpcEntry));
    if (grown == NULL) return -1;
    loop->table = grown;
    loop->table_mask = old_cap * 2 - 1;
    loop->table_count = 0;
    for (int64_t i = 0; i < old_cap; ++i) {
      if (old[i].handle != 0) kiln_rpc_insert(loop, &old[i]);
    }
    free(old);
  }
  KilnRpcEntry entry = {handle, func, resource, answer};
  kiln_rpc_insert(loop, &entry);
  return 0;
}

/* Forget `handle` (linear probing: re-place the entries after it that probed past it). */
TVM_DLL void KilnRpcLoopUnbind(KilnRpcLoop* loop, uint64_t handle) {
  KilnRpcEntry* entry = kiln_rpc_find(loop, handle);
  if (entry == NULL) return;
  int64_t i = entry - loop->table;
  loop->table[i].handle = 0;
  loop->table_count--;
  for (int64_t j = (i + 1) & loop->table_mask; loop->table[j].handle != 0;
       j = (j + 1) & loop->table_mask) {
    KilnRpcEntry moved = loop->table[j];
    loop->table[j].handle = 0;
    loop->table_count--;
    kiln_rpc_insert(loop, &moved);
  }
}

/* Send all of data[0:size]: 0, or the errno of the send that failed. */
static int kiln_rpc_send_all(int fd, const uint8_t* data, int64_t size) {
  while (size > 0) {
    ssize_t n = send(fd, data, (size_t)size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += n;
    size -= n;
  }
  return 0;
}

static int kiln_rpc_send(KilnRpcLoop* loop, const uint8_t* data, int64_t size) {
  loop->err = kiln_rpc_send_all(loop->fd, data, size);
  return loop->err == 0 ? 0 : -1;
}

/* Answer the kCallFunc whose body (after the code) is body[0:nbytes], if the loop can.
 * Returns 1 when answered, 0 when Python must, or a KILN_RPC_* status (> 1) to return. */
static int kiln_rpc_call(KilnRpcLoop* loop, const uint8_t* body, int64_t nbytes) {
  uint64_t handle;
  int32_t nargs;
  if (nbytes < 12) return 0;
  memcpy(&handle, body, 8);
  memcpy(&nargs, body + 8, 4);
  KilnRpcEntry* entry = handle ? kiln_rpc_find(loop, handle) : NULL;
  if (entry == NULL || nargs < 0 || nargs > KILN_RPC_MAX_FAST_ARGS) return 0;
  if (entry->answer != NULL) { /* a Python function: argument-less calls only */
    if (nargs != 0 || nbytes != 12) return 0;
    loop->start += 12 + nbytes; /* consumed: Python's closure replies on its own */
    int state = loop->gil_ensure();
    void* result = loop->call_object(entry->answer, NULL);
    /* True: send the void reply; None: the closure replied; else (False, NULL): stop */
    int outcome = result == loop->py_true ? 2 : result != NULL && result == loop->py_none;
    if (result == NULL) loop->err_clear(); /* closures catch everything but out of memory */
    else loop->decref(result);
    loop->gil_release(state);
    if (outcome == 0) return KILN_RPC_PY_STOPPED;
    if (outcome == 2 && kiln_rpc_send(loop, loop->null_reply, loop->null_reply_len) != 0) {
      return KILN_RPC_SEND_ERROR;
    }
    return 1;
  }
  /* a native function: plain-number arguments (int, uint, float, null) only */
  TVMValue args[KILN_RPC_MAX_FAST_ARGS];
  int codes[KILN_RPC_MAX_FAST_ARGS];
  int64_t pos = 12 + 4 * (int64_t)nargs;
  if (pos > nbytes) return 0;
  for (int32_t k = 0; k < nargs; ++k) {
    memcpy(&codes[k], body + 12 + 4 * k, 4);
    if (codes[k] == kTVMNullptr) {
      args[k].v_handle = NULL;
      continue;
    }
    if (codes[k] != kDLInt && codes[k] != kDLUInt && codes[k] != kDLFloat) return 0;
    if (pos + 8 > nbytes) return 0;
    memcpy(&args[k], body + pos, 8);
    if (codes[k] == kDLUInt) codes[k] = kDLInt; /* TVM's C API has no unsigned value */
    pos += 8;
  }
  if (pos != nbytes) return 0; /* trailing bytes: Python reports the malformed packet */
  loop->start += 12 + nbytes;
  loop->ret.v_handle = NULL;
  loop->ret_code = kTVMNullptr;
  int rc = entry->func(args, codes, nargs, &loop->ret, &loop->ret_code, entry->resource);
  if (rc != 0) {
    loop->err = rc;
    return KILN_RPC_NATIVE_FAILED;
  }
  if (loop->ret_code != kTVMNullptr) return KILN_RPC_NATIVE_VALUE;
  if (kiln_rpc_send(loop, loop->null_reply, loop->null_reply_len) != 0) {
    return KILN_RPC_SEND_ERROR;
  }
  return 1;
}

/* Receive and answer packets until one needs Python (or the channel fails, see the enum). */
TVM_DLL int KilnRpcServe(KilnRpcLoop* loop) {
  for (;;) {
    int64_t have = loop->end - loop->start;
    if (have >= 12) {
      uint64_t nbytes;
      int32_t code;
      memcpy(&nbytes, loop->buf + loop->start, 8);
      memcpy(&code, loop->buf + loop->start + 8, 4);
      if (code != kCallFunc || nbytes < 4 || nbytes > (uint64_t)(loop->cap - 8)) {
        return KILN_RPC_PYTHON;
      }
      if ((int64_t)nbytes + 8 <= have) {
        int done = kiln_rpc_call(loop, loop->buf + loop->start + 12, (int64_t)nbytes - 4);
        if (done == 0) return KILN_RPC_PYTHON;
        if (done > 1) return done;
        loop->answered++;
        continue;
      }
    } else if (have >= 8) {
      uint64_t nbytes;
      memcpy(&nbytes, loop->buf + loop->start, 8);
      if (nbytes < 4) return KILN_RPC_PYTHON; /* zero (skipped) or garbage: Python's path */
    }
    if (loop->start > 0) { /* a partial packet (if any) moves to the front: room for it */
      memmove(loop->buf, loop->buf + loop->start, (size_t)have);
      loop->start = 0;
      loop->end = have;
    }
    if (loop->end == loop->cap) return KILN_RPC_PYTHON; /* a packet larger than the buffer */
    int64_t n = KilnRpcRecv(loop->wait, loop->fd, loop->buf + loop->end, loop->cap - loop->end);
    if (n == 0) return KILN_RPC_CLOSED;
    if (n < 0) {
      loop->err = (int)-n;
      return KILN_RPC_RECV_ERROR; /* EINTR too: Python handles its signals, then resumes */
    }
    loop->end += n;
  }
}

/* A client's repeating request (a void call without arguments) and the reply it expects;
 * mirrored by native_serve._ExchangeState. */
typedef struct {
  int fd;
  int err; /* errno of a failed send or receive */
  const uint8_t* packet;
  int64_t packet_len;
  const uint8_t* expected;
  int64_t expected_len;
  uint8_t* buf; /* the channel's receive buffer: another reply is left in buf[0:got] */
  int64_t cap;
  int64_t got;
  KilnRpcWait* wait;
} KilnRpcExchangeState;

/* Send the packet and receive once: 1 when exactly the expected reply came (consumed), 0 when
 * other bytes came (buf[0:got]), -1 when the send failed, -2 when the receive did (err), -3 at
 * EOF. One receive suffices for the expected reply: the server sends it in one segment. */
TVM_DLL int KilnRpcExchange(KilnRpcExchangeState* x) {
  x->err = kiln_rpc_send_all(x->fd, x->packet, x->packet_len);
  if (x->err != 0) return -1;
  int64_t n = KilnRpcRecv(x->wait, x->fd, x->buf, x->cap);
  if (n == 0) return -3;
  if (n < 0) {
    x->err = (int)-n;
    return -2;
  }
  if (n == x->expected_len && memcmp(x->buf, x->expected, (size_t)n) == 0) return 1;
  x->got = n;
  return 0;
}

/* TVM's "testing.nop": takes anything, returns nothing; the empty call RPC latency is timed
 * with (TVM's server answers it natively too). */
TVM_DLL int KilnRpcTestingNop(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                              int* ret_type_code, void* resource_handle) {
  (void)args, (void)type_codes, (void)num_args, (void)ret, (void)ret_type_code;
  (void)resource_handle;
  return 0;
}
