"""Vector loops of any lane count on LLVM (``any_vector_lanes``).

C vector types need a power-of-two lane count, so VectorizeLoop leaves a loop of 10 or 6 lanes
serial; LLVM's vectors take any count, and the TE compiler of an ``llvm`` target lowers such a
loop to vector code (LLVM's own vectorizer spent most of a 10-column matmul's compile time on
the scalar loop). Each kernel runs against NumPy on AVX-512 and AVX2 machines' code; the
padded copies read a buffer placed against a ``PROT_NONE`` page, so a masked-off lane that
read past it would crash the test.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_vectorize_if_then_else import _fenced, _padded

import kiln
from kiln import relay, te, tir
from kiln.runtime.dtype import DataType
from kiln.tir.stmt_functor import post_order_visit
from kiln.tir.transform.vectorize import any_vector_lanes

RNG = np.random.default_rng(7)
LLVM_TARGETS = ["llvm", "llvm -mcpu=core-avx2"]


def _store_lanes(func) -> set[int]:
    """The lane counts of the stores in ``func``."""
    lanes: set[int] = set()
    post_order_visit(func.body, lambda n: lanes.add(DataType(n.value.dtype).lanes)
                     if type(n).__name__ == "BufferStore" else None)
    return lanes


def _vectorized(out: te.Tensor):
    sch = te.create_schedule(out.op)
    sch[out].vectorize(out.op.axis[-1])
    return sch


@pytest.mark.parametrize("lanes", [3, 6, 10, 24])
def test_loop_of_any_extent_is_vector_code_only_when_asked(lanes):
    a = te.placeholder((4, lanes), "float32", name="a")
    out = te.compute((4, lanes), lambda i, j: a[i, j] * 2.0 + 1.0, name="out")
    with any_vector_lanes():
        wide = kiln.lower(_vectorized(out), [a, out], name="f")["f"]
    plain = kiln.lower(_vectorized(out), [a, out], name="f")["f"]
    assert _store_lanes(wide) == {lanes}
    assert _store_lanes(plain) == {1}  # a serial loop, as the C target needs


@pytest.mark.parametrize("target", LLVM_TARGETS)
@pytest.mark.parametrize("dtype,lanes", [("float32", 10), ("float32", 24), ("int32", 6),
                                         ("int8", 12), ("float64", 5)])
def test_any_lane_count_kernels_match_numpy(target, dtype, lanes):
    """Arithmetic, a cast and a broadcast scalar in a vector of ``lanes`` elements."""
    a = te.placeholder((5, lanes), dtype, name="a")
    b = te.placeholder((lanes,), dtype, name="b")
    out = te.compute((5, lanes), lambda i, j: tir.Cast("float32", a[i, j] + b[j] * a[i, 0]),
                     name="out")
    with any_vector_lanes():
        mod = kiln.build(_vectorized(out), [a, b, out], target=target, name="f")
    x = RNG.integers(-9, 9, (5, lanes)).astype(dtype)
    y = RNG.integers(-9, 9, lanes).astype(dtype)
    result = kiln.nd.empty((5, lanes), "float32")
    mod["f"](kiln.nd.array(x), kiln.nd.array(y), result)
    expected = (x + y * x[:, :1]).astype("float32")
    np.testing.assert_array_equal(result.numpy(), expected)


@pytest.mark.parametrize("at_end", [True, False])
@pytest.mark.parametrize("target", LLVM_TARGETS)
def test_padded_rows_of_ten_lanes_read_only_the_image(target, at_end):
    """Rows of 7 + 3 = 10 lanes, the border lanes masked off: the first row's left lane is just
    before the image, the last row's right lanes just after it."""
    rows, cols = 5, 7
    data, out = _padded(rows, cols)
    with any_vector_lanes():
        mod = kiln.build(_vectorized(out), [data, out], target=target, name="pad")
    assert "llvm.masked.load.v10f32" in mod.get_source()
    x = RNG.standard_normal((rows, cols)).astype("float32")
    result = kiln.nd.empty((rows + 2, cols + 3), "float32")
    mod["pad"](_fenced(x, at_end), result)
    np.testing.assert_array_equal(result.numpy(), np.pad(x, ((1, 1), (1, 2))))


@pytest.mark.parametrize("target", LLVM_TARGETS + ["c"])
@pytest.mark.parametrize("units", [3, 6, 10])
def test_dense_and_matmul_with_few_columns(target, units):
    """relay.build's kernels of ``x @ w.T`` and ``a.T @ g`` with ``units`` output columns
    (a block of that many lanes on llvm; a loop on c)."""
    x = relay.var("x", shape=(8, 32), dtype="float32")
    w = relay.var("w", shape=(units, 32), dtype="float32")
    g = relay.var("g", shape=(8, units), dtype="float32")
    body = relay.Tuple([relay.nn.dense(x, w), relay.nn.matmul(x, g, transpose_a=True)])
    mod = kiln.IRModule.from_expr(relay.Function([x, w, g], body))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target)
    from kiln.contrib import graph_executor

    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    xv, wv, gv = (RNG.standard_normal(s).astype("float32")
                  for s in [(8, 32), (units, 32), (8, units)])
    m.run(x=xv, w=wv, g=gv)
    np.testing.assert_allclose(m.get_output(0).numpy(), xv @ wv.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.get_output(1).numpy(), xv.T @ gv, rtol=1e-5, atol=1e-5)
