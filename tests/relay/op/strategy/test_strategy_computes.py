"""Every Relay op with a kernel, built through its strategy and checked against NumPy, on both
the ``c`` and the ``llvm`` target.

Each test contributes a group of cases; the module-scoped ``results`` fixture builds each
group once per target (one compile per group) and hands each test its group's outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from strategy_testlib import EXECUTORS, run_cases

from kiln.relay.op import op_attrs as A

RNG = np.random.default_rng(7)
GROUPS: dict[str, list] = {}  # test name -> its (op_name, attrs, inputs) cases


def group(name: str, cases: list) -> list:
    """Register ``cases`` (tuples starting ``(op_name, attrs, inputs)``) under ``name``."""
    GROUPS[name] = cases
    return cases


def f32(*shape):
    return RNG.standard_normal(shape).astype("float32")


def pos(*shape):
    return (RNG.random(shape) + 0.5).astype("float32")


def unit(*shape):
    return (RNG.random(shape) * 1.6 - 0.8).astype("float32")


def i32(lo, hi, *shape):
    return RNG.integers(lo, hi, shape).astype("int32")


X = f32(2, 3, 4)
P = pos(2, 3, 4)
U = unit(2, 3, 4)
B3 = f32(3, 1)
B4 = f32(4)
Z = f32(0, 3)
I1 = i32(-9, 9, 3, 4)
I2 = i32(1, 5, 3, 4)

UNARY = {
    "abs": (X, np.abs), "acos": (U, np.arccos), "acosh": (P + 1, np.arccosh),
    "asin": (U, np.arcsin), "asinh": (X, np.arcsinh), "atan": (X, np.arctan),
    "atanh": (U, np.arctanh), "ceil": (X, np.ceil), "cos": (X, np.cos), "cosh": (X, np.cosh),
    "erf": (X, None), "exp": (X, np.exp), "fast_exp": (X, np.exp), "fast_tanh": (X, np.tanh),
    "floor": (X, np.floor), "log": (P, np.log), "log10": (P, np.log10), "log2": (P, np.log2),
    "negative": (X, np.negative), "round": (X * 3, np.round), "rsqrt": (P, lambda v: 1 /
                                                                        np.sqrt(v)),
    "sigmoid": (X, lambda v: 1 / (1 + np.exp(-v))), "sign": (X, np.sign),
    "sin": (X, np.sin), "sinh": (X, np.sinh), "sqrt": (P, np.sqrt), "tan": (U, np.tan),
    "tanh": (X, np.tanh), "trunc": (X * 3, np.trunc), "copy": (X, lambda v: v),
    "bitwise_not": (I1, np.invert), "logical_not": (X > 0, np.logical_not),
    "isnan": (np.array([0, np.nan, np.inf], "float32"), np.isnan),
    "isinf": (np.array([0, np.nan, -np.inf], "float32"), np.isinf),
    "isfinite": (np.array([0, np.nan, np.inf], "float32"), np.isfinite),
    "nn.relu": (X, lambda v: np.maximum(v, 0)),
}


def _erf(v):
    import math

    return np.vectorize(math.erf)(v).astype("float32")


UNARY_NAMES = list(UNARY) + ["fast_erf"]
H = X.astype("float16")
HP = P.astype("float16")
# float16 versions of ops that support it: (op, input, oracle in float32)
HALF_UNARY = [("exp", H, np.exp), ("tanh", H, np.tanh), ("sqrt", HP, np.sqrt),
              ("abs", H, np.abs), ("negative", H, np.negative), ("sigmoid", H,
                                                                lambda v: 1 / (1 + np.exp(-v))),
              ("fast_exp", H, np.exp), ("fast_tanh", H, np.tanh), ("floor", H * 3, np.floor),
              ("nn.relu", H, lambda v: np.maximum(v, 0))]
EDGE_UNARY = [("exp", f32(1, 0, 3), np.exp), ("sqrt", pos(1, 1, 1), np.sqrt),
              ("negative", np.float32(1.5), np.negative)]
group("unary", [(n, None, [UNARY.get(n, (X,))[0]]) for n in UNARY_NAMES]
      + [(n, None, [x]) for n, x, _ in HALF_UNARY + EDGE_UNARY])


def test_unary_ops_match_numpy(results):
    outs = results["unary"]
    for name, (out,) in zip(UNARY_NAMES, outs):
        data = UNARY.get(name, (X, None))[0]
        fn = UNARY.get(name, (None, None))[1] or _erf
        np.testing.assert_allclose(out, fn(data), rtol=1e-5, atol=1e-5, err_msg=name)
    rest = outs[len(UNARY_NAMES):]
    for (name, data, fn), (out,) in zip(HALF_UNARY, rest):
        assert out.dtype == np.float16, name
        want = fn(data.astype("float32")).astype("float16").astype("float32")
        np.testing.assert_allclose(out.astype("float32"), want, rtol=2e-3, atol=2e-3,
                                   err_msg=name)
    for (name, data, fn), (out,) in zip(EDGE_UNARY, rest[len(HALF_UNARY):]):
        assert out.shape == np.shape(data), name
        np.testing.assert_allclose(out, fn(data), rtol=1e-6, err_msg=name)


BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "power": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "floor_divide": np.floor_divide, "floor_mod": np.mod, "mod": np.fmod,
    "trunc_divide": lambda a, b: np.trunc(a / b), "trunc_mod": np.fmod,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
}
INT_BINARY = {
    "floor_divide": np.floor_divide, "floor_mod": np.mod, "mod": np.fmod,
    "trunc_divide": lambda a, b: np.trunc(a / b).astype("int32"), "trunc_mod": np.fmod,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift,
    "right_shift": np.right_shift, "add": np.add, "divide": lambda a, b: np.trunc(
        a / b).astype("int32"),
}
LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or,
           "logical_xor": np.logical_xor}


BIN_LHS, BIN_RHS = P[0], pos(3, 1) + 0.3
EXTRA_BINARY = [
    ("add", None, [Z, B3[:, 0]], lambda a, b: a + b),
    ("multiply", None, [np.float32(2.5), B4], np.multiply),
    ("subtract", None, [B4, np.float32(0.5)], np.subtract),
    ("add", None, [H, H[0, :1]], np.add),
    ("multiply", None, [H, H], np.multiply),
    ("maximum", None, [H[0], H[1, :, :1]], np.maximum),
    ("divide", None, [f32(1, 3, 1), pos(4)], np.divide),
    ("greater", None, [f32(2, 0, 1), f32(1, 5)], np.greater),
]
group("binary", [(n, None, [BIN_LHS, BIN_RHS]) for n in BINARY]
      + [(n, None, [I1, I2]) for n in INT_BINARY]
      + [(n, None, [X[0] > 0, B4 > 0]) for n in LOGICAL]
      + [c[:3] for c in EXTRA_BINARY])


def test_binary_ops_broadcast_like_numpy(results):
    outs = results["binary"]
    cases = GROUPS["binary"]
    oracles = list(BINARY.values()) + list(INT_BINARY.values()) + list(LOGICAL.values())
    names = list(BINARY) + list(INT_BINARY) + list(LOGICAL)
    for name, fn, case, (out,) in zip(names, oracles, cases, outs):
        np.testing.assert_allclose(out, fn(*case[2]), rtol=1e-5, err_msg=name)
    for (name, _, ins, fn), (out,) in zip(EXTRA_BINARY, outs[len(names):]):
        want = fn(*ins)
        assert out.shape == want.shape and out.dtype == want.dtype, name
        np.testing.assert_allclose(out, want, rtol=2e-3 if want.dtype == np.float16 else 1e-6,
                                   err_msg=name)


REDUCE = [
    ("sum", dict(axis=(1,)), lambda v: v.sum(1)),
    ("sum", dict(axis=None, keepdims=True), lambda v: v.sum(keepdims=True)),
    ("mean", dict(axis=(-1, 0)), lambda v: v.mean((0, 2))),
    ("max", dict(axis=(1,), exclude=True), lambda v: v.max((0, 2))),
    ("min", dict(axis=(2,), keepdims=True), lambda v: v.min(2, keepdims=True)),
    ("prod", dict(axis=(0,)), lambda v: v.prod(0)),
]


REDUCE_CASES = group("reduce", [(n, A.ReduceAttrs(**kw), [X]) for n, kw, _ in REDUCE] + [
    ("all", A.ReduceAttrs(axis=(1,)), [X > -1]),
    ("any", A.ReduceAttrs(axis=(0, 2)), [X > 1.5]),
    ("argmax", A.ArgReduceAttrs(axis=(1,)), [X]),
    ("argmin", A.ArgReduceAttrs(axis=(-1,), keepdims=True), [X]),
    ("argmax", A.ArgReduceAttrs(axis=(1,), select_last_index=True),
     [np.array([[1, 3, 3], [2, 2, 0]], "float32")]),
    ("variance", A.VarianceAttrs(axis=(2,)), [X, X.mean(2, keepdims=True)]),
    ("variance", A.VarianceAttrs(axis=(2,), unbiased=True), [X, X.mean(2, keepdims=True)]),
    ("sum", A.ReduceAttrs(axis=(0,)), [Z]),
    ("sum", A.ReduceAttrs(axis=(-1,)), [f32(3, 1)]),
    ("sum", A.ReduceAttrs(axis=(1,)), [H]),
    ("max", A.ReduceAttrs(axis=(-2,), keepdims=True), [H]),
])


def test_reductions_match_numpy(results):
    outs = results["reduce"]
    for (name, _, fn), (out,) in zip(REDUCE, outs):
        np.testing.assert_allclose(out, fn(X), rtol=1e-5, atol=1e-6, err_msg=name)
    rest = [r[0] for r in outs[len(REDUCE):]]
    np.testing.assert_array_equal(rest[0], (X > -1).all(1))
    np.testing.assert_array_equal(rest[1], (X > 1.5).any((0, 2)))
    np.testing.assert_array_equal(rest[2], X.argmax(1))
    np.testing.assert_array_equal(rest[3], X.argmin(-1)[..., None])
    np.testing.assert_array_equal(rest[4], [2, 1])
    np.testing.assert_allclose(rest[5], X.var(2), rtol=1e-5)
    np.testing.assert_allclose(rest[6], X.var(2, ddof=1), rtol=1e-5)
    np.testing.assert_array_equal(rest[7], np.zeros(3, "float32"))
    np.testing.assert_allclose(rest[8], REDUCE_CASES[len(REDUCE) + 8][2][0].sum(-1),
                               rtol=1e-6)
    assert rest[9].dtype == np.float16 and rest[10].dtype == np.float16
    np.testing.assert_allclose(rest[9].astype("float32"), H.astype("float32").sum(1),
                               rtol=5e-3, atol=5e-3)
    np.testing.assert_array_equal(rest[10], H.max(-2, keepdims=True))


IDX = np.array([[0, 2], [-1, 5]], "int32")
DATA5 = f32(5, 4)
C43 = f32(4, 3)
T131 = f32(1, 3, 1)
Z201 = f32(2, 0, 1)
TRANSFORM_CASES = group("transform", [
    ("reshape", A.ReshapeAttrs(newshape=(4, -1)), [X], X.reshape(4, 6)),
    ("reshape", A.ReshapeAttrs(newshape=(0, -3)), [X], X.reshape(2, 12)),
    ("transpose", A.TransposeAttrs(axes=(1, -1, 0)), [X], X.transpose(1, 2, 0)),
    ("transpose", A.TransposeAttrs(), [X], X.T),
    ("squeeze", A.SqueezeAttrs(axis=(1,)), [B3], B3[:, 0]),
    ("squeeze", A.SqueezeAttrs(), [f32(1, 3, 1)], None),
    ("expand_dims", A.ExpandDimsAttrs(axis=-1, num_newaxis=2), [B4], B4[:, None, None]),
    ("concatenate", A.ConcatenateAttrs(axis=-1), [[X, X[:, :, :1]]],
     np.concatenate([X, X[:, :, :1]], -1)),
    ("stack", A.StackAttrs(axis=1), [[B4, B4 * 2]], np.stack([B4, B4 * 2], 1)),
    ("take", A.TakeAttrs(axis=1), [DATA5, IDX], np.take(DATA5, np.clip(IDX, 0, 3), 1)),
    ("take", A.TakeAttrs(axis=0, mode="wrap"), [DATA5, IDX],
     np.take(DATA5, IDX, 0, mode="wrap")),
    ("take", A.TakeAttrs(), [DATA5, IDX], np.take(DATA5, np.clip(IDX, 0, 19))),
    ("gather", A.GatherAttrs(axis=1), [DATA5, np.array([[0, 3], [1, 1], [2, 0], [3, 3],
                                                        [0, 0]], "int32")], None),
    ("gather_nd", A.GatherNDAttrs(), [DATA5, np.array([[0, 4], [1, 3]], "int32")],
     DATA5[[0, 4], [1, 3]]),
    ("strided_slice", A.StridedSliceAttrs(begin=(1, -1), end=(2, 0), strides=(1, -2)),
     [X], X[1:2, -1:0:-2]),
    ("strided_slice", A.StridedSliceAttrs(begin=(1,), end=(2,), axes=(2,)), [X],
     X[:, :, 1:2]),
    ("tile", A.TileAttrs(reps=(2, 1, 3)), [B3], np.tile(B3, (2, 1, 3))),
    ("repeat", A.RepeatAttrs(repeats=2, axis=-1), [X], np.repeat(X, 2, -1)),
    ("reverse", A.ReverseAttrs(axis=1), [X], X[:, ::-1]),
    ("where", None, [X > 0, X, f32(4)], None),
    ("one_hot", A.OneHotAttrs(depth=4, axis=-1, dtype="float32"),
     [np.array([0, 3, 1], "int32"), np.float32(5), np.float32(-1)], None),
    ("full", A.InitOpAttrs(shape=(2, 2), dtype="float32"), [np.float32(3.5)],
     np.full((2, 2), 3.5, "float32")),
    ("zeros_like", None, [X], np.zeros_like(X)),
    ("ones_like", None, [X], np.ones_like(X)),
    ("layout_transform", A.LayoutTransformAttrs(src_layout="NCHW", dst_layout="NCHW2c"),
     [f32(1, 4, 2, 3)], None),
    ("cast", A.CastAttrs(dtype="int32"), [X * 4], (X * 4).astype("int32")),
    ("clip", A.ClipAttrs(a_min=-0.5, a_max=0.5), [X], np.clip(X, -0.5, 0.5)),
    ("broadcast_to", A.InitOpAttrs(shape=(2, 3, 4)), [B4], np.broadcast_to(B4, (2, 3, 4))),
    ("collapse_sum_like", None, [X, B4], X.sum((0, 1))),
    ("sequence_mask", A.SequenceMaskAttrs(mask_value=-1.0, axis=1),
     [f32(2, 3), np.array([1, 3], "int32")], None),
    ("shape_of", A.ShapeOfAttrs(), [X], np.array([2, 3, 4], "int32")),
    ("ndarray_size", A.NdarraySizeAttrs(dtype="int64"), [X], np.array(24, "int64")),
    ("cumsum", A.ScanopAttrs(axis=1), [X], np.cumsum(X, 1)),
    ("cumprod", A.ScanopAttrs(axis=0, exclusive=True), [P], None),
    ("nn.batch_flatten", None, [X], X.reshape(2, 12)),
    ("slice_like", A.SliceLikeAttrs(axes=(1,)), [X, f32(2, 2, 4)], X[:, :2]),
    ("split", A.SplitAttrs(indices_or_sections=(1, 3), axis=2), [X], None),
    ("cumsum", A.ScanopAttrs(axis=0), [C43], np.cumsum(C43, 0)),
    ("cumsum", A.ScanopAttrs(axis=-1, exclusive=True), [C43],
     np.cumsum(C43, 1) - C43),
    ("cumprod", A.ScanopAttrs(axis=-2), [C43], np.cumprod(C43, 0)),
    ("transpose", A.TransposeAttrs(axes=(-1, 0, 1)), [T131], T131.transpose(2, 0, 1)),
    ("squeeze", A.SqueezeAttrs(axis=(-1,)), [Z201], Z201[..., 0]),
    ("concatenate", A.ConcatenateAttrs(axis=0), [[f32(0, 3), C43]], None),
    ("cast", A.CastAttrs(dtype="float16"), [X], X.astype("float16")),
    ("take", A.TakeAttrs(axis=-1), [H, IDX], np.take(H, np.clip(IDX, 0, 3), -1)),
    ("where", None, [C43 > 0, np.float32(1), C43], np.where(C43 > 0, 1, C43)),
    ("reverse", A.ReverseAttrs(axis=-1), [H], H[..., ::-1]),
])


def test_transform_ops_match_numpy(results):
    cases, outs = TRANSFORM_CASES, results["transform"]
    expect_special = {
        "squeeze": lambda ins: ins[0].reshape(3),
        "gather": lambda ins: np.take_along_axis(ins[0], ins[1], 1),
        "where": lambda ins: np.where(ins[0], ins[1], ins[2]),
        "one_hot": lambda ins: np.where(np.eye(4)[ins[0]] > 0, 5, -1),
        "layout_transform": lambda ins: ins[0].reshape(1, 2, 2, 2, 3).transpose(0, 1, 3, 4, 2),
        "sequence_mask": lambda ins: np.where(np.arange(3)[None] >= ins[1][:, None], -1,
                                              ins[0]),
        "cumprod": lambda ins: np.concatenate([np.ones_like(ins[0][:1]),
                                               np.cumprod(ins[0], 0)[:-1]]),
        "concatenate": lambda ins: np.concatenate(ins[0], 0),
    }
    for (name, _, ins, expected), got in zip(cases, outs):
        if name == "split":
            for part, want in zip(got, np.split(X, [1, 3], 2)):
                np.testing.assert_array_equal(part, want)
            continue
        want = expected if expected is not None else expect_special[name](ins)
        assert got[0].shape == np.shape(want), name
        assert expected is None or got[0].dtype == np.asarray(want).dtype, name
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6, err_msg=name)


SORT_X = f32(3, 5)
SORT_X[0, 1] = SORT_X[0, 3]  # a tie: the sort is stable
SCATTER_DATA = f32(4, 3)
SCATTER_IDX = np.array([[1, 0, 3], [1, 2, -1]], "int32")
SCATTER_UPD = f32(2, 3)
ND_IDX = np.array([[0, 2, 0], [1, 0, 1]], "int32")
ND_UPD = f32(3)
group("sort_scatter", [
    ("argsort", A.ArgsortAttrs(axis=1), [SORT_X]),
    ("sort", A.ArgsortAttrs(axis=0, is_ascend=False), [SORT_X]),
    ("topk", A.TopKAttrs(k=2, axis=-1), [SORT_X]),
    ("topk", A.TopKAttrs(k=1, axis=0, ret_type="indices", is_ascend=True), [SORT_X]),
    ("scatter_elements", A.ScatterElementsAttrs(axis=0), [SCATTER_DATA, SCATTER_IDX,
                                                          SCATTER_UPD]),
    ("scatter_elements", A.ScatterElementsAttrs(axis=0, reduction="add"),
     [SCATTER_DATA, SCATTER_IDX, SCATTER_UPD]),
    ("scatter_elements", A.ScatterElementsAttrs(axis=0, reduction="max"),
     [SCATTER_DATA, SCATTER_IDX, SCATTER_UPD]),
    ("scatter_nd", A.ScatterNDAttrs(mode="add"), [SCATTER_DATA, ND_IDX, ND_UPD]),
    ("scatter_nd", A.ScatterNDAttrs(mode="update"), [SCATTER_DATA, ND_IDX, ND_UPD]),
    ("argsort", A.ArgsortAttrs(axis=-1, is_ascend=False), [H]),
])


def test_sort_family_and_scatters_match_numpy(results):
    results = results["sort_scatter"]
    x, data, idx, upd = SORT_X, SCATTER_DATA, SCATTER_IDX, SCATTER_UPD
    ind_nd, upd_nd = ND_IDX, ND_UPD
    np.testing.assert_array_equal(results[0][0], np.argsort(x, 1, kind="stable"))
    np.testing.assert_array_equal(results[1][0], -np.sort(-x, 0))
    np.testing.assert_array_equal(results[2][0], -np.sort(-x, 1)[:, :2])
    np.testing.assert_array_equal(results[2][1], np.argsort(-x, 1, kind="stable")[:, :2])
    np.testing.assert_array_equal(results[3][0], x.argmin(0)[None])

    def scatter(fn):
        ref = data.copy()
        for q in np.ndindex(idx.shape):
            ref[idx[q] % 4, q[1]] = fn(ref[idx[q] % 4, q[1]], upd[q])
        return ref

    np.testing.assert_allclose(results[4][0], scatter(lambda a, b: b), rtol=1e-6)
    np.testing.assert_allclose(results[5][0], scatter(lambda a, b: a + b), rtol=1e-6)
    np.testing.assert_allclose(results[6][0], scatter(max), rtol=1e-6)
    ref_add, ref_set = data.copy(), data.copy()
    for y in range(3):
        ref_add[ind_nd[0, y], ind_nd[1, y]] += upd_nd[y]
        ref_set[ind_nd[0, y], ind_nd[1, y]] = upd_nd[y]
    np.testing.assert_allclose(results[7][0], ref_add, rtol=1e-6)
    np.testing.assert_allclose(results[8][0], ref_set, rtol=1e-6)
    np.testing.assert_array_equal(results[9][0], np.argsort(-H, -1, kind="stable"))


LIKE = f32(2, 12)
LIKE_CASES = group("like_init", [
    ("zeros", A.InitOpAttrs(shape=(2, 3), dtype="int32"), [], np.zeros((2, 3), "int32")),
    ("ones", A.InitOpAttrs(shape=(3,), dtype="float32"), [], np.ones(3, "float32")),
    ("full_like", None, [X, np.float32(-2)], np.full_like(X, -2)),
    ("cast_like", None, [X * 3, I1], (X * 3).astype("int32")),
    ("broadcast_to_like", None, [B3, f32(2, 3, 4)], np.broadcast_to(B3, (2, 3, 4))),
    ("collapse_sum_to", A.InitOpAttrs(shape=(3, 1)), [X, B3], X.sum((0, 2))[:, None]),
    ("reshape_like", A.ReshapeLikeAttrs(), [X, LIKE], X.reshape(2, 12)),
    ("contrib_reverse_reshape", A.ReshapeAttrs(newshape=(-1, 0)), [X], X.reshape(6, 4)),
    ("copy", None, [np.zeros((0, 2), "float32")], np.zeros((0, 2), "float32")),
])


def test_like_and_init_ops_match_numpy(results):
    for (name, _, _, want), (out,) in zip(LIKE_CASES, results["like_init"]):
        np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=name)
        assert out.dtype == want.dtype, name


@pytest.fixture(scope="module", params=["c", "llvm", EXECUTORS])
def results(request):
    """group name -> its cases' outputs, built once per target.

    One build per group rather than one for the file: the packed wrapper of a build checks
    every argument, and gcc's time on that one function grows faster than linearly with the
    argument count (one build of all ~170 cases compiled several times slower than six).
    """
    return {name: run_cases([case[:3] for case in cases], request.param)
            for name, cases in GROUPS.items()}
