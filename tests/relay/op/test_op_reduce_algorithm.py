"""Reductions and sorting/scan ops: attrs defaults and output types against NumPy."""

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


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "all", "any"])
def test_reduce_defaults_and_type(name):
    call = getattr(relay, name)(v((2, 3, 4)))
    assert call.op is Op.get(name)
    assert (call.attrs.axis, call.attrs.keepdims, call.attrs.exclude) == (None, False, False)
    ty = infer_expr(call)
    assert shape_of(ty) == () and ty.dtype == "float32"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 2), min_size=1, max_size=3, unique=True), st.booleans())
def test_sum_shape_matches_numpy(axes, keepdims):
    data = np.zeros((2, 3, 4))
    normalized = {a % 3 for a in axes}
    call = relay.sum(v((2, 3, 4)), axis=axes, keepdims=keepdims)
    if len(normalized) != len(axes):
        with pytest.raises(TypeInferenceError, match="duplicate axes"):
            infer_expr(call)
        return
    assert shape_of(infer_expr(call)) == data.sum(axis=tuple(axes), keepdims=keepdims).shape


def test_exclude_reduces_the_other_axes():
    call = relay.mean(v((2, 3, 4)), axis=1, exclude=True)
    assert shape_of(infer_expr(call)) == (3,)
    kept = relay.max(v((2, 3, 4)), axis=[0, 2], keepdims=True, exclude=True)
    assert shape_of(infer_expr(kept)) == (2, 1, 4)


def test_reduce_keeps_any_dims_and_rejects_bad_axis():
    assert shape_of(infer_expr(relay.sum(v((Any(), 3)), axis=1))) == ("?",)
    with pytest.raises(TypeInferenceError, match="axis 3 is out of range"):
        infer_expr(relay.sum(v((2, 3)), axis=3))


def test_argmax_argmin_give_int32():
    call = relay.argmax(v((2, 3, 4)), axis=1, select_last_index=True)
    assert call.attrs.select_last_index is True
    ty = infer_expr(call)
    assert shape_of(ty) == np.zeros((2, 3, 4)).argmax(axis=1).shape and ty.dtype == "int32"
    assert shape_of(infer_expr(relay.argmin(v((2, 3)), axis=[0], keepdims=True))) == (1, 3)


def test_variance_and_mean_variance():
    call = relay.variance(v((2, 3, 4)), axis=[1], unbiased=True)
    assert call.op is Op.get("variance") and len(call.args) == 2
    assert call.attrs.unbiased is True
    assert shape_of(infer_expr(call)) == (2, 4)
    pair = relay.op.mean_variance(v((2, 3, 4)), axis=[1])
    ty = infer_expr(pair.astuple())
    assert [shape_of(t) for t in ty.fields] == [(2, 4), (2, 4)]
    assert shape_of(infer_expr(relay.op.std(v((5, 2)), axis=0))) == (2,)


def test_logsumexp_keeps_the_reduced_shape():
    assert shape_of(infer_expr(relay.op.logsumexp(v((2, 3, 4)), axis=1))) == (2, 4)
    assert shape_of(infer_expr(relay.op.logsumexp(v((2, 3)), axis=1, keepdims=True))) == (2, 1)


def test_sort_argsort():
    ty = infer_expr(relay.sort(v((3, 4))))
    assert shape_of(ty) == (3, 4) and ty.dtype == "float32"
    call = relay.argsort(v((3, 4)), axis=0, is_ascend=False, dtype="int64")
    assert (call.attrs.axis, call.attrs.is_ascend) == (0, False)
    assert infer_expr(call).dtype == "int64"


@pytest.mark.parametrize("ret_type", ["both", "values", "indices"])
def test_topk_ret_types(ret_type):
    out = relay.topk(v((2, 10)), k=3, axis=1, ret_type=ret_type)
    call = out.astuple() if ret_type == "both" else out
    assert call.attrs.is_ascend is False and call.attrs.dtype == "int32"
    ty = infer_expr(call)
    values = TensorType((2, 3), "float32")
    indices = TensorType((2, 3), "int32")
    expected = {"both": [values, indices], "values": [values], "indices": [indices]}[ret_type]
    got = list(ty.fields) if isinstance(ty, TupleType) else [ty]
    assert [(shape_of(t), t.dtype) for t in got] == [(shape_of(t), t.dtype) for t in expected]


def test_topk_k_below_one_keeps_all_and_dyn_k():
    ty = infer_expr(relay.topk(v((2, 10)), k=0, ret_type="values"))
    assert shape_of(ty) == (2, 10)
    dyn = relay.topk(v((2, 10)), k=v((), "int32", "k"), ret_type="values")
    assert dyn.op is Op.get("dyn.topk") and shape_of(infer_expr(dyn)) == (2, "?")
    with pytest.raises(TypeInferenceError, match="ret_type must be one of"):
        infer_expr(relay.topk(v((2, 10)), k=2, ret_type="all"))


def test_argwhere_has_a_dynamic_count():
    ty = infer_expr(relay.argwhere(v((3, 4), "bool")))
    assert shape_of(ty) == ("?", 2) and ty.dtype == "int32"


def test_cumsum_cumprod():
    assert shape_of(infer_expr(relay.cumsum(v((2, 3))))) == np.cumsum(np.zeros((2, 3))).shape
    ty = infer_expr(relay.cumprod(v((2, 3)), axis=1, dtype="float64", exclusive=True))
    assert shape_of(ty) == (2, 3) and ty.dtype == "float64"
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer_expr(relay.cumsum(v((2, 3)), axis=2))
