"""te.schedule.InferBound / ScheduleOps (TVM's bound inference entry points)."""

from __future__ import annotations

import pytest

import kiln
from kiln import te, tir


def _extent(rng):
    return int(rng.extent)


def test_split_and_compute_at_bounds_like_tvm():
    n = 64
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    c = te.compute((n,), lambda i: b[i] * 2.0, name="C")
    s = te.create_schedule(c.op)
    xo, xi = s[c].split(c.op.axis[0], factor=8)
    s[b].compute_at(s[c], xo)
    bounds = te.schedule.InferBound(s)
    assert _extent(bounds[xo]) == 8 and _extent(bounds[xi]) == 8
    # B is attached under xo: it computes only the 8 elements that iteration reads
    assert _extent(bounds[b.op.axis[0]]) == 8
    assert _extent(bounds[c.op.axis[0]]) == 64


def test_stencil_region_and_reduction_bounds():
    a = te.placeholder((32, 32), name="A")
    b = te.compute((32, 32), lambda i, j: a[i, j] * 3.0, name="B")
    k = te.reduce_axis((0, 3), name="k")
    c = te.compute((30, 32), lambda i, j: te.sum(b[i + k, j], axis=k), name="C")
    s = te.create_schedule(c.op)
    s[b].compute_at(s[c], c.op.axis[0])
    bounds = te.schedule.InferBound(s)
    assert _extent(bounds[b.op.axis[0]]) == 3  # rows i .. i+2 for one row of C
    assert _extent(bounds[b.op.axis[1]]) == 32
    assert _extent(bounds[k]) == 3


def test_schedule_ops_returns_the_loop_nest():
    a = te.placeholder((16,), name="A")
    b = te.compute((16,), lambda i: a[i] + 1.0, name="B")
    s = te.create_schedule(b.op)
    s[b].split(b.op.axis[0], factor=4)
    stmt = te.schedule.ScheduleOps(s, te.schedule.InferBound(s))
    loops = []
    tir.stmt_functor.post_order_visit(stmt, lambda x: isinstance(x, tir.For) and loops.append(x))
    assert sorted(int(lp.extent) for lp in loops) == [4, 4]


def test_bad_arguments_raise():
    with pytest.raises(kiln.TVMError, match="expected a te.Schedule"):
        te.schedule.InferBound("s")
    a = te.placeholder((4,), name="A")
    s = te.create_schedule(te.compute((4,), lambda i: a[i], name="B").op)
    with pytest.raises(kiln.TVMError, match="bounds must be the map"):
        te.schedule.ScheduleOps(s, [1, 2])
