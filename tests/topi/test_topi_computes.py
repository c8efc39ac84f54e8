"""TOPI computes at the edges: zero-size and size-1 dims, negative axes, scalars, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from topi_testlib import run_many

from kiln import te, topi
from kiln.runtime.error import TVMError

RNG = np.random.default_rng(3)


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def test_edge_shapes_and_scalar_operands():
    x = f32(2, 1, 3)
    empty = f32(2, 0, 3)
    cases = [
        (lambda a: topi.add(2.0, topi.multiply(a, 3)), [x]),
        (lambda a: topi.subtract(a, te.const(1.5, "float32")), [x]),
        (lambda a: topi.sum(a, axis=-2), [empty]),
        (lambda a: topi.max(a, axis=(-1,), keepdims=True), [x]),
        (lambda a: topi.transpose(a, (-1, 0, 1)), [empty]),
        (lambda a: topi.squeeze(a, axis=-2), [x]),
        (lambda a: topi.expand_dims(a, -4), [x]),
        (lambda a: topi.concatenate([a, topi.negative(a)], axis=-1), [empty]),
        (lambda a: topi.reverse(a, axis=(-1, 0)), [x]),
        (lambda a: topi.reshape(a, (3, 2)), [x]),
        (lambda a: topi.mean(a, axis=1, exclude=True), [x]),
        (lambda a: topi.prod(a, axis=None), [x]),
        (lambda a: topi.arange(1, 4, 0.5), [x]),
        (lambda a: topi.full((2, 2), "int32", 7), [x]),
        (lambda a: topi.layout_transform(topi.layout_transform(a, "NCHW", "NCHW4c"),
                                         "NCHW4c", "NCHW"), [f32(1, 8, 2, 3)]),
        (lambda a: topi.layout_transform(a, "OIHW", "OIHW2i4o"), [f32(8, 4, 1, 2)]),
        (lambda a: topi.reinterpret(a, "int32"), [x]),
        (lambda a: topi.cast(a, "bool"), [x]),
        (lambda a: topi.clip(a, -0.1, 0.1), [x]),
        (lambda a: topi.tile(a, (2,)), [x]),
        (lambda a: topi.collapse_sum(a, (1, 3)), [x]),
        (lambda a: topi.take(a, np.array([[-4, 7]]), axis=None, mode="wrap"), [x]),
    ]
    r = [out[0] for out in run_many(cases)]
    np.testing.assert_allclose(r[0], 2 + 3 * x, rtol=1e-6)
    np.testing.assert_allclose(r[1], x - 1.5, rtol=1e-6)
    np.testing.assert_array_equal(r[2], empty.sum(-2))
    np.testing.assert_array_equal(r[3], x.max(-1, keepdims=True))
    assert r[4].shape == (3, 2, 0)
    np.testing.assert_array_equal(r[5], x[:, 0])
    np.testing.assert_array_equal(r[6], x[None])
    assert r[7].shape == (2, 0, 6)
    np.testing.assert_array_equal(r[8], x[::-1, :, ::-1])
    np.testing.assert_array_equal(r[9], x.reshape(3, 2))
    np.testing.assert_allclose(r[10], x.mean((0, 2)), rtol=1e-6)
    np.testing.assert_allclose(r[11], x.prod(), rtol=1e-5)
    np.testing.assert_allclose(r[12], np.arange(1, 4, 0.5))
    np.testing.assert_array_equal(r[13], np.full((2, 2), 7, "int32"))
    np.testing.assert_array_equal(r[14], cases[14][1][0])
    w = cases[15][1][0]
    np.testing.assert_array_equal(
        r[15], w.reshape(2, 4, 2, 2, 1, 2).transpose(0, 2, 4, 5, 3, 1))
    np.testing.assert_array_equal(r[16], x.view("int32"))
    np.testing.assert_array_equal(r[17], x != 0)
    np.testing.assert_array_equal(r[18], np.clip(x, -0.1, 0.1))
    np.testing.assert_array_equal(r[19], np.tile(x, (2,)))
    np.testing.assert_allclose(r[20], x.sum(0), rtol=1e-6)
    np.testing.assert_array_equal(r[21], np.take(x, [[-4, 7]], mode="wrap"))


@pytest.mark.parametrize("make, message", [
    (lambda: topi.add(te.placeholder((2, 3)), te.placeholder((4,))), "do not broadcast"),
    (lambda: topi.sum(te.placeholder((2, 3)), axis=2), "out of range"),
    (lambda: topi.sum(te.placeholder((2, 3)), axis=(0, -2)), "repeats"),
    (lambda: topi.reshape(te.placeholder((2, 3)), (4, 2)), "cannot reshape"),
    (lambda: topi.split(te.placeholder((5,)), 2), "equal sections"),
    (lambda: topi.squeeze(te.placeholder((2, 3)), axis=0), "not 1"),
    (lambda: topi.transpose(te.placeholder((2, 3)), (0, 0)), "permutation"),
    (lambda: topi.layout_transform(te.placeholder((1, 4)), "NC", "NC4"), "invalid layout"),
    (lambda: topi.take(te.placeholder((4,)), te.placeholder((2,), "int32"), 0, 0, "bad"),
     "mode"),
    (lambda: topi.nn.conv2d(te.placeholder((1, 3, 8, 8)), te.placeholder((4, 2, 3, 3))),
     "channels"),
    (lambda: topi.nn.conv2d(te.placeholder((1, 3, 2, 2)), te.placeholder((4, 3, 5, 5))),
     "larger"),
    (lambda: topi.nn.pool2d(te.placeholder((1, 1, 4, 4)), (2, 2), 1, 1, 0, "sum"),
     "pool_type"),
    (lambda: topi.nn.dense(te.placeholder((2, 3)), te.placeholder((4, 5))), "reduction"),
    (lambda: topi.nn.pad(te.placeholder((2, 3)), (1, 1), pad_mode="wrap"), "pad_mode"),
    (lambda: topi.image.resize2d(te.placeholder((1, 1, 4, 4)), None, (2, 2),
                                 method="area"), "method"),
])
def test_bad_input_raises_a_clear_error(make, message):
    with pytest.raises(TVMError, match=message):
        make()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), max_size=4), st.lists(st.integers(1, 4), max_size=4),
       st.data())
def test_broadcast_shape_agrees_with_numpy(a, b, data):
    # Make some dims 1 so that broadcasting happens often.
    a = [1 if data.draw(st.booleans()) else d for d in a]
    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        with pytest.raises(TVMError):
            topi.broadcast_shape(a, b)
        return
    assert tuple(int(d) for d in topi.broadcast_shape(a, b)) == want
