"""VMCompiler / relay.vm.compile / create_executor("vm") surface, and the ManifestLifetimes
pass on its own (oracle: NumPy and the interpreter)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.transform.manifest_lifetimes import manifest_lifetimes
from kiln.relay.vm import VMCompiler
from kiln.runtime.vm import VirtualMachine


def _affine():
    x = relay.var("x", shape=(2, 3))
    w = relay.var("w", shape=(2, 3))
    return kiln.IRModule.from_expr(relay.Function([x, w], relay.add(relay.exp(x), w)))


def test_compile_binds_params_as_constants(rng):
    w = rng.standard_normal((2, 3), dtype="float32")
    exe = relay.vm.compile(_affine(), "c", params={"w": w})
    assert exe.get_function_params("main") == ["x"]
    x = rng.standard_normal((2, 3), dtype="float32")
    out = VirtualMachine(exe, kiln.cpu(0)).run(x)
    np.testing.assert_allclose(out.numpy(), np.exp(x) + w, rtol=1e-5)


def test_vm_compiler_steps(rng):
    compiler = VMCompiler()
    with pytest.raises(kiln.TVMError, match="codegen"):
        compiler.get_exec()
    with pytest.raises(kiln.TVMError, match="lower"):
        compiler.codegen()
    compiler.set_params({"w": np.ones((2, 3), "float32")})
    assert list(compiler.get_params()) == ["w"]
    optimized = compiler.optimize(_affine(), "c")
    assert "Primitive=1" in optimized.astext()  # fused, ready for code generation
    compiler.lower(_affine(), "c")
    compiler.codegen()
    exe = compiler.get_exec()
    assert exe.primitive_ops and exe.lib is not None
    x = rng.standard_normal((2, 3), dtype="float32")
    np.testing.assert_allclose(VirtualMachine(exe, kiln.cpu(0)).run(x).numpy(),
                               np.exp(x) + 1, rtol=1e-5)


def test_create_executor_vm_evaluates_main_and_expressions(rng):
    mod = _affine()
    x, w = rng.standard_normal((2, 2, 3), dtype="float32")
    run = relay.create_executor("vm", mod, kiln.cpu(0), "c").evaluate()
    np.testing.assert_allclose(run(x, w).numpy(), np.exp(x) + w, rtol=1e-5)
    a = relay.var("a", shape=(3,))
    fn = relay.Function([a], relay.multiply(a, a))
    result = relay.create_executor("vm", kiln.IRModule(), kiln.cpu(0), "c").evaluate(fn)
    np.testing.assert_allclose(result(np.arange(3, dtype="float32")).numpy(), [0, 1, 4])
    closed = relay.create_executor("vm", kiln.IRModule(), kiln.cpu(0), "c").evaluate(
        relay.add(relay.const(np.float32(2.0)), relay.const(np.float32(3.0))))
    assert float(closed.numpy()) == 5.0


def test_compile_rejects_non_modules():
    with pytest.raises(kiln.TVMError, match="IRModule"):
        relay.vm.compile("not a module", "c")


def test_references_are_a_clear_error():
    x = relay.var("x", shape=(2,))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.RefRead(relay.RefCreate(x))))
    with pytest.raises(kiln.TVMError, match="cannot compile"):
        relay.vm.compile(mod, "c")


def test_manifest_lifetimes_kills_after_the_last_use_only():
    x = relay.var("x", shape=(2,))
    a, b, c = relay.var("a"), relay.var("b"), relay.var("c")
    body = relay.Let(a, relay.add(x, x),
                     relay.Let(b, relay.multiply(a, x),
                               relay.Let(c, relay.add(b, a), relay.Tuple([c, b]))))
    text = manifest_lifetimes(relay.Function([x], body)).astext()
    # a dies after c's binding (its last use); b and c are in the result, so never killed
    assert text.count("memory.kill") == 1
    assert text.index("memory.kill(%a)") > text.index("add(%b, %a)")


def test_manifest_lifetimes_keeps_values_used_in_branches_alive():
    x = relay.var("x", shape=(), dtype="bool")
    y = relay.var("y", shape=(2,))
    a, r = relay.var("a"), relay.var("r")
    branch = relay.If(x, relay.add(a, a), y)
    body = relay.Let(a, relay.negative(y), relay.Let(r, branch, r))
    func = manifest_lifetimes(relay.Function([x, y], body))
    text = func.astext()
    assert text.index("memory.kill(%a)") > text.index("if (%x)")
    mod = kiln.IRModule.from_expr(relay.Function([x, y], body))
    exe = relay.vm.compile(mod, "c")
    out = VirtualMachine(exe, kiln.cpu(0)).run(np.array(True), np.array([1, 2], "float32"))
    np.testing.assert_allclose(out.numpy(), [-2, -4])
