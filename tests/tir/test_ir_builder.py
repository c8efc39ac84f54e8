"""tir.ir_builder (TVM's imperative TIR construction) through te.extern, checked by NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir


def _build_extern(n, body, dtype="float32", out_dtype=None, target="c"):
    a = te.placeholder((n,), dtype, name="A")
    b = te.extern((n,), [a], lambda ins, outs: body(ins[0], outs[0]), name="B",
                  dtype=out_dtype or dtype)
    return kiln.build(te.create_schedule(b.op), [a, b], target, name="f")


def _run(f, x, out_dtype):
    a = kiln.nd.array(x)
    b = kiln.nd.empty(x.shape, out_dtype)
    f(a, b)
    return b.numpy()


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_prefix_sum_with_allocate_let_if_else(target):
    def body(src, dst):
        ib = tir.ir_builder.create()
        a, b = ib.buffer_ptr(src), ib.buffer_ptr(dst)
        acc = ib.allocate("float32", (1,), name="acc", scope="local")
        acc[0] = tir.const(0.0, "float32")
        with ib.for_range(0, src.shape[0], name="i") as i:
            half = ib.let("half", a[i] * 0.5)
            with ib.if_scope(i % 2 == 0):
                acc[0] = acc[0] + a[i]
            with ib.else_scope():
                acc[0] = acc[0] + half
            b[i] = acc[0]
        return ib.get()

    x = np.arange(1, 11, dtype="float32")
    weights = np.where(np.arange(10) % 2 == 0, 1.0, 0.5).astype("float32")
    np.testing.assert_allclose(_run(_build_extern(10, body, target=target), x, "float32"),
                               np.cumsum(x * weights), rtol=1e-6)


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_while_loop_collatz_steps(target):
    def body(src, dst):
        ib = tir.ir_builder.create()
        a, b = ib.buffer_ptr(src), ib.buffer_ptr(dst)
        with ib.for_range(0, src.shape[0], name="i", kind="parallel") as i:
            v = ib.allocate("int32", (1,), name="v", scope="local")
            steps = ib.allocate("int32", (1,), name="steps", scope="local")
            v[0], steps[0] = a[i], tir.const(0, "int32")
            with ib.while_loop(v[0] > 1):
                with ib.if_scope(v[0] % 2 == 0):
                    v[0] = v[0] // 2
                with ib.else_scope():
                    v[0] = 3 * v[0] + 1
                steps[0] = steps[0] + 1
            b[i] = steps[0]
        return ib.get()

    def collatz(v):
        n = 0
        while v > 1:
            v = v // 2 if v % 2 == 0 else 3 * v + 1
            n += 1
        return n

    x = np.arange(1, 17, dtype="int32")
    got = _run(_build_extern(16, body, "int32", target=target), x, "int32")
    np.testing.assert_array_equal(got, [collatz(int(v)) for v in x])


def test_flat_index_into_2d_buffer_and_statement_shapes():
    ib = tir.ir_builder.create()
    y = ib.allocate("float32", (4, 8), name="y")
    with ib.for_range(0, 4) as i:
        with ib.for_range(0, 8) as j:
            y[i * 8 + j] = tir.const(1.0, "float32")
    with ib.for_range(0, 2) as k:
        ib.emit(tir.call_extern("int32", "noop", k))
    stmt = ib.get()
    assert isinstance(stmt, tir.Allocate)
    loops = []
    tir.stmt_functor.post_order_visit(stmt, lambda n: isinstance(n, tir.For) and loops.append(n))
    assert sorted(lp.loop_var.name for lp in loops) == ["i", "j", "k"]
    store = []
    tir.stmt_functor.post_order_visit(
        stmt, lambda n: isinstance(n, tir.BufferStore) and store.append(n))
    assert len(store[0].indices) == 2  # the flat position became (row, column)


def test_builder_errors_name_the_problem():
    ib = tir.ir_builder.create()
    buf = ib.allocate("float32", (4,), name="buf")
    with pytest.raises(kiln.TVMError, match="storing a int32 value into a buffer of float32"):
        buf[0] = tir.const(1, "int32")
    with pytest.raises(kiln.TVMError, match="else_scope must directly follow an if_scope"):
        ib.else_scope()
    with pytest.raises(kiln.TVMError, match="unknown kind 'vectorized'"):
        ib.for_range(0, 4, kind="vectorized")
    with pytest.raises(kiln.TVMError, match="loop bound must be an integer"):
        ib.for_range(0, 2.5)
    with pytest.raises(kiln.TVMError, match="2 indices into a 1-D buffer"):
        buf[0, 1]
    with pytest.raises(kiln.TVMError, match="expected a TIR statement"):
        ib.emit("x = 1")
    scope = ib.for_range(0, 4)
    scope.__enter__()
    with pytest.raises(kiln.TVMError, match="1 scope\\(s\\) still open"):
        ib.get()
