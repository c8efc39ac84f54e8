"""docs/adding_an_op.md, done: a toy elementwise op registered in one place (here, as a family
module would) compiles through relay.build and the VM and runs against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, te
from kiln.contrib import graph_executor
from kiln.relay.op.op import (
    ELEMWISE,
    call,
    define_op,
    register_compute,
    register_gradient,
    register_injective_schedule,
    register_reference,
)
from kiln.relay.op.type_relations import identity_rel
from kiln.runtime.vm import VirtualMachine

# -- the whole op, as docs/adding_an_op.md writes it into kiln/relay/op/tensor.py -------------
define_op("test.cube", identity_rel, ELEMWISE, 1, describe="x ** 3")


def cube(data):
    """Elementwise ``data ** 3``."""
    return call("test.cube", [data])


@register_compute("test.cube")
def compute_cube(attrs, inputs, out_type):
    """TE compute of ``test.cube``."""
    x = inputs[0]
    return [te.compute(x.shape, lambda *i: x(*i) * x(*i) * x(*i), name="T_cube",
                       tag="elemwise")]


register_injective_schedule("test.cube")


@register_reference("test.cube")
def reference_cube(attrs, args, out_type):
    """NumPy semantics of ``test.cube``."""
    return np.asarray(args[0] ** 3, dtype=args[0].dtype)


@register_gradient("test.cube")
def gradient_cube(orig, grad):
    """d(x^3)/dx = 3 x^2."""
    x = orig.args[0]
    three = relay.const(np.array(3, dtype=str(x.checked_type.dtype)))
    return [relay.multiply(grad, relay.multiply(three, relay.multiply(x, x)))]
# -- end of the op ------------------------------------------------------------------------------


def _program(shape):
    x = relay.var("x", shape=shape, dtype="float32")
    y = relay.var("y", shape=shape, dtype="float32")
    # fused with its neighbours: the toy op joins an injective group like any built-in op
    return kiln.IRModule.from_expr(relay.Function([x, y], relay.add(cube(relay.exp(x)), y)))


def _expected(x, y):
    return np.exp(x.astype(np.float64)) ** 3 + y


def test_toy_op_compiles_with_relay_build_and_matches_numpy(rng):
    x = rng.uniform(-1, 1, (3, 5)).astype("float32")
    y = rng.uniform(-1, 1, (3, 5)).astype("float32")
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(_program((3, 5)), target="c")
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.run(x=x, y=y)
    np.testing.assert_allclose(m.get_output(0).numpy(), _expected(x, y), rtol=1e-5)


def test_toy_op_runs_on_the_vm_with_a_dynamic_dim(rng):
    # an elementwise op needs no shape function: the VM derives it from the pattern
    exe = relay.vm.compile(_program((relay.Any(), 4)), "c")
    for rows in (1, 6):
        x = rng.uniform(-1, 1, (rows, 4)).astype("float32")
        y = rng.uniform(-1, 1, (rows, 4)).astype("float32")
        out = VirtualMachine(exe, kiln.cpu(0)).run(x, y)
        np.testing.assert_allclose(out.numpy(), _expected(x, y), rtol=1e-5)


def test_toy_op_reference_and_gradient_agree_with_numpy(rng):
    x = rng.uniform(0.5, 1.5, (4,)).astype("float32")
    xv = relay.var("x", shape=(4,), dtype="float32")
    func = relay.Function([xv], cube(xv))
    mod = relay.transform.InferType()(kiln.IRModule.from_expr(func))
    out = relay.create_executor("debug", mod=mod).evaluate()(x)
    np.testing.assert_allclose(out.numpy(), x ** 3, rtol=1e-6)
    grad_mod = relay.transform.InferType()(
        kiln.IRModule.from_expr(relay.transform.gradient(mod["main"], mode="first_order")))
    _, (dx,) = relay.create_executor("debug", mod=grad_mod).evaluate()(x)
    np.testing.assert_allclose(dx.numpy(), 3 * x.astype(np.float64) ** 2, rtol=1e-5)


def test_toy_op_registered_twice_at_one_level_is_a_clear_error():
    with pytest.raises(kiln.TVMError, match="FTVMCompute of operator test.cube"):
        register_compute("test.cube", compute_cube)
