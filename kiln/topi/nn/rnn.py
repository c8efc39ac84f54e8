"""Recurrent layers: one direction of an LSTM, GRU or simple RNN over a whole sequence, as one
kernel.

Entry points: :func:`lstm_sequence`, :func:`gru_sequence`, :func:`rnn_sequence`,
:func:`packed_recurrent_weight_shape`, :data:`RNN_ACTIVATIONS`, :data:`KERNEL_SOURCE`.

A recurrent layer spends its time in the per-step product of the hidden state with the
recurrent weight ``R`` (``[G * H, H]`` for ``G`` gates, ONNX's gate order) and the gate
arithmetic after it. The input projection of every step is one GEMM computed before the layer
(``xproj [T, B, G * H]``, input biases and the biases that add outside a gate's product
included; ``T`` may be symbolic); the layer is then one call of a C kernel that runs the
``T`` steps itself, so a sequence costs one kernel call whatever its length, on the graph
executor and on the VM alike. ``R`` arrives packed as ``[H / n, H, G, n]``, ``packed[jb, k, q,
ji] = R[q * H + jb * n + ji, k]``: for a block of ``n`` hidden units the products of all
``G`` gates read one contiguous run of ``G * n`` floats per ``k`` into ``G * n`` accumulators
(registers), and the gate epilogue of those units runs right after them.

Threads: when a step's product is large enough (``parallel_min_macs``), the kernel launches
kiln's thread pool once for the whole sequence; each task owns a fixed share of the hidden
blocks and the tasks meet at a barrier after each step (the next step reads every unit of
the new state), instead of waking the pool once per step. ``tanh`` and ``sigmoid`` are
``fast_tanh``'s rational function (error below 8e-7; ``sigmoid(x) = (1 + tanh(x / 2)) / 2``),
which vectorizes where libm's ``tanhf``/``expf`` do not.

Example
-------
>>> from kiln import te
>>> from kiln.topi.nn.rnn import lstm_sequence
>>> y, state = lstm_sequence(te.placeholder((4, 1, 64)), te.placeholder((2, 1, 16)),
...                          te.placeholder((1, 16, 4, 16)), te.placeholder((1,), "int32"))
>>> [int(d) for d in y.shape], [int(d) for d in state.shape]
([4, 1, 16], [2, 1, 16])
"""

from __future__ import annotations

from typing import Any

from kiln import te, tir
from kiln.runtime.error import TVMError
from kiln.topi.math import FAST_EXP_POLYNOMIAL, FAST_TANH_RATIONAL
from kiln.topi.utils import get_const_int

__all__ = ["lstm_sequence", "gru_sequence", "rnn_sequence", "packed_recurrent_weight_shape",
           "check_sequence_lens", "RNN_ACTIVATIONS", "KERNEL_SOURCE", "LENS_CHECK_SOURCE"]

KERNEL_NAME = "kiln_rnn_sequence"
# The activations of a simple RNN the kernel applies (ONNX names, lower case; none takes alpha);
# the value is the kernel's code for it.
RNN_ACTIVATIONS = {"tanh": 0, "relu": 1, "sigmoid": 2}
# the kernel's cell kinds and their gate counts
_KINDS = {"rnn": (0, 1), "lstm": (1, 4), "gru": (2, 3)}
# lanes of the packed weight the kernel has a register-blocked product for
_LANES = (1, 2, 4, 8, 16)


def _c_horner(coeffs: tuple[float, ...], var: str) -> str:
    text = f"{coeffs[-1]!r}f"
    for c in coeffs[-2::-1]:
        text = f"({text} * {var} + {c!r}f)"
    return text


def _kernel_source() -> str:
    p, q, bound = FAST_TANH_RATIONAL
    return (_KERNEL_TEMPLATE.replace("@BOUND@", f"{bound!r}f")
            .replace("@TANH_P@", _c_horner(p, "t")).replace("@TANH_Q@", _c_horner(q, "t"))
            .replace("@EXP_P@", _c_horner(FAST_EXP_POLYNOMIAL, "r")))


_KERNEL_TEMPLATE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
long syscall(long number, ...); /* unistd.h hides it under -std=c99 */
#elif defined(__APPLE__)
#include <sched.h>
#endif
#ifndef KILN_RNN_SEQUENCE_DEFINED
#define KILN_RNN_SEQUENCE_DEFINED
#if defined(__GNUC__)
#define KILN_RNN_INLINE static inline __attribute__((always_inline))
#else
#define KILN_RNN_INLINE static inline
#endif
enum { KILN_RNN = 0, KILN_LSTM = 1, KILN_GRU = 2 };
/* tasks beyond these only take over others' units; a bare-metal build (the CRT runs every
   launch as one task) keeps its stack small */
#if defined(__linux__) || defined(__APPLE__) || defined(_WIN32)
enum { KILN_RNN_MAX_OWNERS = 64 };
#else
enum { KILN_RNN_MAX_OWNERS = 1 };
#endif

/* A task's share of the work: its units handed out and finished over all stages, on a cache
   line of their own (the other tasks read them only to take over a unit or to see a stage
   finished). */
typedef struct {
  intptr_t claimed, completed;
#if defined(__GNUC__)
} __attribute__((aligned(64))) KilnRnnShare;
#else
} KilnRnnShare;
#endif

typedef struct {
  const float* xproj;  /* [T, B, G * H] */
  const float* h0;     /* [B, H] */
  const float* weight; /* [H / L, H, G, L] */
  const float* hbias;  /* [H]: the GRU candidate gate's recurrent bias */
  const int32_t* lens; /* each batch row's sequence length (clamped into [0, T]) */
  int64_t lens_stride;  /* 1: lens is [B]; 0: lens is [1], one length for every row */
  float* y;            /* [T, B, H] */
  float* h_out;        /* [B, H]; a GRU with linear_before_reset = 0 keeps r * h here */
  float* c;            /* [B, H]: the LSTM cell state, updated in place */
  int64_t steps, batch, hidden, lanes, gates;
  int32_t kind, activation, reverse, linear_before_reset;
  float lo, hi; /* the clip range of the gate pre-activations (+-inf: none) */
  KilnRnnShare share[KILN_RNN_MAX_OWNERS]; /* a team's bookkeeping, zero at the start */
  /* tasks asleep waiting for a unit in flight, and the word they sleep on (bumped by a
     finished unit when someone sleeps) */
  int32_t sleepers, progress;
} KilnRnnSequence;

/* fast_tanh (kiln.topi.math): an odd rational function on [-bound, bound]; NaN stays NaN */
KILN_RNN_INLINE float kiln_rnn_tanh(float x) {
  const float xc = x < -@BOUND@ ? -@BOUND@ : (x > @BOUND@ ? @BOUND@ : x);
  const float t = xc * xc;
  return xc * @TANH_P@ / @TANH_Q@;
}

/* 1 / (1 + e^-x) with fast_exp's polynomial (kiln.topi.math): relative error ~2e-7 also
   where the result is tiny (a gate nearly closed); NaN stays NaN */
KILN_RNN_INLINE float kiln_rnn_sigmoid(float x) {
  const float xc = x < -88.0f ? 88.0f : (x > 88.0f ? -88.0f : -x);
  const float n = floorf(xc * 1.4426950408889634f + 0.5f);
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
  const int32_t bits = ((int32_t)n + 127) * (1 << 23); /* 2^n, n in [-127, 127] */
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  const float e = (r * r * @EXP_P@ + r + 1.0f) * scale;
  return x != x ? x : 1.0f / (1.0f + e);
}

KILN_RNN_INLINE float kiln_rnn_clip(float x, float lo, float hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

#if defined(__GNUC__)
/* the target's float vector (gcc/clang vector extension): KILN_RNN_VW lanes */
#if defined(__AVX512F__)
#define KILN_RNN_VW 16
#elif defined(__AVX__)
#define KILN_RNN_VW 8
#else
#define KILN_RNN_VW 4
#endif
typedef float kiln_rnn_vec __attribute__((vector_size(KILN_RNN_VW * sizeof(float))));

/* kiln_rnn_dot for 16 lanes in vector registers (a compiler left to choose vectorizes along k
   for small C). With one or two gates, k is split in two halves of the accumulators, so that
   the chain of dependent multiply-adds is not what sets the pace. */
KILN_RNN_INLINE void kiln_rnn_dot16(float* restrict acc, const float* restrict h,
                                    const float* restrict w, int64_t hidden, int64_t stride,
                                    int C) {
  enum { NV = 16 / KILN_RNN_VW };
  const int split = C <= 2 ? 2 : 1;
  kiln_rnn_vec a[2][4 * NV], wv;
  for (int u = 0; u < 2; ++u)
    for (int i = 0; i < 4 * NV; ++i) a[u][i] = (kiln_rnn_vec){0};
  int64_t k = 0;
  for (; k + split <= hidden; k += split)
    for (int u = 0; u < split; ++u)
      for (int i = 0; i < C * NV; ++i) {
        memcpy(&wv, w + (k + u) * stride + i * KILN_RNN_VW, sizeof wv);
        a[u][i] += h[k + u] * wv;
      }
  for (; k < hidden; ++k)
    for (int i = 0; i < C * NV; ++i) {
      memcpy(&wv, w + k * stride + i * KILN_RNN_VW, sizeof wv);
      a[0][i] += h[k] * wv;
    }
  for (int i = 0; i < C * NV; ++i) {
    wv = a[0][i] + a[1][i];
    memcpy(acc + i * KILN_RNN_VW, &wv, sizeof wv);
  }
}
#endif

/* acc[i] = sum_k h[k] * w[k * stride + i] for i < C * L: the products of C gates of one
   block of L hidden units. Inlined with constant C and L, the C * L accumulators are
   registers and the loops vectorize. */
KILN_RNN_INLINE void kiln_rnn_dot(float* restrict acc, const float* restrict h,
                                  const float* restrict w, int64_t hidden, int64_t stride,
                                  int C, int L) {
#if defined(__GNUC__)
  if (L == 16) {
    kiln_rnn_dot16(acc, h, w, hidden, stride, C);
    return;
  }
#endif
  float a[4 * 16];
  for (int i = 0; i < C * L; ++i) a[i] = 0.0f;
  for (int64_t k = 0; k < hidden; ++k) {
    const float hk = h[k];
    const float* restrict wk = w + k * stride;
    for (int i = 0; i < C * L; ++i) a[i] += hk * wk[i];
  }
  for (int i = 0; i < C * L; ++i) acc[i] = a[i];
}

/* One step of the hidden units [j0, j0 + L) of batch row b: h, the previous hidden state
   [B, H]; x, the step's projection row [B, G * H]; out, the step's output row [B, H].
   Phase 1 is the candidate half of a GRU with linear_before_reset = 0. */
KILN_RNN_INLINE void kiln_rnn_block(const KilnRnnSequence* p, int phase, int64_t b,
                                    int64_t j0, const float* h, const float* x, float* out,
                                    int L) {
  const int64_t H = p->hidden, G = p->gates;
  const float lo = p->lo, hi = p->hi;
  const float* restrict w = p->weight + (j0 / L) * H * G * L;
  const float* restrict hb = h + b * H;
  const float* restrict xb = x + b * G * H + j0;
  float* restrict ob = out + b * H + j0;
  const float* restrict bias = p->hbias + j0;
  float acc[4 * 16];
  if (p->kind == KILN_RNN) {
    kiln_rnn_dot(acc, hb, w, H, G * L, 1, L);
    if (p->activation == 0) {
      for (int i = 0; i < L; ++i) ob[i] = kiln_rnn_tanh(kiln_rnn_clip(xb[i] + acc[i], lo, hi));
    } else if (p->activation == 1) {
      for (int i = 0; i < L; ++i) {
        const float v = kiln_rnn_clip(xb[i] + acc[i], lo, hi);
        ob[i] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int i = 0; i < L; ++i)
        ob[i] = kiln_rnn_sigmoid(kiln_rnn_clip(xb[i] + acc[i], lo, hi));
    }
  } else if (p->kind == KILN_LSTM) {
    float* restrict cb = p->c + b * H + j0;
    kiln_rnn_dot(acc, hb, w, H, G * L, 4, L);
    for (int i = 0; i < L; ++i) { /* gates i, o, f, c */
      const float gi = kiln_rnn_sigmoid(kiln_rnn_clip(xb[i] + acc[i], lo, hi));
      const float go = kiln_rnn_sigmoid(kiln_rnn_clip(xb[H + i] + acc[L + i], lo, hi));
      const float gf = kiln_rnn_sigmoid(kiln_rnn_clip(xb[2 * H + i] + acc[2 * L + i], lo, hi));
      const float gc = kiln_rnn_tanh(kiln_rnn_clip(xb[3 * H + i] + acc[3 * L + i], lo, hi));
      const float c = gf * cb[i] + gi * gc;
      cb[i] = c;
      ob[i] = go * kiln_rnn_tanh(c);
    }
  } else if (p->linear_before_reset) { /* GRU: n = tanh(xh + r * (h @ Rh.T + Rbh)) */
    kiln_rnn_dot(acc, hb, w, H, G * L, 3, L);
    for (int i = 0; i < L; ++i) {
      const float z = kiln_rnn_sigmoid(kiln_rnn_clip(xb[i] + acc[i], lo, hi));
      const float r = kiln_rnn_sigmoid(kiln_rnn_clip(xb[H + i] + acc[L + i], lo, hi));
      const float n = kiln_rnn_tanh(
          kiln_rnn_clip(xb[2 * H + i] + r * (acc[2 * L + i] + bias[i]), lo, hi));
      ob[i] = (1.0f - z) * n + z * hb[j0 + i];
    }
  } else if (phase == 0) { /* GRU, n = tanh(xh + (r * h) @ Rh.T + Rbh): gates z, r first */
    float* restrict rh = p->h_out + b * H + j0;
    kiln_rnn_dot(acc, hb, w, H, G * L, 2, L);
    for (int i = 0; i < L; ++i) {
      /* z waits in the output row, which this task fills in phase 1 */
      ob[i] = kiln_rnn_sigmoid(kiln_rnn_clip(xb[i] + acc[i], lo, hi));
      rh[i] = kiln_rnn_sigmoid(kiln_rnn_clip(xb[H + i] + acc[L + i], lo, hi)) * hb[j0 + i];
    }
  } else {
    kiln_rnn_dot(acc, p->h_out + b * H, w + 2 * L, H, G * L, 1, L);
    for (int i = 0; i < L; ++i) {
      const float z = ob[i];
      const float n = kiln_rnn_tanh(kiln_rnn_clip(xb[2 * H + i] + acc[i] + bias[i], lo, hi));
      ob[i] = (1.0f - z) * n + z * hb[j0 + i];
    }
  }
}

/* kiln_rnn_block specialized for each lane count the packed weight may have */
static void kiln_rnn_block_any(const KilnRnnSequence* p, int phase, int64_t b, int64_t j0,
                               const float* h, const float* x, float* out) {
  switch (p->lanes) {
    case 16: kiln_rnn_block(p, phase, b, j0, h, x, out, 16); break;
    case 8: kiln_rnn_block(p, phase, b, j0, h, x, out, 8); break;
    case 4: kiln_rnn_block(p, phase, b, j0, h, x, out, 4); break;
    case 2: kiln_rnn_block(p, phase, b, j0, h, x, out, 2); break;
    default: kiln_rnn_block(p, phase, b, j0, h, x, out, 1); break;
  }
}

/* The hidden state of the step before stage `stage` (a step is one stage, two for a GRU with
   linear_before_reset = 0); runs one (batch row, hidden block) unit of the stage. */
KILN_RNN_INLINE int64_t kiln_rnn_length(const KilnRnnSequence* p, int64_t b) {
  const int64_t n = p->lens[b * p->lens_stride];
  return n < 0 ? 0 : (n > p->steps ? p->steps : n);
}

/* One (batch row, hidden block) unit of stage `stage` (a step is one stage, two for a GRU with
   linear_before_reset = 0). A step at or past the row's length leaves the state as it is and
   outputs zeros; a row's first step (the last within its length, reverse) reads h0. */
static void kiln_rnn_unit(const KilnRnnSequence* p, intptr_t stage, intptr_t unit, int phases) {
  const int64_t B = p->batch, H = p->hidden, L = p->lanes, T = p->steps;
  const int64_t s = stage / phases, blocks = H / L, b = unit / blocks, j0 = (unit % blocks) * L;
  const int64_t t = p->reverse ? T - 1 - s : s, length = kiln_rnn_length(p, b);
  float* out = p->y + t * B * H;
  if (t >= length) {
    if (stage % phases == phases - 1) memset(out + b * H + j0, 0, sizeof(float) * L);
    return;
  }
  const int first = p->reverse ? t == length - 1 : t == 0;
  const float* h = first ? p->h0 : p->y + (p->reverse ? t + 1 : t - 1) * B * H;
  kiln_rnn_block_any(p, (int)(stage % phases), b, j0, h, p->xproj + t * B * p->gates * H, out);
}

/* How many stages have every unit finished: units of a stage start only once the stages
   before it are finished, so the finished units are whole stages and part of the next. */
static intptr_t kiln_rnn_stages_done(KilnRnnSequence* p, int owners, intptr_t units) {
  intptr_t done = 0;
  for (int o = 0; o < owners; ++o)
    done += __atomic_load_n(&p->share[o].completed, __ATOMIC_ACQUIRE);
  return done / units;
}

/* Polls (one pause each, ~25-80 ns) a task with nothing ready makes before it sleeps: a unit
   is a few microseconds of work, so a unit still in flight after ~50-150 us belongs to a task
   that is not running (preempted under load), and spinning on would only keep it off a core
   for the rest of the waiter's time slice. */
enum { KILN_RNN_SPIN_POLLS = 2048 };

/* Sleep until some unit finishes, unless a stage finished since the caller saw `done` stages
   finished (the caller then looks again). The sleeper count is raised before the stages are
   read again and a finishing task reads it after publishing its unit (both sequentially
   consistent), so either the waiter sees the unit or the finisher sees the sleeper. */
static void kiln_rnn_wait(KilnRnnSequence* p, int owners, intptr_t units, intptr_t done) {
#if defined(__linux__)
  const int32_t seen = __atomic_load_n(&p->progress, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
  if (kiln_rnn_stages_done(p, owners, units) == done)
    syscall(SYS_futex, &p->progress, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
  __atomic_sub_fetch(&p->sleepers, 1, __ATOMIC_SEQ_CST);
#elif defined(__APPLE__)
  (void)p, (void)owners, (void)units, (void)done;
  sched_yield();
#else
  (void)p, (void)owners, (void)units, (void)done;
#endif
}

/* Publish one finished unit of share `o` and wake the tasks asleep in kiln_rnn_wait. */
static void kiln_rnn_finish(KilnRnnSequence* p, int o) {
  __atomic_add_fetch(&p->share[o].completed, 1, __ATOMIC_SEQ_CST);
#if defined(__linux__)
  if (__atomic_load_n(&p->sleepers, __ATOMIC_SEQ_CST) > 0) {
    __atomic_add_fetch(&p->progress, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &p->progress, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL, NULL, 0);
  }
#endif
}

/* Task `task_id` of the whole sequence. Alone, it runs every unit of every stage in order. In
   a team, each of the first KILN_RNN_MAX_OWNERS tasks owns a fixed share of each stage's
   units, so its part of the weight stays in its core's cache from step to step; it claims its
   own units one at a time, a unit of a stage only once every unit of the stages before it
   has finished (a step reads the whole previous state). A task with no own unit ready takes
   over one of another task's: a task that is not running (preempted, still waking) holds
   nothing, so the others never wait for it as they would at a barrier; only a unit in flight
   is waited for: polled briefly, then slept on (its task may have been preempted). */
static int kiln_rnn_sequence_task(int task_id, TVMParallelGroupEnv* penv, void* cdata) {
  KilnRnnSequence* p = (KilnRnnSequence*)cdata;
  const intptr_t units = (intptr_t)(p->batch * (p->hidden / p->lanes));
  const int phases = p->kind == KILN_GRU && !p->linear_before_reset ? 2 : 1;
  const intptr_t stages = (intptr_t)p->steps * phases;
  const int owners = penv->num_task < KILN_RNN_MAX_OWNERS ? penv->num_task
                                                           : KILN_RNN_MAX_OWNERS;
  if (owners <= 1) {
    /* every other stage walks the blocks backwards: the blocks the last stage read most
       recently, the ones still in cache when the weight is about the cache's size, go first */
    for (intptr_t stage = 0; stage < stages; ++stage)
      for (intptr_t u = 0; u < units; ++u)
        kiln_rnn_unit(p, stage, stage % 2 ? units - 1 - u : u, phases);
    return 0;
  }
  intptr_t done = 0; /* stages known finished */
  int idle_polls = 0;   /* looks in a row that found nothing ready */
  for (;;) {
    int busy = 0, ran = 0;
    for (int k = 0; k < owners && !ran; ++k) {
      const int o = (task_id + k) % owners; /* its own share first */
      const intptr_t first = units * o / owners, size = units * (o + 1) / owners - first;
      KilnRnnShare* share = &p->share[o];
      intptr_t next = __atomic_load_n(&share->claimed, __ATOMIC_RELAXED);
      if (size == 0 || next >= stages * size) continue;
      busy = 1;
      if (next / size > done) done = kiln_rnn_stages_done(p, owners, units);
      if (next / size > done) continue;
      if (__atomic_compare_exchange_n(&share->claimed, &next, next + 1, 0, __ATOMIC_ACQ_REL,
                                      __ATOMIC_RELAXED)) {
        kiln_rnn_unit(p, next / size, first + next % size, phases);
        kiln_rnn_finish(p, o);
      }
      ran = 1; /* ran a unit, or lost one to another task: look again from the own share */
    }
    if (!busy) return 0;
    if (ran) {
      idle_polls = 0;
    } else if (idle_polls < KILN_RNN_SPIN_POLLS) {
      ++idle_polls;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else { /* every look found `done` current: nothing ready until a stage finishes */
      kiln_rnn_wait(p, owners, units, done);
    }
  }
}

/* One direction of a recurrent layer over its T steps (see kiln/topi/nn/rnn.py): state0 is
   h0 [B, H] (LSTM: [2, B, H], h0 then c0) and state_out the final state, same layout. */
static int32_t kiln_rnn_sequence(int32_t kind, int32_t activation, int32_t reverse,
                                 int32_t linear_before_reset, int32_t has_clip, float clip,
                                 int64_t steps, int64_t batch, int64_t hidden, int64_t lanes,
                                 int32_t parallel, const float* xproj, const float* state0,
                                 const float* weight, const float* hbias,
                                 const int32_t* lens, int64_t lens_stride, float* y,
                                 float* state_out) {
  const int64_t size = batch * hidden;
  KilnRnnSequence p = {xproj, state0, weight, hbias, lens, lens_stride, y, state_out,
                       kind == KILN_LSTM ? state_out + size : NULL,
                       steps, batch, hidden, lanes,
                       kind == KILN_LSTM ? 4 : kind == KILN_GRU ? 3 : 1,
                       kind, activation, reverse, linear_before_reset,
                       has_clip ? -clip : -INFINITY, has_clip ? clip : INFINITY, {{0, 0}}, 0, 0};
  if (kind == KILN_LSTM) memcpy(p.c, state0 + size, sizeof(float) * size);
  if (steps > 0) {
    int32_t rc = TVMBackendParallelLaunch(kiln_rnn_sequence_task, &p, parallel ? 0 : 1);
    if (rc != 0) return rc;
  }
  for (int64_t b = 0; b < batch; ++b) { /* the state after each row's last step */
    const int64_t length = kiln_rnn_length(&p, b);
    if (length == 0) { /* no step: a zero state, as onnxruntime gives */
      memset(state_out + b * hidden, 0, sizeof(float) * hidden);
      if (kind == KILN_LSTM) memset(p.c + b * hidden, 0, sizeof(float) * hidden);
      continue;
    }
    const float* last = y + (reverse ? 0 : length - 1) * size;
    memcpy(state_out + b * hidden, last + b * hidden, sizeof(float) * hidden);
  }
  return 0;
}
#endif
"""

KERNEL_SOURCE = _kernel_source()


def packed_recurrent_weight_shape(hidden: int, gates: int, lanes: int) -> tuple[int, ...]:
    """The packed layout ``[H / n, H, G, n]`` of a ``[G * H, H]`` recurrent weight."""
    if hidden % lanes:
        raise TVMError(f"recurrent weight packing: hidden size {hidden} is not a multiple of "
                       f"{lanes} lanes")
    return (hidden // lanes, hidden, gates, lanes)


def _check(op_name: str, xproj: te.Tensor, state: te.Tensor, weight: te.Tensor,
           gates: int) -> tuple[int, int, int]:
    """(batch, hidden, lanes) after checking the operand shapes and dtypes agree."""
    batch, width = (get_const_int(d) for d in xproj.shape[1:])
    blocks, k, g, lanes = (get_const_int(d) for d in weight.shape)
    hidden = blocks * lanes
    if g != gates or k != hidden or width != gates * hidden:
        raise TVMError(f"{op_name}: weight {[blocks, k, g, lanes]} does not pack {gates} gates "
                       f"of the projected input's width {width}")
    if [get_const_int(d) for d in state.shape[-2:]] != [batch, hidden]:
        raise TVMError(f"{op_name}: state {[get_const_int(d) for d in state.shape]} does "
                       f"not match batch {batch} and hidden size {hidden}")
    if lanes not in _LANES:
        raise TVMError(f"{op_name}: the packed weight has {lanes} lanes; the kernel takes "
                       f"one of {list(_LANES)}")
    if {str(t.dtype) for t in (xproj, state, weight)} != {"float32"}:
        raise TVMError(f"{op_name}: the kernel computes float32 only, got "
                       f"{[str(t.dtype) for t in (xproj, state, weight)]}")
    return batch, hidden, lanes


def _returning_errors(call: Any) -> Any:
    """``Evaluate(call)`` of a C function returning 0 or -1 with the error message set: a
    failure returns -1 from the kernel (the message kept for the caller)."""
    rc = tir.Var("rc", "int32")
    failed = tir.IfThenElse(rc != 0, tir.Evaluate(tir.ret(rc)))
    return tir.LetStmt(rc, call, failed)


LENS_CHECK_NAME = "kiln_check_sequence_lens"
# The run-time range check of ONNX's sequence_lens (onnxruntime refuses a length outside
# [0, T] too); the message names the layer, the row and the value. No snprintf: the CRT's
# C library may lack it.
LENS_CHECK_SOURCE = r"""
#include <stdint.h>
#ifndef KILN_CHECK_SEQUENCE_LENS_DEFINED
#define KILN_CHECK_SEQUENCE_LENS_DEFINED
static char* kiln_lens_text(char* p, const char* text) {
  while (*text) *p++ = *text++;
  return p;
}

static char* kiln_lens_int(char* p, int64_t value) {
  char digits[24];
  int n = 0;
  uint64_t u = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
  if (value < 0) *p++ = '-';
  do {
    digits[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  while (n) *p++ = digits[--n];
  return p;
}

/* Copy lens[count] to out after checking each is in [0, steps]; else set the error and
   return -1. kind: 0 RNN, 1 LSTM, 2 GRU (the layer named in the message). */
static int32_t kiln_check_sequence_lens(int32_t kind, int64_t steps, int64_t count,
                                        const int32_t* lens, int32_t* out) {
  static const char* const layers[] = {"RNN", "LSTM", "GRU"};
  for (int64_t b = 0; b < count; ++b) {
    if (lens[b] < 0 || lens[b] > steps) {
      char message[256];
      char* p = kiln_lens_text(message, layers[kind < 0 || kind > 2 ? 0 : kind]);
      p = kiln_lens_text(p, ": sequence_lens[");
      p = kiln_lens_int(p, b);
      p = kiln_lens_text(p, "] = ");
      p = kiln_lens_int(p, lens[b]);
      p = kiln_lens_text(p, " is outside [0, ");
      p = kiln_lens_int(p, steps);
      p = kiln_lens_text(p, "]: each row's length must be >= 0 and <= the sequence length");
      *p = '\0';
      TVMAPISetLastError(message);
      return -1;
    }
    out[b] = lens[b];
  }
  return 0;
}
#endif
"""


def check_sequence_lens(lens: te.Tensor, steps: Any, layer: str) -> te.Tensor:
    """``lens`` (int32 ``[B]`` or ``[1]``), checked at run time to lie in ``[0, steps]``
    (``steps``: the sequence length, an int or a shape expression): a value outside fails the
    kernel with a message naming ``layer`` (``"lstm"``, ``"gru"`` or ``"rnn"``), the row and
    the value, as onnxruntime refuses it."""
    if str(lens.dtype) != "int32" or len(lens.shape) != 1:
        raise TVMError(f"{layer} sequence_lens: expected an int32 vector, got {lens.dtype} "
                       f"{[get_const_int(d) for d in lens.shape]}")

    def fcompute(ins, outs):
        call = tir.call_extern("int32", LENS_CHECK_NAME, _KINDS[layer][0],
                               tir.Cast("int64", steps), tir.Cast("int64", lens.shape[0]),
                               ins[0].access_ptr("r"), outs[0].access_ptr("w"))
        return tir.AttrStmt(tir.StringImm(LENS_CHECK_NAME), "pragma_import_c",
                            tir.StringImm(LENS_CHECK_SOURCE), _returning_errors(call))

    return te.extern(tuple(lens.shape), [lens], fcompute, name="sequence_lens",
                     dtype="int32", tag="check_sequence_lens")


def _sequence(kind: str, xproj: te.Tensor, state: te.Tensor, weight: te.Tensor,
              hbias: te.Tensor | None, lens: te.Tensor, *, activation: str = "tanh",
              linear_before_reset: bool = False, clip: float | None = None,
              reverse: bool = False, parallel_min_macs: int = 0) -> list[te.Tensor]:
    """``[Y [T, B, H], final state]``: one ``kiln_rnn_sequence`` call over every step."""
    code, gates = _KINDS[kind]
    batch, hidden, lanes = _check(f"{kind}_sequence", xproj, state, weight, gates)
    steps = xproj.shape[0]
    # the per-step product decides whether waking the pool (once per sequence) pays
    parallel = int(batch * gates * hidden * hidden >= parallel_min_macs)
    count = [get_const_int(d) for d in lens.shape]
    if str(lens.dtype) != "int32" or count not in ([batch], [1]):
        raise TVMError(f"{kind}_sequence: sequence lengths must be int32 [{batch}] or [1], got "
                       f"{lens.dtype} {count}")
    inputs = [xproj, state, weight, lens] + ([hbias] if hbias is not None else [])

    def fcompute(ins, outs):
        call = tir.call_extern(
            "int32", KERNEL_NAME, code, RNN_ACTIVATIONS[activation], int(bool(reverse)),
            int(bool(linear_before_reset)), int(clip is not None),
            tir.FloatImm("float32", 0.0 if clip is None else float(clip)),
            tir.Cast("int64", steps), batch, hidden, lanes, parallel,
            ins[0].access_ptr("r"), ins[1].access_ptr("r"), ins[2].access_ptr("r"),
            # only a GRU reads hbias; the others pass a pointer it never dereferences
            ins[4 if hbias is not None else 2].access_ptr("r"), ins[3].access_ptr("r"),
            int(count == [batch] and batch > 1), outs[0].access_ptr("w"),
            outs[1].access_ptr("w"))
        return tir.AttrStmt(tir.StringImm(KERNEL_NAME), "pragma_import_c",
                            tir.StringImm(KERNEL_SOURCE), _returning_errors(call))

    outs = te.extern([(steps, batch, hidden), tuple(state.shape)], inputs, fcompute,
                     name=f"{kind}_sequence", dtype=["float32", "float32"],
                     tag=f"{kind}_sequence")
    return list(outs)


def lstm_sequence(xproj: te.Tensor, state: te.Tensor, weight: te.Tensor, lens: te.Tensor,
                  clip: float | None = None, reverse: bool = False,
                  parallel_min_macs: int = 0) -> list[te.Tensor]:
    """An LSTM direction with ONNX's default activations (sigmoid, tanh, tanh), gates i, o, f,
    c: ``[Y [T, B, H], final state [2, B, H]]``; ``state`` is ``[2, B, H]`` (hidden, cell)::

        pre_q = xproj[t, b, q*H + j] + h @ R_q.T      (clipped to ±clip when given)
        c' = sigmoid(pre_f) * c + sigmoid(pre_i) * tanh(pre_c)
        h' = sigmoid(pre_o) * tanh(c')

    ``reverse`` runs the steps from ``T - 1`` down to 0 (``Y`` stays in time order).
    ``lens`` (int32 ``[B]``, or ``[1]`` for every row) is each batch row's sequence length,
    clamped into ``[0, T]`` (ONNX's ``sequence_lens``): the steps at and past it output zeros
    and leave the state as it is; a reverse row starts at its own last step; a row of length
    0 ends with a zero state (onnxruntime's result).
    """
    return _sequence("lstm", xproj, state, weight, None, lens, clip=clip, reverse=reverse,
                     parallel_min_macs=parallel_min_macs)


def gru_sequence(xproj: te.Tensor, hidden_state: te.Tensor, weight: te.Tensor,
                 hbias: te.Tensor, lens: te.Tensor, linear_before_reset: bool,
                 clip: float | None = None,
                 reverse: bool = False, parallel_min_macs: int = 0) -> list[te.Tensor]:
    """A GRU direction with ONNX's default activations (sigmoid, tanh), gates z, r, h:
    ``[Y [T, B, H], final hidden state [B, H]]``. ``hbias`` (``[H]``) is the candidate gate's
    recurrent bias ``Rbh`` (``xproj`` holds every other bias)::

        z = sigmoid(xz + h @ Rz.T), r = sigmoid(xr + h @ Rr.T)
        n = tanh(xh + r * (h @ Rh.T + Rbh))        linear_before_reset
        n = tanh(xh + (r * h) @ Rh.T + Rbh)        otherwise
        h' = (1 - z) * n + z * h

    ``lens`` as in :func:`lstm_sequence`.
    """
    return _sequence("gru", xproj, hidden_state, weight, hbias, lens,
                     linear_before_reset=linear_before_reset, clip=clip, reverse=reverse,
                     parallel_min_macs=parallel_min_macs)


def rnn_sequence(xproj: te.Tensor, hidden_state: te.Tensor, weight: te.Tensor,
                 lens: te.Tensor, activation: str = "tanh", clip: float | None = None,
                 reverse: bool = False, parallel_min_macs: int = 0) -> list[te.Tensor]:
    """A simple-RNN direction, ``h' = f(xproj[t] + h @ R.T)`` (clipped before ``f``, one of
    :data:`RNN_ACTIVATIONS`): ``[Y [T, B, H], final hidden state [B, H]]``; ``lens`` as in
    :func:`lstm_sequence`."""
    if activation not in RNN_ACTIVATIONS:
        raise TVMError(f"rnn_sequence: activation {activation!r} is not one of "
                       f"{sorted(RNN_ACTIVATIONS)}")
    return _sequence("rnn", xproj, hidden_state, weight, None, lens, activation=activation,
                     clip=clip, reverse=reverse, parallel_min_macs=parallel_min_macs)
