"""x86 softmax, log_softmax and fast_softmax take exp from kiln.topi.math (fast_exp's form
for arguments <= 0, fast_exp_nonpositive: accuracy checked here over every argument x - max
can take) and give NumPy's softmax: within 1e-6 for normal inputs, and NumPy's 0, NaN and
subnormal results for rows with -inf (masked attention), +inf, NaN, +-100 / +-1e4 and
subnormal entries.

One relay.build per target holds all nine kernels ((1, 1000) along -1, (8, 128, 64) along -1
and along 1) plus a float16 softmax; every data set runs through that one module. The
reference is float64 NumPy (no SciPy).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import relay, te, tir
from kiln.contrib import graph_executor
from kiln.runtime.error import TVMError
from kiln.topi import math as topi_math
from kiln.topi.x86 import nn as x86_nn

TARGETS = ["llvm", "c"]
ROW_SHAPE, BATCH_SHAPE, HALF_SHAPE = (1, 1000), (8, 128, 64), (4, 40)
# (input name, axis): the three softmax axes the module computes
AXES = [("x", -1), ("y", -1), ("y", 1)]
OPS = ["softmax", "log_softmax", "fast_softmax"]
RNG = np.random.default_rng(20261122)
SUBNORMAL = 1e-40  # below float32's smallest normal, 1.18e-38


def _build(target: str):
    x = relay.var("x", shape=ROW_SHAPE, dtype="float32")
    y = relay.var("y", shape=BATCH_SHAPE, dtype="float32")
    z = relay.var("z", shape=HALF_SHAPE, dtype="float16")
    inputs = {"x": x, "y": y}
    outs = [getattr(relay.nn, op)(inputs[name], axis) for name, axis in AXES for op in OPS]
    outs.append(relay.nn.softmax(z, -1))
    mod = kiln.IRModule.from_expr(relay.Function([x, y, z], relay.Tuple(outs)))
    with kiln.transform.PassContext(opt_level=3):
        return relay.build(mod, target=target)


@pytest.fixture(scope="module", params=TARGETS)
def built(request):
    """(target, the built factory, a graph module over it)."""
    lib = _build(request.param)
    return request.param, lib, graph_executor.GraphModule(lib["default"](kiln.cpu()))


def _run(module, x: np.ndarray, y: np.ndarray, z: np.ndarray | None = None) -> list:
    z = np.zeros(HALF_SHAPE, "float16") if z is None else z
    module.set_input("x", x)
    module.set_input("y", y)
    module.set_input("z", z)
    module.run()
    return [module.get_output(k).numpy() for k in range(module.get_num_outputs())]


def np_softmax(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(softmax, log_softmax) of ``a`` along ``axis``, the textbook way: NaN rows for a NaN, a
    +inf or all -inf, 0 (and -inf in log_softmax) for -inf entries. ``x - max`` is rounded in
    ``a``'s dtype, as NumPy (and the kernel) rounds it; the rest is float64."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shifted = (a - a.max(axis=axis, keepdims=True)).astype("float64")
        exps = np.exp(shifted)
        total = exps.sum(axis=axis, keepdims=True)
        return exps / total, shifted - np.log(total)


def _assert_matches_numpy(got: list, x: np.ndarray, y: np.ndarray) -> None:
    data = {"x": x, "y": y}
    for k, (name, axis) in enumerate(AXES):
        want_softmax, want_log = np_softmax(data[name], axis)
        softmax, log_softmax, fast_softmax = got[3 * k:3 * k + 3]
        where = f"{name} along axis {axis}"
        # normal results within 1e-6; subnormal ones within two subnormal steps
        np.testing.assert_allclose(softmax, want_softmax, rtol=1e-6, atol=3e-45, err_msg=where)
        np.testing.assert_allclose(fast_softmax, want_softmax, rtol=1e-6, atol=3e-45,
                                   err_msg=where)
        np.testing.assert_allclose(log_softmax, want_log, rtol=1e-6, atol=1e-6, err_msg=where)


def _normal(shape, scale=3.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _masked(shape, fraction=0.3) -> np.ndarray:
    data = _normal(shape)
    data[RNG.random(shape) < fraction] = -np.inf
    return data


# data set name -> (x of ROW_SHAPE, y of BATCH_SHAPE)
def _data_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    sets = {"normal": (_normal(ROW_SHAPE), _normal(BATCH_SHAPE)),
            "masked_minus_inf": (_masked(ROW_SHAPE), _masked(BATCH_SHAPE))}
    # whole rows of -inf: x's only row; y's batch 0 (every row along -1 and along 1), and the
    # axis -1 row y[1, 5, :] (a single -inf column entry along axis 1 elsewhere)
    y = _masked(BATCH_SHAPE, 0.1)
    y[0] = -np.inf
    y[1, 5, :] = -np.inf
    sets["all_minus_inf_rows"] = (np.full(ROW_SHAPE, -np.inf, "float32"), y)
    for special in (np.inf, np.nan):
        x, y = _normal(ROW_SHAPE), _normal(BATCH_SHAPE)
        x[0, 417] = special
        y[2, 7, 9] = special
        y[5, :, 33] = special
        sets[f"with_{special}"] = (x, y)
    # large magnitudes: x - max reaches -2e4 and -200; ties at the max share the mass
    magnitudes = np.array([-1e4, 1e4, -100.0, 100.0, 0.0], "float32")
    sets["large_magnitudes"] = (RNG.choice(magnitudes, ROW_SHAPE),
                                RNG.choice(magnitudes, BATCH_SHAPE))
    sets["large_spread"] = ((RNG.standard_normal(ROW_SHAPE) * 1e4).astype("float32"),
                            (RNG.standard_normal(BATCH_SHAPE) * 100).astype("float32"))
    # subnormal inputs (rows are nearly uniform), and inputs whose exp(x - max) and softmax
    # are subnormal: x - max spread over [-110, 0]
    sets["subnormal_inputs"] = ((RNG.standard_normal(ROW_SHAPE) * SUBNORMAL).astype("float32"),
                                (RNG.standard_normal(BATCH_SHAPE) * SUBNORMAL).astype("float32"))
    row = -np.linspace(0, 110, ROW_SHAPE[1], dtype="float32")[None]
    sets["subnormal_outputs"] = (row, RNG.uniform(-110, 0, BATCH_SHAPE).astype("float32"))
    return sets


DATA_SETS = _data_sets()


@pytest.mark.parametrize("data_set", list(DATA_SETS))
def test_softmax_family_matches_numpy(built, data_set):
    _, _, module = built
    x, y = DATA_SETS[data_set]
    _assert_matches_numpy(_run(module, x, y), x, y)


def test_special_rows_give_numpys_zeros_and_nans(built):
    """The NaN/0 pattern itself, spelled out (not only through the reference)."""
    _, _, module = built
    x, y = DATA_SETS["all_minus_inf_rows"]
    row_softmax, row_log_softmax = _run(module, x, y)[:2]
    assert np.isnan(row_softmax).all() and np.isnan(row_log_softmax).all()
    x, y = DATA_SETS["masked_minus_inf"]
    outs = _run(module, x, y)
    masked = np.isneginf(x)
    assert masked.any() and np.all(outs[0][masked] == 0) and np.all(outs[2][masked] == 0)
    assert np.all(np.isneginf(outs[1][masked]))
    assert np.all(outs[0][~masked] > 0)
    x, y = DATA_SETS["with_nan"]
    y_last_axis = _run(module, x, y)[3]
    assert np.isnan(y_last_axis[2, 7]).all() and np.isnan(y_last_axis[5, :, 33]).all()
    assert not np.isnan(y_last_axis[2, 6]).any()


def test_subnormal_softmax_results_are_kept(built):
    """exp(x - max) below float32's normal range is not flushed to zero."""
    _, _, module = built
    x, y = DATA_SETS["subnormal_outputs"]
    softmax = _run(module, x, y)[0]
    tiny = float(np.finfo(np.float32).tiny)
    kept = (softmax > 0) & (softmax < tiny)
    assert kept.sum() >= 10


def test_float16_softmax_computes_exp_in_float32(built):
    _, _, module = built
    z = (RNG.standard_normal(HALF_SHAPE) * 2).astype("float16")
    got = _run(module, *DATA_SETS["normal"], z)[-1]
    assert got.dtype == np.float16
    want = np_softmax(z, -1)[0]
    np.testing.assert_allclose(got.astype("float64"), want, rtol=4e-3, atol=1e-4)


# ---- the kernels: fast_exp inlined as vector arithmetic, no exp call ----------------------


def _kernel_sources(lib, target: str) -> str:
    source = lib.get_lib().get_source("c" if target == "c" else "ll")
    if target == "c":
        # each translation unit's C prelude defines kiln_expf (what tir.exp becomes); keep
        # only the kernels of each unit
        units = re.split(r"/\* ---- \S+\.c ---- \*/", source)
        return "".join(unit[unit.index("tvmgen_default_fused"):] for unit in units
                       if "tvmgen_default_fused" in unit)
    return source


def test_built_kernels_call_no_exp_and_are_vectorized(built):
    target, lib, _ = built
    source = _kernel_sources(lib, target)
    if target == "c":
        assert not re.search(r"\b(kiln_)?expf?\s*\(", source)
        assert "float32x8" in source
    else:
        assert not re.search(r"@(llvm\.exp|expf?)\b", source)
        assert "<8 x float>" in source
    # log_softmax takes one log per row, vectorized along axis 1
    assert "log" in source


def _calls_and_vector_stores(func) -> tuple[set, dict]:
    calls, stores = set(), {}
    for node in _walk(func.body):
        if isinstance(node, tir.Call):
            calls.add(str(node.op))
        if isinstance(node, tir.BufferStore):
            lanes = node.value.dtype.split("x")
            stores[node.buffer.name] = int(lanes[1]) if len(lanes) > 1 else 1
    return calls, stores


def _walk(body):
    found = []
    tir.post_order_visit(body, found.append)
    return found


@pytest.mark.parametrize("make", [x86_nn.softmax, x86_nn.log_softmax])
@pytest.mark.parametrize("shape, axis", [(ROW_SHAPE, -1), (BATCH_SHAPE, -1), (BATCH_SHAPE, 1)])
def test_lowered_tir_has_no_exp_call_and_vector_exp(make, shape, axis):
    x = te.placeholder(shape, name="x")
    out = make(x, axis)
    func = kiln.lower(x86_nn.schedule_softmax([out], axis), [x, out])["main"]
    calls, stores = _calls_and_vector_stores(func)
    assert "tir.exp" not in calls
    assert stores["T_softmax_exp"] == 8
    assert stores[out.op.name] == 8


# ---- fast_exp_nonpositive (softmax's exp) over every argument x - max can take ----------


def _float32_range(low: float, high: float) -> np.ndarray:
    """Every float32 in [low, high] (both of one sign)."""
    ends = np.array([low, high], "float32").view("int32")
    return np.arange(ends.min(), ends.max() + 1, dtype="int32").view("float32")


def _nonpositive_sweep() -> np.ndarray:
    magnitudes = np.geomspace(1e-45, 1e3, 300_000)
    edges = [_float32_range(-103.9, -104.1), _float32_range(-87.2, -87.5),
             _float32_range(-107.9, -108.1)]
    specials = [0.0, -0.0, -np.inf, np.nan, -1e30, -3.4e38]
    return np.concatenate([-magnitudes.astype("float32"), *edges,
                           np.array(specials, "float32")])


SWEEP = _nonpositive_sweep()


@pytest.mark.parametrize("target", TARGETS)
def test_fast_exp_nonpositive_accuracy(target):
    holder = te.placeholder(SWEEP.shape, name="x")
    out = te.compute(SWEEP.shape, lambda i: topi_math.fast_exp_nonpositive(holder[i]),
                     name="exp_nonpositive")
    func = kiln.build(te.create_schedule(out.op), [holder, out], target=target)
    result = kiln.nd.empty(SWEEP.shape)
    func(kiln.nd.array(SWEEP), result)
    got, want = result.numpy().astype("float64"), np.exp(SWEEP.astype("float64"))
    tiny = float(np.finfo(np.float32).tiny)
    normal = want >= tiny
    assert (np.abs(got - want)[normal] / want[normal]).max() < 1.5e-7
    small = ~normal & ~np.isnan(want)
    assert np.abs(got - want)[small].max() < 3e-45
    # 0 exactly where float32 exp rounds to 0 (below ln(2^-150) = -103.97208)
    assert np.array_equal(got[small] == 0, want[small].astype("float32") == 0)
    assert np.isnan(got[-3]) and got[-4] == 0  # NaN stays NaN, exp(-inf) = 0
    assert np.all(got[SWEEP == 0] == 1)


@pytest.mark.parametrize("target", TARGETS)
def test_fast_exp_saturates_where_float32_exp_does(target):
    """fast_exp's clamp lets its own scaling overflow to +inf and round to 0: every float32
    around ln(float32 max) and ln(2^-150) gives float32 exp's inf / 0 / finite answer."""
    x = np.concatenate([_float32_range(88.70, 89.2), _float32_range(-103.9, -104.1),
                        _float32_range(-109.9, -110.1),
                        np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], "float32")])
    holder = te.placeholder(x.shape, name="x")
    out = topi_math.fast_exp(holder)
    func = kiln.build(te.create_schedule(out.op), [holder, out], target=target)
    result = kiln.nd.empty(x.shape)
    func(kiln.nd.array(x), result)
    got = result.numpy()
    with np.errstate(over="ignore"):  # float32 exp overflows to inf as it should
        want = np.exp(x.astype("float64"))
        want32 = want.astype("float32")  # float64 exp rounded once: float32's exp
    assert np.array_equal(np.isinf(got), np.isinf(want32))
    assert np.array_equal(got == 0, want32 == 0)
    assert np.array_equal(np.isnan(got), np.isnan(want32))
    normal = np.isfinite(want32) & (want32 >= np.finfo(np.float32).tiny)
    assert (np.abs(got[normal] - want[normal]) / want[normal]).max() < 1.5e-7
    subnormal = (want32 > 0) & (want32 < np.finfo(np.float32).tiny)
    assert subnormal.any() and np.abs(got[subnormal] - want[subnormal]).max() < 3e-45


def test_x86_fast_exp_is_kiln_topi_math_fast_exp():
    assert x86_nn.fast_exp is topi_math.UNARY["fast_exp"]


def test_softmax_axis_out_of_range_is_a_type_error():
    x = relay.var("x", shape=(2, 3), dtype="float32")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.softmax(x, 2)))
    with pytest.raises(TVMError, match="out of range"):
        relay.build(mod, target="llvm")


def test_wrong_input_shape_is_an_error(built):
    _, _, module = built
    with pytest.raises(TVMError, match="shape"):
        module.set_input("y", np.zeros((8, 64, 128), "float32"))
