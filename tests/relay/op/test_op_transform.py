"""Transform ops: attrs defaults, InferType output shapes against NumPy (or hand-derived
values for TVM-only semantics such as reshape's special values), Any dims, and errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir.op import Op
from kiln.ir.type import Any, TensorType, TupleType
from kiln.relay.type_infer import infer_expr
from kiln.runtime.error import TypeInferenceError


def shape_of(ty: TensorType) -> tuple:
    return tuple("?" if isinstance(d, Any) else int(d) for d in ty.shape)


def v(shape, dtype="float32", name="x"):
    return relay.var(name, shape=shape, dtype=dtype)


# ---- reshape ------------------------------------------------------------------------------
@pytest.mark.parametrize("data,newshape,expected", [
    ((2, 3, 4), (-1, 4), (6, 4)),
    ((2, 3, 4), (0, -1), (2, 12)),
    ((2, 3, 4), (4, 0, 2), (4, 3, 2)),
    ((2, 3, 4), (-2,), (2, 3, 4)),
    ((2, 3, 4), (2, -2), (2, 3, 4)),
    ((2, 3, 4), (-3, 4), (6, 4)),
    ((2, 3, 4, 5), (-3, -3), (6, 20)),
    ((2, 3, 4), (-4, 1, 2, -2), (1, 2, 3, 4)),
    ((6, 4), (-4, -1, 2, 4), (3, 2, 4)),
    ((Any(), 3, 4), (-1, 12), ("?", 12)),
    ((Any(), 3, 4), (0, -1), ("?", 12)),  # the copied Any dim does not enter the -1
    ((3, Any(), 4), (0, -1), (3, "?")),
    ((Any(), 6), (-4, 2, -1, 0), (2, "?", 6)),
    ((Any(), 3, 4), (-3, 0), ("?", 4)),
    ((2, 3, Any()), (6, -1), (6, "?")),
])
def test_reshape_special_values(data, newshape, expected):
    call = relay.reshape(v(data), newshape)
    assert call.op is Op.get("reshape") and call.attrs.allowzero is False
    assert shape_of(infer_expr(call)) == expected


def test_reshape_matches_numpy_when_only_minus_one():
    for shape, new in [((4, 6), (3, -1)), ((24,), (2, 3, 4)), ((2, 3, 4), (-1,))]:
        assert shape_of(infer_expr(relay.reshape(v(shape), new))) == \
            np.zeros(shape).reshape(new).shape


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_reshape_with_minus_one_matches_numpy(shape, rng):
    total = int(np.prod(shape))
    factors = [f for f in range(1, total + 1) if total % f == 0]
    first = rng.choice(factors)
    newshape = [first, -1, 1] if rng.random() < 0.5 else [-1, first]
    expected = np.zeros(shape).reshape(newshape).shape
    assert shape_of(infer_expr(relay.reshape(v(tuple(shape)), newshape))) == expected


@pytest.mark.parametrize("newshape,match", [
    ((5, -1), "cannot reshape"),
    ((-1, -1), "more than one -1"),
    ((7, 4), "cannot reshape"),
    ((-5,), "invalid value"),
])
def test_reshape_errors(newshape, match):
    with pytest.raises(TypeInferenceError, match=match):
        infer_expr(relay.reshape(v((2, 3, 4)), newshape))


def test_reshape_with_expr_shape_dispatches_to_dyn():
    call = relay.reshape(v((2, 3)), v((2,), "int64", "s"))
    assert call.op is Op.get("dyn.reshape")
    assert shape_of(infer_expr(call)) == ("?", "?")


def test_reverse_reshape_applies_specials_from_the_right():
    # TVM's example: (10, 5, 4) with (-1, 0) -> (50, 4).
    call = relay.reverse_reshape(v((10, 5, 4)), (-1, 0))
    assert call.op.name == "contrib_reverse_reshape"
    assert shape_of(infer_expr(call)) == (50, 4)


def test_reshape_like():
    assert shape_of(infer_expr(relay.reshape_like(v((2, 3, 4)), v((6, 4), name="y")))) == (6, 4)
    call = relay.reshape_like(v((2, 3, 4)), v((1, 6, 7), name="y"), lhs_begin=0, lhs_end=2,
                              rhs_begin=1, rhs_end=2)
    assert shape_of(infer_expr(call)) == (6, 4)


# ---- axes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)])
def test_transpose_matches_numpy(axes):
    expected = np.zeros((2, 3, 4)).transpose(axes).shape
    assert shape_of(infer_expr(relay.transpose(v((2, 3, 4)), axes))) == expected


def test_transpose_rejects_non_permutation():
    with pytest.raises(TypeInferenceError, match="not a permutation"):
        infer_expr(relay.transpose(v((2, 3, 4)), (0, 0, 1)))


@pytest.mark.parametrize("shape,axis,expected", [
    ((1, 3, 1, 4), None, (3, 4)),
    ((1, 3, 1, 4), (0,), (3, 1, 4)),
    ((1, 3, 1, 4), (-2, 0), (3, 4)),
    ((Any(), 1, 3), (1,), ("?", 3)),
])
def test_squeeze(shape, axis, expected):
    assert shape_of(infer_expr(relay.squeeze(v(shape), axis))) == expected


def test_squeeze_errors():
    with pytest.raises(TypeInferenceError, match="cannot squeeze axis 1"):
        infer_expr(relay.squeeze(v((1, 3)), (1,)))
    with pytest.raises(TypeInferenceError, match="axis needs to be given for a dynamic input"):
        infer_expr(relay.squeeze(v((Any(), 1))))


@pytest.mark.parametrize("axis,num,expected", [(0, 1, (1, 2, 3)), (-1, 2, (2, 3, 1, 1)),
                                               (1, 1, (2, 1, 3)), (2, 0, (2, 3))])
def test_expand_dims(axis, num, expected):
    call = relay.expand_dims(v((2, 3)), axis, num)
    assert shape_of(infer_expr(call)) == expected


# ---- joining and splitting ------------------------------------------------------------------
def test_concatenate_matches_numpy_and_any_axis():
    a, b = v((2, 3), name="a"), v((4, 3), name="b")
    assert shape_of(infer_expr(relay.concatenate([a, b], 0))) == \
        np.concatenate([np.zeros((2, 3)), np.zeros((4, 3))]).shape
    dyn = relay.concatenate([v((Any(), 3), name="c"), b], axis=0)
    assert shape_of(infer_expr(dyn)) == ("?", 3)
    # TVM's rule: [(1, 3), (1, ?)] -> (2, ?) and [(?, 3), (?, ?)] -> (?, 3)
    other = relay.concatenate([v((1, 3), name="d"), v((1, Any()), name="e")], axis=0)
    assert shape_of(infer_expr(other)) == (2, "?")
    both = relay.concatenate([v((Any(), 3), name="d"), v((Any(), Any()), name="e")], axis=0)
    assert shape_of(infer_expr(both)) == ("?", 3)


def test_concatenate_errors():
    with pytest.raises(TypeInferenceError, match="differ outside the concatenation axis"):
        infer_expr(relay.concatenate([v((2, 3), name="a"), v((2, 4), name="b")], 0))
    with pytest.raises(TypeInferenceError, match="one dtype"):
        infer_expr(relay.concatenate([v((2, 3), name="a"), v((2, 3), "int32", "b")], 0))


def test_stack_matches_numpy():
    xs = [v((2, 3), name=f"x{i}") for i in range(4)]
    for axis in (0, 1, 2, -1):
        assert shape_of(infer_expr(relay.stack(xs, axis))) == \
            np.stack([np.zeros((2, 3))] * 4, axis).shape


def test_split_by_sections_and_indices():
    out = relay.split(v((6, 4)), 3, axis=0)
    assert len(out) == 3
    ty = infer_expr(out.astuple())
    assert isinstance(ty, TupleType)
    assert [shape_of(t) for t in ty.fields] == [(2, 4)] * 3
    ty = infer_expr(relay.split(v((10, 4)), (2, 5), axis=0).astuple())
    assert [shape_of(t) for t in ty.fields] == [
        p.shape for p in np.split(np.zeros((10, 4)), [2, 5])]
    ty = infer_expr(relay.split(v((Any(), 4)), 2, axis=0).astuple())
    assert [shape_of(t) for t in ty.fields] == [("?", 4), ("?", 4)]


def test_split_errors():
    with pytest.raises(TypeInferenceError, match="not divisible into 4 sections"):
        infer_expr(relay.split(v((6, 4)), 4).astuple())
    with pytest.raises(TypeInferenceError, match="strictly ascending"):
        infer_expr(relay.split(v((6, 4)), (3, 2)).astuple())
    with pytest.raises(TypeInferenceError, match="not inside axis 0"):
        infer_expr(relay.split(v((6, 4)), (2, 6)).astuple())


# ---- indexing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_matches_numpy(axis):
    data, idx = np.zeros((3, 4, 5)), np.zeros((2, 6), dtype="int64")
    call = relay.take(v((3, 4, 5)), v((2, 6), "int32", "i"), axis=axis)
    assert call.attrs.mode == "clip" and call.attrs.batch_dims == 0
    assert shape_of(infer_expr(call)) == np.take(data, idx, axis=axis).shape


def test_take_batch_dims_and_bad_mode():
    call = relay.take(v((2, 5, 7)), v((2, 3), "int32", "i"), axis=1, batch_dims=1)
    assert shape_of(infer_expr(call)) == (2, 3, 7)
    with pytest.raises(TypeInferenceError, match="mode must be one of"):
        infer_expr(relay.take(v((3,)), v((2,), "int32", "i"), axis=0, mode="nearest"))
    with pytest.raises(TypeInferenceError, match="indices must be integers"):
        infer_expr(relay.take(v((3,)), v((2,), name="i"), axis=0))


def test_gather_and_gather_nd():
    call = relay.gather(v((3, 4)), 1, v((3, 2), "int32", "i"))
    assert shape_of(infer_expr(call)) == (3, 2)
    # indices (M=2, Y=5) on (3, 4, 6): out = (5, 6)
    nd = relay.gather_nd(v((3, 4, 6)), v((2, 5), "int32", "i"))
    assert shape_of(infer_expr(nd)) == (5, 6)
    with pytest.raises(TypeInferenceError, match="rank"):
        infer_expr(relay.gather(v((3, 4)), 0, v((3,), "int32", "i")))


def test_scatter_ops_keep_data_type():
    data, idx, upd = v((4, 5)), v((2, 5), "int64", "i"), v((2, 5), name="u")
    assert shape_of(infer_expr(relay.scatter_elements(data, idx, upd, axis=0))) == (4, 5)
    nd = relay.scatter_nd(v((4, 5)), v((1, 3), "int64", "i"), v((3, 5), name="u"))
    assert shape_of(infer_expr(nd)) == (4, 5)
    with pytest.raises(TypeInferenceError, match="updates shape"):
        infer_expr(relay.scatter_nd(v((4, 5)), v((1, 3), "int64", "i"), v((3, 4), name="u")))


# ---- slicing ----------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 8), st.integers(-10, 10), st.integers(-10, 10),
       st.sampled_from([1, 2, 3, -1, -2]))
def test_strided_slice_matches_numpy(extent, begin, end, stride):
    expected = np.zeros(extent)[begin:end:stride].shape
    call = relay.strided_slice(v((extent,)), [begin], [end], [stride])
    rel = Op.get("strided_slice").get_attr("FTVMTypeRelation")
    lo, hi = (-1, extent - 1) if stride < 0 else (0, extent)
    b = min(max(begin + extent if begin < 0 else begin, lo), hi)
    e = min(max(end + extent if end < 0 else end, lo), hi)
    if (stride > 0 and b > e) or (stride < 0 and e > b):
        with pytest.raises(TypeInferenceError, match="inverted"):  # TVM rejects these
            rel([TensorType((extent,))], call.attrs)
    else:
        assert shape_of(rel([TensorType((extent,))], call.attrs)) == expected


def test_strided_slice_axes_size_mode_and_any():
    call = relay.strided_slice(v((4, 6, 8)), [1], [3], axes=[2])
    assert call.attrs.strides == (1,) and call.attrs.slice_mode == "end"
    assert shape_of(infer_expr(call)) == (4, 6, 2)
    size = relay.strided_slice(v((4, 6)), [1, 2], [2, -1], slice_mode="size")
    assert shape_of(infer_expr(size)) == (2, 4)
    neg = relay.strided_slice(v((4, 6)), [3, 0], [0, 6], [-1, 2])
    assert shape_of(infer_expr(neg)) == np.zeros((4, 6))[3:0:-1, 0:6:2].shape
    dyn = relay.strided_slice(v((Any(), 6)), [0, 1], [2, 4])
    assert shape_of(infer_expr(dyn)) == ("?", 3)


def test_strided_slice_follows_tvm_defaults():
    # a short strides list is padded with 1 (not broadcast)
    padded = relay.strided_slice(v((4, 6)), [0, 0], [4, 6], [2])
    assert shape_of(infer_expr(padded)) == (2, 6)
    # an omitted end with a negative stride stops before index 0, as in TVM
    rev = relay.strided_slice(v((5,)), [3], [], [-1])
    assert shape_of(infer_expr(rev)) == (3,)
    # None bounds mean "from the start" / "to the end"
    assert shape_of(infer_expr(relay.strided_slice(v((5, 4)), [None, 1], [2, None]))) == (2, 3)
    # size mode: end = begin + size before clamping; -1 runs to the end
    assert shape_of(infer_expr(relay.strided_slice(v((5,)), [-2], [1], slice_mode="size"))) \
        == (1,)
    with pytest.raises(TypeInferenceError, match="inverted"):
        infer_expr(relay.strided_slice(v((5,)), [-2], [3], slice_mode="size"))
    with pytest.raises(TypeInferenceError, match="slice_mode"):
        infer_expr(relay.strided_slice(v((5,)), [0], [3], slice_mode="stop"))


def test_strided_slice_with_expr_bounds_is_dynamic():
    call = relay.strided_slice(v((4, 6)), v((2,), "int64", "b"), [3, 5])
    assert call.op is Op.get("dyn.strided_slice")
    assert shape_of(infer_expr(call)) == ("?", "?")


def test_slice_like():
    assert shape_of(infer_expr(relay.slice_like(v((5, 6, 7)), v((3, 4), name="y")))) == (3, 4, 7)
    call = relay.slice_like(v((5, 6, 7)), v((1, 2, 3), name="y"), axes=(-1,))
    assert shape_of(infer_expr(call)) == (5, 6, 3)


# ---- repetition and selection ---------------------------------------------------------------
@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 2)), ((2, 3), (3,)), ((3,), (2, 2, 2))])
def test_tile_matches_numpy(shape, reps):
    assert shape_of(infer_expr(relay.tile(v(shape), reps))) == np.tile(np.zeros(shape), reps).shape


def test_repeat_reverse_where():
    assert shape_of(infer_expr(relay.repeat(v((2, 3)), 3, 1))) == \
        np.repeat(np.zeros((2, 3)), 3, 1).shape
    assert shape_of(infer_expr(relay.reverse(v((2, 3)), 1))) == (2, 3)
    cond = v((3, 1), "bool", "c")
    ty = infer_expr(relay.where(cond, v((1, 4), name="a"), v((4,), name="b")))
    assert shape_of(ty) == np.where(np.zeros((3, 1), bool), np.zeros((1, 4)),
                                    np.zeros((4,))).shape
    with pytest.raises(TypeInferenceError, match="repeats must be >= 1"):
        infer_expr(relay.repeat(v((2,)), 0, 0))


def test_one_hot():
    call = relay.one_hot(v((2, 3), "int32", "i"), relay.const(1.0), relay.const(0.0), 5, -1,
                         "float32")
    assert call.attrs.depth == 5
    assert shape_of(infer_expr(call)) == (2, 3, 5)
    mid = relay.one_hot(v((2, 3), "int32", "i"), 1.0, 0.0, 4, 1, "float32")
    assert shape_of(infer_expr(mid)) == (2, 4, 3)
    dyn = relay.one_hot(v((2,), "int32", "i"), 1.0, 0.0, v((), "int32", "d"), -1, "float32")
    assert dyn.op is Op.get("dyn.one_hot") and shape_of(infer_expr(dyn)) == (2, "?")


# ---- creation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [(5,), (2, 9), (1, 10, 3), (10, 0, -2), (0.5, 3.0, 0.5)])
def test_arange_length_matches_numpy(args):
    ty = infer_expr(relay.arange(*[relay.const(a, "float32") for a in args]))
    assert shape_of(ty) == np.arange(*args).shape and ty.dtype == "float32"


def test_arange_of_non_constant_is_any():
    assert shape_of(infer_expr(relay.arange(v((), name="n")))) == ("?",)


def test_arange_errors():
    with pytest.raises(TypeInferenceError, match="invalid range"):
        infer_expr(relay.arange(relay.const(5.0), relay.const(1.0)))
    with pytest.raises(TypeInferenceError, match="must be a float32 scalar"):
        infer_expr(relay.arange(v((), "int32", "n")))


def test_full_zeros_ones_and_likes():
    ty = infer_expr(relay.full(relay.const(1, "int32"), (2, 3)))
    assert shape_of(ty) == (2, 3) and ty.dtype == "int32"
    ty = infer_expr(relay.full(relay.const(1.0), (4,), dtype="float16"))
    assert ty.dtype == "float16"
    assert shape_of(infer_expr(relay.zeros((2, 3), "float32"))) == (2, 3)
    assert infer_expr(relay.ones(4, "int8")).dtype == "int8"
    assert shape_of(infer_expr(relay.zeros_like(v((Any(), 2))))) == ("?", 2)
    assert shape_of(infer_expr(relay.full_like(v((3,)), relay.const(2.0)))) == (3,)
    with pytest.raises(TypeInferenceError, match="fill value must be a scalar"):
        infer_expr(relay.full(relay.const([1.0, 2.0]), (2,)))
    dyn = relay.zeros(v((3,), "int64", "s"), "float32")
    assert dyn.op is Op.get("dyn.zeros") and shape_of(infer_expr(dyn)) == ("?", "?", "?")


# ---- layout and broadcasting --------------------------------------------------------------------
@pytest.mark.parametrize("shape,src,dst,expected", [
    ((1, 16, 8, 8), "NCHW", "NCHW8c", (1, 2, 8, 8, 8)),
    ((1, 2, 8, 8, 8), "NCHW8c", "NCHW", (1, 16, 8, 8)),
    ((1, 16, 8, 4), "NCHW", "NHWC", (1, 8, 4, 16)),
    ((1, 4, 8, 8, 4), "NCHW4c", "NCHW8c", (1, 2, 8, 8, 8)),
])
def test_layout_transform(shape, src, dst, expected):
    assert shape_of(infer_expr(relay.layout_transform(v(shape), src, dst))) == expected


def test_layout_transform_errors():
    with pytest.raises(TypeInferenceError, match="not divisible by 8"):
        infer_expr(relay.layout_transform(v((1, 12, 4, 4)), "NCHW", "NCHW8c"))
    with pytest.raises(TypeInferenceError, match="same primal axes"):
        infer_expr(relay.layout_transform(v((1, 12, 4, 4)), "NCHW", "NCDW"))


def test_broadcast_to_and_like_and_collapse():
    assert shape_of(infer_expr(relay.broadcast_to(v((3, 1)), (2, 3, 4)))) == (2, 3, 4)
    assert shape_of(infer_expr(relay.broadcast_to_like(v((3, 1)), v((3, 5), name="y")))) == \
        (3, 5)
    with pytest.raises(TypeInferenceError, match="not broadcast-compatible"):
        infer_expr(relay.broadcast_to(v((3,)), (4,)))
    assert shape_of(infer_expr(relay.collapse_sum_like(v((2, 3, 4)),
                                                       v((3, 1), name="y")))) == (3, 1)
    assert shape_of(infer_expr(relay.collapse_sum_to(v((2, 3, 4)), (3, 1)))) == (3, 1)
    with pytest.raises(TypeInferenceError, match="not broadcast-compatible"):
        infer_expr(relay.collapse_sum_to(v((2, 3)), (2, 3, 4)))
    with pytest.raises(TypeInferenceError, match="does not broadcast to"):
        infer_expr(relay.collapse_sum_to(v((2, 1)), (2, 3)))


# ---- dtype and misc ---------------------------------------------------------------------------
def test_casts():
    ty = infer_expr(relay.cast(v((2, 3)), "int8"))
    assert shape_of(ty) == (2, 3) and ty.dtype == "int8"
    assert infer_expr(relay.cast_like(v((2,)), v((5,), "float16", "y"))).dtype == "float16"
    assert infer_expr(relay.reinterpret(v((2,)), "int32")).dtype == "int32"
    assert infer_expr(v((2,)).astype("int64")).dtype == "int64"


def test_shape_of_ndarray_size_copy_clip_sequence_mask():
    ty = infer_expr(relay.shape_of(v((2, Any(), 4))))
    assert shape_of(ty) == (3,) and ty.dtype == "int32"
    ty = infer_expr(relay.ndarray_size(v((2, 3)), dtype="int64"))
    assert shape_of(ty) == () and ty.dtype == "int64"
    assert shape_of(infer_expr(relay.copy(v((2, 3))))) == (2, 3)
    clip = relay.clip(v((2, 3)), 0.0, 6.0)
    assert (clip.attrs.a_min, clip.attrs.a_max) == (0.0, 6.0)
    assert shape_of(infer_expr(clip)) == (2, 3)
    mask = relay.sequence_mask(v((5, 3, 2)), v((3,), "int32", "l"))
    assert shape_of(infer_expr(mask)) == (5, 3, 2)
    with pytest.raises(TypeInferenceError, match="valid_length must have shape"):
        infer_expr(relay.sequence_mask(v((5, 3, 2)), v((4,), "int32", "l")))
