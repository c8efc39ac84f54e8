"""topi.dynamic, topi.newshape and the symbolic-extent paths of resize/layout_transform:
shape arithmetic against NumPy (ints and TIR constants must agree), and kernels compiled once
with symbolic extents, run at several sizes (oracle: NumPy)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te, tir, topi
from kiln.runtime.error import TVMError
from kiln.topi import dynamic
from kiln.topi.newshape import infer_newshape


def _c(value):
    return tir.const(value, "int64")


def _ints(dims):
    return [int(d) for d in dims]


# -- reshape codes: one resolver for ints and for TIR expressions ------------------------------

# (input shape, newshape, expected): TVM's documented examples of each special value
RESHAPE_CASES = [
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((2, 3, 4), (2, 0, 0), (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), (6, 1, 4)),
    ((2, 3, 4), (0, -1), (2, 12)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 3, 4), (2, -2), (2, 3, 4)),
    ((2, 3, 4, 5), (-2, 1, 1), (2, 3, 4, 5, 1, 1)),
    ((2, 3, 4), (-3, 4), (6, 4)),
    ((2, 3, 4, 5), (-3, -3), (6, 20)),
    ((2, 3, 4), (0, -3), (2, 12)),
    ((2, 3, 4), (-3, -2), (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), (1, 2, 3, 4)),
    ((2, 3, 4), (2, -4, -1, 3, -2), (2, 1, 3, 4)),
    ((0, 3), (-1, 3), (0, 3)),
]


@pytest.mark.parametrize("shape, newshape, expected", RESHAPE_CASES)
def test_reshape_codes_resolve_the_same_for_ints_and_tir(shape, newshape, expected):
    assert infer_newshape(shape, newshape) == list(expected)
    assert _ints(infer_newshape([_c(d) for d in shape], newshape)) == list(expected)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
@settings(max_examples=60, deadline=None)
def test_zero_and_minus_one_agree_with_numpy(shape, data):
    rank = data.draw(st.integers(1, len(shape)))
    newshape = [data.draw(st.sampled_from([0, shape[k]])) for k in range(rank)]
    newshape[data.draw(st.integers(0, rank - 1))] = -1
    copied = [shape[k] if v == 0 else v for k, v in enumerate(newshape)]
    try:
        expected = np.empty(shape).reshape(copied).shape
    except ValueError:
        return  # NumPy cannot infer this one either
    assert infer_newshape(shape, newshape) == list(expected)


def test_allowzero_keeps_a_literal_zero():
    assert infer_newshape((0, 6), (3, 0), allowzero=True) == [3, 0]
    # without allowzero the 0 copies the input's 6: 18 elements cannot come from 0
    with pytest.raises(TVMError, match="cannot reshape"):
        infer_newshape((0, 6), (3, 0))


@pytest.mark.parametrize("newshape, message", [((-1, -1), "more than one -1"), ((-5,), "invalid"),
                                               ((0, 0, 0), "reads past"), ((-4, 2), "two values")])
def test_bad_reshape_codes_raise(newshape, message):
    with pytest.raises(TVMError, match=message):
        infer_newshape((2, 3), newshape)


# -- slice bounds over run-time values -----------------------------------------------------------


@given(st.integers(0, 7), st.integers(-10, 10), st.integers(-10, 10),
       st.integers(-4, 4).filter(bool))
@settings(max_examples=200, deadline=None)
def test_slice_bounds_match_numpy_slicing(dim, begin, end, stride):
    (start, step, length), = slice_bounds_ints(dim, begin, end, stride)
    expected = np.arange(dim)[begin:end:stride]
    assert [start + step * k for k in range(length)] == expected.tolist()


def slice_bounds_ints(dim, begin, end, stride):
    bounds = dynamic.slice_bounds([_c(dim)], [_c(begin)], [_c(end)], [_c(stride)])
    return [tuple(_ints(b)) for b in bounds]


def test_a_zero_stride_gives_a_negative_length():
    assert slice_bounds_ints(5, 0, 5, 0)[0][2] == -1


@pytest.mark.parametrize("begin, end, strides, axes, mode, expected", [
    ([1], [-1], None, [1], "end", np.s_[:, 1:-1]),
    ([4, 0], [0, -1], [-2, 1], None, "end", np.s_[4:0:-2, 0:-1]),
    ([-1], [None], [-1], [0], "end", np.s_[::-1]),
    ([1, 2], [2, -1], None, None, "size", np.s_[1:3, 2:]),
])
def test_slice_attributes_become_per_axis_bounds(begin, end, strides, axes, mode, expected):
    x = np.arange(30).reshape(5, 6)
    spec = dynamic.attr_slice_spec([5, 6], begin, end, strides, axes, mode)
    bounds = [_ints(b) for b in dynamic.slice_bounds([_c(5), _c(6)], *spec)]
    rows, cols = ([start + step * k for k in range(length)] for start, step, length in bounds)
    np.testing.assert_array_equal(x[np.ix_(rows, cols)], x[expected])


def test_tensor_values_check_the_length():
    s = te.placeholder((3,), "int64", name="s")
    assert len(dynamic.tensor_values(s, 3)) == 3
    with pytest.raises(TVMError, match="expected 2 values"):
        dynamic.tensor_values(s, 2)
    with pytest.raises(TVMError, match="1-D"):
        dynamic.tensor_values(te.placeholder((2, 2), "int64"), 2)


def test_layout_transform_shape_for_ints_and_expressions():
    assert topi.layout_transform_shape((1, 20, 5, 5), "NCHW", "NCHW8c") == [1, 3, 5, 5, 8]
    assert topi.layout_transform_shape((1, 3, 5, 5, 8), "NCHW8c", "NCHW") == [1, 24, 5, 5]
    dims = topi.layout_transform_shape([_c(2), _c(12), _c(3), _c(3)], "NCHW", "NHWC4c")
    assert _ints(dims) == [2, 3, 3, 3, 4]


# -- kernels with symbolic extents: compiled once, run at several sizes ---------------------------


def _symbolic_kernels():
    """(name, args, make_inputs(size), oracle) for one library of symbolic-extent kernels."""
    n, m = te.var("n", "int64"), te.var("m", "int64")
    x = te.placeholder((n, 6), name="x")
    reshaped = dynamic.reshape(x, [m, 3])
    grid = te.placeholder((n, 8, m, 2), name="grid")
    blocked = topi.layout_transform(grid, "NCHW", "NCHW4c")
    image = te.placeholder((1, 1, n, m), name="image")
    rows, cols = te.var("rows", "int64"), te.var("cols", "int64")
    resized = topi.image.resize2d(image, [0.0] * 4, [rows, cols], "NCHW", "nearest_neighbor",
                                  "asymmetric", "floor")
    mask = te.placeholder((n, 3), name="mask")
    count = te.var("count", "int64")
    found = dynamic.argwhere(mask, [count, 2], "int32")
    return {
        "reshape": ([x, reshaped], lambda a: a.reshape(-1, 3)),
        "layout": ([grid, blocked],
                   lambda a: a.reshape(a.shape[0], 2, 4, *a.shape[2:]).transpose(0, 1, 3, 4, 2)),
        "resize": ([image, resized], None),
        "argwhere": ([mask, found], lambda a: np.argwhere(a).astype("int32")),
    }


@pytest.fixture(scope="module")
def library():
    kernels = _symbolic_kernels()
    funcs = {}
    for name, (args, _) in kernels.items():
        sch = te.create_schedule([args[-1].op])
        funcs[name] = kiln.lower(sch, args, name=name)[name]
    return kiln.build(kiln.IRModule(funcs), target="c"), kernels


@pytest.mark.parametrize("rows", [1, 4, 0])
def test_symbolic_reshape_runs_at_several_sizes(library, rows):
    lib, kernels = library
    a = np.arange(rows * 6, dtype="float32").reshape(rows, 6)
    out = kiln.nd.empty((rows * 2, 3), "float32")
    lib["reshape"](kiln.nd.array(a), out)
    np.testing.assert_array_equal(out.numpy(), kernels["reshape"][1](a))


@pytest.mark.parametrize("batch, height", [(1, 3), (2, 1)])
def test_symbolic_layout_transform(library, batch, height):
    lib, kernels = library
    a = np.random.default_rng(0).standard_normal((batch, 8, height, 2)).astype("float32")
    out = kiln.nd.empty((batch, 2, height, 2, 4), "float32")
    lib["layout"](kiln.nd.array(a), out)
    np.testing.assert_array_equal(out.numpy(), kernels["layout"][1](a))


@pytest.mark.parametrize("shape, size", [((2, 3), (4, 6)), ((4, 4), (2, 1)), ((1, 1), (3, 2))])
def test_symbolic_nearest_resize(library, shape, size):
    lib, _ = library
    a = np.arange(np.prod(shape), dtype="float32").reshape(1, 1, *shape)
    out = kiln.nd.empty((1, 1, *size), "float32")
    lib["resize"](kiln.nd.array(a), out)
    rows = (np.arange(size[0]) * shape[0]) // size[0]
    cols = (np.arange(size[1]) * shape[1]) // size[1]
    np.testing.assert_array_equal(out.numpy(), a[:, :, rows][:, :, :, cols])


@pytest.mark.parametrize("rows", [3, 1, 0])
def test_symbolic_argwhere(library, rows):
    lib, kernels = library
    a = (np.random.default_rng(rows).standard_normal((rows, 3)) > 0).astype("float32")
    expected = kernels["argwhere"][1](a)
    out = kiln.nd.empty(expected.shape, "int32")
    lib["argwhere"](kiln.nd.array(a), out)
    np.testing.assert_array_equal(out.numpy(), expected)
