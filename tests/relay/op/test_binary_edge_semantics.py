"""floor_mod on floats, integer power and the bit shifts at their edges (signed zeros,
infinite divisors, negative or too-wide shift counts) agree with NumPy on the interpreter and
on compiled code."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.vm import VirtualMachine

INF, NAN = np.inf, np.nan
DIVIDENDS = [0.0, -0.0, 0.0, -0.0, -3.0, 3.0, -1.0, 1.0, INF, -INF, 1.0, 1.0, NAN, 1.0, 7.5, -7.5]
DIVISORS = [-2.0, 2.0, 2.0, -2.0, INF, INF, -INF, -INF, 2.0, 2.0, 0.0, -0.0, 2.0, NAN, -2.0, 2.0]
SHIFTED = [-8, 4, -1, 5, 1 << 20, -(1 << 20)]
COUNTS = [-1, -32, 32, 33, 100, 3]


def _run(build, *args):
    """The outputs of ``build(*vars)`` on the interpreter and on the VM (opt 3, llvm)."""
    params = [relay.var(f"a{i}", shape=a.shape, dtype=str(a.dtype)) for i, a in enumerate(args)]
    mod = kiln.IRModule.from_expr(relay.Function(params, build(*params)))
    interp = relay.create_executor("debug", mod=mod, device=kiln.cpu(0), target="llvm")
    with np.errstate(all="ignore"):
        reference = interp.evaluate()(*args).numpy()
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm")
    return reference, VirtualMachine(exe, kiln.cpu(0)).invoke("main", *args).numpy()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_floor_mod_takes_the_divisors_sign_like_numpy(dtype):
    a, b = np.array(DIVIDENDS, dtype), np.array(DIVISORS, dtype)
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    for got in _run(relay.floor_mod, a, b):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16"])
@pytest.mark.parametrize("direction", ["left", "right"])
def test_shift_by_a_negative_or_too_wide_count_is_numpys(direction, dtype):
    x = np.array(SHIFTED, "int64").astype(dtype)
    counts = np.array(COUNTS, "int64").astype(dtype)
    numpy_shift = np.left_shift if direction == "left" else np.right_shift
    relay_shift = relay.left_shift if direction == "left" else relay.right_shift
    want = numpy_shift(x, counts)
    for got in _run(relay_shift, x, counts):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_power_compiles_and_matches_numpy(dtype):
    base = np.array([-3, -2, 0, 1, 2, 5, 7], dtype)
    exponent = np.array([3, 2, 4, 9, 10, 3, 2], dtype)
    for got in _run(relay.power, base, exponent):
        np.testing.assert_array_equal(got, np.power(base, exponent))
