"""topi.sort / argsort / topk against NumPy's stable sort, on the c and llvm targets.

All cases of a target share one kiln.build (one compile) in a module-scoped fixture.
Ordering rules under test: stable ties, NaN as the largest key, descending keeps ties in
their original order.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, topi

RNG = np.random.default_rng(5)


def _ties(*shape, dtype="float32"):
    return RNG.integers(-4, 5, shape).astype(dtype)


def _with_nans(*shape):
    x = RNG.standard_normal(shape).astype("float32")
    x.flat[RNG.choice(x.size, x.size // 4, replace=False)] = np.nan
    x.flat[:3] = [np.inf, -np.inf, np.nan]
    return x


def stable_order(x: np.ndarray, axis: int, is_ascend: bool) -> np.ndarray:
    """NumPy's stable order; descending keeps ties in order and puts NaN first."""
    moved = np.moveaxis(x, axis, -1)
    if is_ascend:
        order = np.argsort(moved, -1, kind="stable")
    else:
        nan_last = ~np.isnan(moved) if moved.dtype.kind == "f" else np.ones(moved.shape, bool)
        neg = -moved.astype("float64")
        flat_neg, flat_nan = neg.reshape(-1, moved.shape[-1]), nan_last.reshape(
            -1, moved.shape[-1])
        order = np.stack([np.lexsort((a, b)) for a, b in zip(flat_neg, flat_nan)]).reshape(
            moved.shape) if moved.size else np.zeros(moved.shape, "int64")
    return np.moveaxis(order, -1, axis).astype("int32")


def _take(x, order, axis):
    return np.take_along_axis(x, order, axis)


# (label, input, make(placeholder) -> outputs, expected(input) -> list of arrays)
def _cases():
    cases = []
    for n in (0, 1, 2, 17, 1000, 4100):
        x = _ties(3, n)
        cases.append((f"argsort n={n}", x, lambda t: topi.argsort(t, axis=-1),
                      lambda v: [stable_order(v, -1, True)]))
    x3 = _ties(17, 3, 5)
    cases += [
        ("argsort axis=-3 descending int64", x3,
         lambda t: topi.argsort(t, axis=-3, is_ascend=False, dtype="int64"),
         lambda v: [stable_order(v, 0, False).astype("int64")]),
        ("argsort float32 indices", x3, lambda t: topi.argsort(t, axis=1, dtype="float32"),
         lambda v: [stable_order(v, 1, True).astype("float32")]),
        ("sort axis=1 ascending", x3, lambda t: topi.sort(t, axis=1),
         lambda v: [np.sort(v, 1)]),
        ("sort descending", x3, lambda t: topi.sort(t, axis=-1, is_ascend=False),
         lambda v: [_take(v, stable_order(v, -1, False), -1)]),
        ("sort float16", _ties(4, 33, dtype="float16"), lambda t: topi.sort(t),
         lambda v: [np.sort(v, -1)]),
        ("sort int32", RNG.integers(-2**31, 2**31 - 1, (2, 50)).astype("int32"),
         lambda t: topi.sort(t, is_ascend=False),
         lambda v: [_take(v, stable_order(v, -1, False), -1)]),
        ("argsort NaN ascending", _with_nans(3, 40), lambda t: topi.argsort(t),
         lambda v: [stable_order(v, -1, True)]),
        ("argsort NaN descending", _with_nans(3, 40), lambda t: topi.argsort(t, is_ascend=False),
         lambda v: [stable_order(v, -1, False)]),
    ]
    xt = _ties(6, 300)
    for k, ret, asc in ((5, "both", False), (1, "values", True), (0, "indices", False),
                        (-1, "both", True), (100, "both", False), (300, "indices", False),
                        (64, "both", True)):
        def make(t, k=k, ret=ret, asc=asc):
            return topi.topk(t, k, axis=1, ret_type=ret, is_ascend=asc, dtype="int64")

        def expect(v, k=k, ret=ret, asc=asc):
            order = stable_order(v, 1, asc)[:, :k if k >= 1 else None]
            pair = {"values": _take(v, order, 1), "indices": order.astype("int64")}
            return [pair[kind] for kind in {"both": ("values", "indices")}.get(ret, (ret,))]

        cases.append((f"topk k={k} {ret} ascend={asc}", xt, make, expect))
    cases += [
        ("topk NaN", _with_nans(2, 90), lambda t: topi.topk(t, 7),
         lambda v: [_take(v, stable_order(v, -1, False)[:, :7], -1),
                    stable_order(v, -1, False)[:, :7]]),
        ("topk axis=-2 of 3-D", x3, lambda t: topi.topk(t, 2, axis=-2, is_ascend=True),
         lambda v: [_take(v, stable_order(v, 1, True)[:, :2], 1),
                    stable_order(v, 1, True)[:, :2]]),
        ("topk k=n/4 of sorted rows", np.tile(np.arange(200, dtype="float32"), (2, 1)),
         lambda t: topi.topk(t, 50), lambda v: [v[:, ::-1][:, :50],
                                                 (199 - np.tile(np.arange(50), (2, 1))).astype(
                                                     "int32")]),
        ("topk ascending of descending rows", np.tile(np.arange(200, 0, -1, dtype="float32"),
                                                      (3, 1)),
         lambda t: topi.topk(t, 9, is_ascend=True, ret_type="indices"),
         lambda v: [np.tile(np.arange(199, 190, -1), (3, 1)).astype("int32")]),
        ("topk zero rows", np.zeros((0, 9), "float32"), lambda t: topi.topk(t, 3),
         lambda v: [np.zeros((0, 3), "float32"), np.zeros((0, 3), "int32")]),
    ]
    return cases


CASES = _cases()


@pytest.fixture(scope="module", params=["c", "llvm"])
def results(request):
    """Every case's outputs, from one build for the target."""
    holders, outs, spans = [], [], []
    for index, (_, x, make, _) in enumerate(CASES):
        holder = te.placeholder(x.shape, str(x.dtype), name=f"x{index}")
        made = make(holder)
        made = list(made) if isinstance(made, list) else [made]
        # uniquely named copies: the llvm target's C glue names parameters after tensors
        made = [te.compute(t.shape, lambda *i, t=t: t(*i), name=f"out{index}_{j}")
                for j, t in enumerate(made)]
        holders.append(holder)
        spans.append((len(outs), len(made)))
        outs += made
    sch = topi.generic.default_schedule(outs)
    mod = kiln.build(sch, holders + outs, target=request.param, name="sorts")
    arrays = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["sorts"](*[kiln.nd.array(c[1]) for c in CASES], *arrays)
    return [[a.numpy() for a in arrays[start:start + count]] for start, count in spans]


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_matches_numpy_stable_sort(results, case):
    _, x, _, expect = CASES[case]
    want = expect(x)
    assert len(results[case]) == len(want)
    for got, ref in zip(results[case], want):
        assert got.shape == ref.shape and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("call, message", [
    (lambda t: topi.topk(t, 2, ret_type="value"), "ret_type"),
    (lambda t: topi.topk(t, 9), "exceeds"),
])
def test_bad_arguments_raise(call, message):
    with pytest.raises(kiln.TVMError, match=message):
        call(te.placeholder((3, 8), name="x"))
