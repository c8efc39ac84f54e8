"""Fused kernels whose parameters reach them in an order other than ``main``'s (issue 21).

FuseOps numbers a fused primitive's parameters in the order its body first reads them, so
``main(x, gamma, beta, mean, var)`` calls a batch-norm kernel as ``(x, var, gamma, mean, beta)``.
Every executor must hand each argument to the kernel parameter that reads it, whatever the
order; these programs take all their tensors as run-time inputs (a model that binds its
weights as constants hides the bug). Oracles: NumPy and the Relay interpreter.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.backend.interpreter import Interpreter
from kiln.runtime.vm import VirtualMachine

OPT_LEVELS = [0, 1, 2, 3]


def run_vm(mod: kiln.IRModule, opt_level: int, *args: np.ndarray) -> np.ndarray:
    with kiln.transform.PassContext(opt_level=opt_level):
        exe = relay.vm.compile(mod, target="llvm")
    vm = VirtualMachine(exe, kiln.cpu(0))
    first = vm.run(*args).numpy()
    # a second run takes the direct path's in-place reuse of the first result's block
    np.testing.assert_array_equal(vm.run(*args).numpy(), first)
    return first


@pytest.mark.parametrize("opt_level", OPT_LEVELS)
def test_batch_norm_with_run_time_statistics(opt_level):
    x = relay.var("x", shape=(2, 3, 4, 4))
    stats = [relay.var(name, shape=(3,)) for name in ("gamma", "beta", "mean", "var")]
    out = relay.nn.batch_norm(x, *stats, epsilon=1e-3)[0]
    mod = kiln.IRModule.from_expr(relay.Function([x, *stats], out))
    rng = np.random.default_rng(21)
    xv = rng.standard_normal((2, 3, 4, 4)).astype("float32")
    gamma, beta, mean, var = (rng.uniform(0.5, 2.0, 3).astype("float32") for _ in range(4))
    column = (slice(None), None, None)
    want = (xv - mean[column]) / np.sqrt(var[column] + 1e-3) * gamma[column] + beta[column]
    got = run_vm(mod, opt_level, xv, gamma, beta, mean, var)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def permuted_program() -> tuple[kiln.IRModule, list[np.ndarray]]:
    """main(a, b, c, d, unused) whose one fused group reads d, c, a, b in that order. The
    shapes are equal: with distinct ones a kernel handed the wrong tensor rejects it and the
    VM falls back to its (right) unfused path, hiding the mix-up."""
    a, b, c, d, unused = (relay.var(name, shape=(3, 4)) for name in "abcdu")
    body = relay.exp(relay.negative(d))
    body = relay.subtract(body, relay.multiply(c, relay.const(2.0)))
    body = relay.divide(body, relay.add(relay.abs(a), relay.const(1.0)))
    body = relay.maximum(relay.subtract(body, b), relay.tanh(c))
    mod = kiln.IRModule.from_expr(relay.Function([a, b, c, d, unused], body))
    rng = np.random.default_rng(7)
    return mod, [rng.standard_normal((3, 4)).astype("float32") for _ in range(5)]


@pytest.mark.parametrize("opt_level", OPT_LEVELS)
def test_fused_group_reading_parameters_out_of_order(opt_level):
    mod, args = permuted_program()
    want = Interpreter(mod).evaluate()(*args).numpy()
    np.testing.assert_allclose(run_vm(mod, opt_level, *args), want, rtol=1e-5, atol=1e-6)


def test_the_permuted_program_really_permutes():
    # the fused call's arguments are main's parameters out of order (else the test above
    # could not fail); opt_level 3 fuses the whole body into one group
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(permuted_program()[0], target="llvm")
    [call] = [line for line in exe.bytecode.splitlines() if "InvokePacked" in line]
    reads = call.split("in=[")[1].split("]")[0]
    assert reads.split(", ") == ["$3", "$2", "$0", "$1"]
