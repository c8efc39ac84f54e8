"""Conditional loads (``if_then_else`` over buffer reads) compile to correct C.

GCC 12.2 at -O3 with AVX vectorizes an outer loop over a fully unrolled small inner loop and
turns a load under ``?:`` into a masked load of an interleaved group, with the wrong mask
(GCC PR tree-optimization/114375). The C emitter hoists loads that are provably in bounds out
of the ``?:``; these tests pin shapes that hit the bug (an inner extent of 3).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir

RNG = np.random.default_rng(11)


def _select_kernel(target: str, shape: tuple[int, int]):
    mask = te.placeholder(shape, "int32", name="mask")
    a = te.placeholder(shape, "float32", name="a")
    b = te.placeholder(shape, "float32", name="b")
    out = te.compute(shape, lambda i, j: tir.if_then_else(mask[i, j] >= 0, a[i, j], b[i, j]),
                     name="out")
    sch = te.create_schedule(out.op)
    return kiln.build(sch, [mask, a, b, out], target=target, name="select")


@pytest.mark.parametrize("target", ["c", "llvm"])
@pytest.mark.parametrize("shape", [(4, 3), (8, 3), (5, 5), (3, 7)])
def test_data_dependent_select_of_loads(target, shape):
    mod = _select_kernel(target, shape)
    mask = RNG.integers(-1, 2, shape).astype("int32")
    a, b = RNG.standard_normal((2, *shape)).astype("float32")
    out = kiln.nd.empty(shape, "float32")
    mod["select"](kiln.nd.array(mask), kiln.nd.array(a), kiln.nd.array(b), out)
    np.testing.assert_array_equal(out.numpy(), np.where(mask >= 0, a, b))


def test_guard_against_out_of_bounds_stays_conditional():
    """A load that may fall outside its buffer (padding) is not hoisted out of its guard."""
    data = te.placeholder((4, 3), "float32", name="data")
    padded = te.compute((4, 5), lambda i, j: tir.if_then_else(
        tir.all(j >= 1, j < 4), data[i, j - 1], tir.const(0.0, "float32")), name="padded")
    sch = te.create_schedule(padded.op)
    mod = kiln.build(sch, [data, padded], target="c", name="pad")
    assert "_arm" not in mod.get_source()
    x = RNG.standard_normal((4, 3)).astype("float32")
    out = kiln.nd.empty((4, 5), "float32")
    mod["pad"](kiln.nd.array(x), out)
    np.testing.assert_array_equal(out.numpy(), np.pad(x, ((0, 0), (1, 1))))
