"""float16 sums, means and softmax rows accumulate in float32 and round once, as NumPy's (the
ONNX reference's) do, on every executor; a float16 accumulator is off by ulps."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.vm import VirtualMachine

X = (np.random.default_rng(0).standard_normal((3, 5, 97)) * 3).astype("float16")


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


CASES = {
    "sum": (lambda x: relay.sum(x, axis=[-1]), lambda x: x.sum(-1)),
    "mean": (lambda x: relay.mean(x, axis=[0, 2]), lambda x: x.mean((0, 2))),
    "softmax": (lambda x: relay.nn.softmax(x), _softmax),
    "log_softmax": (lambda x: relay.nn.log_softmax(x), _log_softmax),
}


@pytest.mark.parametrize("opt_level", [0, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_float16_reduction_matches_numpy_bit_for_bit(name, opt_level):
    build, oracle = CASES[name]
    x = relay.var("x", shape=X.shape, dtype="float16")
    mod = kiln.IRModule.from_expr(relay.Function([x], build(x)))
    with kiln.transform.PassContext(opt_level=opt_level):
        exe = relay.vm.compile(mod, target="llvm")
    got = VirtualMachine(exe, kiln.cpu(0)).invoke("main", X).numpy()
    want = oracle(X)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
