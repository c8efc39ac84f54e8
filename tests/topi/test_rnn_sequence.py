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


def _lstm(x, state, r, clip):
    h, c = state
    ys = []
    for t in range(len(x)):
        pre = np.clip(x[t] + h @ r.T, -clip, clip)
        i, o, f, g = np.split(pre, 4, axis=-1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), np.stack([h, c])


def _gru(x, h, r, hbias, linear_before_reset):
    rz, rr, rh = np.split(r, 3)
    ys = []
    for t in range(len(x)):
        xz, xr, xh = np.split(x[t], 3, axis=-1)
        z, reset = _sigmoid(xz + h @ rz.T), _sigmoid(xr + h @ rr.T)
        if linear_before_reset:
            n = np.tanh(xh + reset * (h @ rh.T + hbias))
        else:
            n = np.tanh(xh + (reset * h) @ rh.T + hbias)
        h = (1 - z) * n + z * h
        ys.append(h)
    return np.stack(ys), h


def _reversed(y, final):
    return y[::-1], final


@pytest.fixture(params=[1, 2, 7])
def threads(request):
    """The runtime's thread count for one test (7: more tasks than the 6 hidden blocks)."""
    lib = load_runtime_lib()
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(request.param))
    yield request.param
    lib.KilnRuntimeSetNumThreads(ctypes.c_int(config.num_threads()))


def _run(make, shapes, arrays, symbolic):
    """Build ``make(*placeholders)`` (the step count a variable when ``symbolic``) for llvm
    with the team path forced on, run it on ``arrays``; return (Y, final state)."""
    steps = te.var("steps") if symbolic else STEPS
    holders = [te.placeholder((steps, *shape[1:]) if k == 0 else shape, name=f"in{k}")
               for k, shape in enumerate(shapes)]
    y, final = make(*holders)
    func = kiln.build(te.create_schedule([y.op]), [*holders, y, final], "llvm")
    # Y has the run-time step count of the projection; the final state is static
    outs = [kiln.nd.array(np.zeros(shape, "float32"))
            for shape in ((len(arrays[0]), *shapes[1][-2:]), shapes[1])]
    func(*[kiln.nd.array(a) for a in arrays], *outs)
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("symbolic", [False, True])
def test_lstm_sequence_matches_numpy(threads, reverse, symbolic):
    x = RNG.standard_normal((STEPS, BATCH, 4 * HIDDEN)).astype("float32")
    state = RNG.standard_normal((2, BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((4 * HIDDEN, HIDDEN)) * 0.4).astype("float32")
    got = _run(lambda a, b, c: lstm_sequence(a, b, c, clip=2.5, reverse=reverse,
                                             parallel_min_macs=0),
               [x.shape, state.shape, (HIDDEN // LANES, HIDDEN, 4, LANES)],
               [x, state, _pack(r, 4)], symbolic)
    want = _lstm(x[::-1] if reverse else x, state, r, 2.5)
    want = _reversed(*want) if reverse else want
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("linear_before_reset", [False, True])
def test_gru_sequence_matches_numpy(threads, linear_before_reset):
    x = RNG.standard_normal((STEPS, BATCH, 3 * HIDDEN)).astype("float32")
    h = RNG.standard_normal((BATCH, HIDDEN)).astype("float32")
    r = (RNG.standard_normal((3 * HIDDEN, HIDDEN)) * 0.4).astype("float32")
    hbias = RNG.standard_normal(HIDDEN).astype("float32")
    got = _run(lambda a, b, c, d: gru_sequence(a, b, c, d, linear_before_reset,
                                               parallel_min_macs=0),
               [x.shape, h.shape, (HIDDEN // LANES, HIDDEN, 3, LANES), hbias.shape],
               [x, h, _pack(r, 3), hbias], symbolic=True)
    for g, w in zip(got, _gru(x, h, r, hbias, linear_before_reset)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_rnn_sequence_runs_no_step_for_an_empty_sequence(threads):
    """A run-time length of 0: no output rows, the final state is the initial one."""
    h = RNG.standard_normal((BATCH, HIDDEN)).astype("float32")
    r = RNG.standard_normal((HIDDEN, HIDDEN)).astype("float32")
    y, final = _run(lambda a, b, c: rnn_sequence(a, b, c, "relu", parallel_min_macs=0),
                    [(STEPS, BATCH, HIDDEN), h.shape, (HIDDEN // LANES, HIDDEN, 1, LANES)],
                    [np.zeros((0, BATCH, HIDDEN), "float32"), h, _pack(r, 1)], symbolic=True)
    assert y.shape == (0, BATCH, HIDDEN)
    np.testing.assert_array_equal(final, h)


def test_the_kernel_refuses_what_it_does_not_compute():
    x, h = te.placeholder((3, 1, 24)), te.placeholder((1, 8))
    with pytest.raises(kiln.TVMError, match="float32 only"):
        gru_sequence(x, h, te.placeholder((1, 8, 3, 8), "float64"), te.placeholder((8,)),
                     False)
    with pytest.raises(kiln.TVMError, match=r"does not pack 1 gates of .* width 24"):
        rnn_sequence(x, h, te.placeholder((1, 8, 3, 8)))
    with pytest.raises(kiln.TVMError, match="activation 'gelu' is not one of"):
        rnn_sequence(te.placeholder((3, 1, 8)), h, te.placeholder((1, 8, 1, 8)), "gelu")
    with pytest.raises(kiln.TVMError, match="has 3 lanes"):
        lstm_sequence(te.placeholder((3, 1, 48)), te.placeholder((2, 1, 12)),
                      te.placeholder((4, 12, 4, 3)))
