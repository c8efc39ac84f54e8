"""The whole-sequence recurrent kernel (kiln.topi.nn.rnn) against a NumPy LSTM/GRU/RNN, alone
and split over a team of threads (more threads than hidden blocks included), for a sequence
length fixed at compile time and one given at run time."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.runtime import config
from kiln.runtime.native import load_runtime_lib
from kiln.topi.nn.rnn import gru_sequence, lstm_sequence, rnn_sequence

RNG = np.random.default_rng(3)
STEPS, BATCH, HIDDEN, LANES = 5, 2, 24, 8  # three hidden blocks of 8 per batch row


def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


def _pack(r, gates):
    """``R [G*H, H]`` as ``[H/n, H, G, n]``: ``packed[jb, k, q, ji] = R[q*H + jb*n + ji, k]``."""
    return r.reshape(gates, HIDDEN // LANES, LANES, HIDDEN).transpose(1, 3, 0, 2).copy()


def _layer(x, state, lens, reverse, step):
    """ONNX's masked recurrence: rows at or past their length keep the state and output 0;
    a row that runs no step ends with a zero state (onnxruntime)."""
    ys = np.zeros((len(x), *state.shape[-2:]))
    for t in (reversed(range(len(x))) if reverse else range(len(x))):
        active = (t < lens)[:, None]
        row, new = step(x[t], state)
        ys[t] = np.where(active, row, 0)
        state = np.where(active, new, state)
    return ys, np.where((lens > 0)[:, None], state, 0)


def _lstm(x, state, r, clip, lens, reverse=False):
    def step(x_t, st):
        i, o, f, g = np.split(np.clip(x_t + st[0] @ r.T, -clip, clip), 4, axis=-1)
        c = _sigmoid(f) * st[1] + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        return h, np.stack([h, c])

    return _layer(x, state, lens, reverse, step)


def _gru(x, h, r, hbias, linear_before_reset, lens):
    rz, rr, rh = np.split(r, 3)

    def step(x_t, h):
        xz, xr, xh = np.split(x_t, 3, axis=-1)
        z, reset = _sigmoid(xz + h @ rz.T), _sigmoid(xr + h @ rr.T)
        if linear_before_reset:
            n = np.tanh(xh + reset * (h @ rh.T + hbias))
        else:
            n = np.tanh(xh + (reset * h) @ rh.T + hbias)
        h = (1 - z) * n + z * h
        return h, h

    return _layer(x, h, lens, False, step)


# thread counts each build runs at (7: more tasks than the 6 hidden blocks of a step)
THREADS = (1, 2, 7)


def _run(make, shapes, arrays, symbolic, target="llvm"):
    """Build ``make(*placeholders)`` (the step count a variable when ``symbolic``) for
    ``target``, run it on ``arrays`` with each of :data:`THREADS`; yield (Y, final state)."""
    steps = te.var("steps") if symbolic else STEPS
    holders = [te.placeholder((steps, *shape[1:]) if k == 0 else shape, str(a.dtype),
                              name=f"in{k}") for k, (shape, a) in enumerate(zip(shapes, arrays))]
    y, final = make(*holders)
    func = kiln.build(te.create_schedule([y.op]), [*holders, y, final], target)
    lib = load_runtime_lib()
    try:
        for threads in THREADS:
            lib.KilnRuntimeSetNumThreads(ctypes.c_int(threads))
            # Y has the run-time step count of the projection; the final state is static
            outs = [kiln.nd.array(np.zeros(shape, "float32"))
                    for shape in ((len(arrays[0]), *shapes[1][-2:]), shapes[1])]
            func(*[kiln.nd.array(a) for a in arrays], *outs)
            yield [o.numpy() for o in outs]
    finally:
        lib.KilnRuntimeSetNumThreads(ctypes.c_int(config.num_threads()))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("symbolic", [False, True])
def test_lstm_sequence_matches_numpy(reverse, symbolic):
    x = RNG.standard_normal((STEPS, BATCH, 4 * HIDDEN)).astype("float32")
    state = RNG.standard_normal((2, BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((4 * HIDDEN, HIDDEN)) * 0.4).astype("float32")
    lens = np.array([STEPS, 3], "int32")  # the second row stops early
    want = _lstm(x, state, r, 2.5, lens, reverse)
    for got in _run(lambda a, b, c, d: lstm_sequence(a, b, c, d, clip=2.5, reverse=reverse,
                                                     parallel_min_macs=0),
                    [x.shape, state.shape, (HIDDEN // LANES, HIDDEN, 4, LANES), lens.shape],
                    [x, state, _pack(r, 4), lens], symbolic):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("linear_before_reset", [False, True])
def test_gru_sequence_matches_numpy(linear_before_reset):
    x = RNG.standard_normal((STEPS, BATCH, 3 * HIDDEN)).astype("float32")
    h = RNG.standard_normal((BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((3 * HIDDEN, HIDDEN)) * 0.4).astype("float32")
    hbias = RNG.standard_normal(HIDDEN).astype("float32")
    lens = np.array([0, 4], "int32")  # a row of length 0
    want = _gru(x, h, r, hbias, linear_before_reset, lens)
    for got in _run(lambda a, b, c, d, e: gru_sequence(a, b, c, d, e, linear_before_reset,
                                                       parallel_min_macs=0),
                    [x.shape, h.shape, (HIDDEN // LANES, HIDDEN, 3, LANES), hbias.shape,
                     lens.shape], [x, h, _pack(r, 3), hbias, lens], symbolic=True):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("target", ["llvm -mcpu=core-avx2", "c"])
def test_lstm_sequence_matches_numpy_on_avx2_and_c(target):
    """The 16-lane products as two 8-lane vectors (AVX2), and the C target's build."""
    x = RNG.standard_normal((STEPS, BATCH, 4 * HIDDEN)).astype("float32")
    state = RNG.standard_normal((2, BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((4 * 16, 16)) * 0.4).astype("float32")
    x16 = x[..., :4 * 16].copy()
    packed = r.reshape(4, 1, 16, 16).transpose(1, 3, 0, 2).copy()
    lens = np.array([STEPS], "int32")  # one length for every row
    want = _lstm(x16, state[..., :16], r, 2.5, np.full(BATCH, STEPS))
    for got in _run(lambda a, b, c, d: lstm_sequence(a, b, c, d, clip=2.5,
                                                     parallel_min_macs=0),
                    [x16.shape, (2, BATCH, 16), packed.shape, lens.shape],
                    [x16, state[..., :16].copy(), packed, lens], symbolic=False, target=target):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_rnn_sequence_runs_no_step_for_an_empty_sequence():
    """A run-time length of 0: no output rows, a zero final state (onnxruntime's result for
    a row of length 0)."""
    h = RNG.standard_normal((BATCH, HIDDEN)).astype("float32")
    r = RNG.standard_normal((HIDDEN, HIDDEN)).astype("float32")
    lens = np.array([STEPS], "int32")
    for y, final in _run(lambda a, b, c, d: rnn_sequence(a, b, c, d, "relu",
                                                         parallel_min_macs=0),
                         [(STEPS, BATCH, HIDDEN), h.shape, (HIDDEN // LANES, HIDDEN, 1, LANES),
                          lens.shape],
                         [np.zeros((0, BATCH, HIDDEN), "float32"), h, _pack(r, 1), lens],
                         symbolic=True):
        assert y.shape == (0, BATCH, HIDDEN)
        np.testing.assert_array_equal(final, np.zeros_like(h))


def test_the_kernel_refuses_what_it_does_not_compute():
    x, h = te.placeholder((3, 1, 24)), te.placeholder((1, 8))
    lens = te.placeholder((1,), "int32")
    with pytest.raises(kiln.TVMError, match="float32 only"):
        gru_sequence(x, h, te.placeholder((1, 8, 3, 8), "float64"), te.placeholder((8,)), lens,
                     False)
    with pytest.raises(kiln.TVMError, match=r"does not pack 1 gates of .* width 24"):
        rnn_sequence(x, h, te.placeholder((1, 8, 3, 8)), lens)
    with pytest.raises(kiln.TVMError, match="activation 'gelu' is not one of"):
        rnn_sequence(te.placeholder((3, 1, 8)), h, te.placeholder((1, 8, 1, 8)), lens, "gelu")
    with pytest.raises(kiln.TVMError, match="has 3 lanes"):
        lstm_sequence(te.placeholder((3, 1, 48)), te.placeholder((2, 1, 12)),
                      te.placeholder((4, 12, 4, 3)), lens)
    with pytest.raises(kiln.TVMError, match=r"lengths must be int32 \[1\] or \[1\], got int64"):
        rnn_sequence(te.placeholder((3, 1, 8)), h, te.placeholder((1, 8, 1, 8)),
                     te.placeholder((1,), "int64"))


def test_every_team_size_gives_the_one_thread_bits():
    """Work claiming hands units to whichever task is free; a unit's result does not depend
    on the task that ran it, so 2 and 7 threads (kiln's real pool) give 1 thread's bits."""
    x = RNG.standard_normal((STEPS, BATCH, 4 * HIDDEN)).astype("float32")
    state = RNG.standard_normal((2, BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((4 * HIDDEN, HIDDEN)) * 0.4).astype("float32")
    lens = np.array([STEPS, 2], "int32")
    runs = list(_run(lambda a, b, c, d: lstm_sequence(a, b, c, d, parallel_min_macs=0),
                     [x.shape, state.shape, (HIDDEN // LANES, HIDDEN, 4, LANES), lens.shape],
                     [x, state, _pack(r, 4), lens], symbolic=False))
    for other in runs[1:]:
        for got, alone in zip(other, runs[0]):
            np.testing.assert_array_equal(got.view("uint32"), alone.view("uint32"))
