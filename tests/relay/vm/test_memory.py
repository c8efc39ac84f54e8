"""VM compiler memory: one arena per static function, slot reuse and kills (oracle: byte
counts computed by hand from the shapes, and NumPy for the values)."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import compile_vm

import kiln
from kiln import relay
from kiln.relay.vm import VMCompiler
from kiln.runtime.vm import Opcode, VirtualMachine

ROWS, WIDTH, LAYERS = 8, 64, 6
TENSOR_BYTES = ROWS * WIDTH * 4  # one float32 [8, 64] activation: 2048 bytes


def _dense_chain(batch=ROWS):
    """LAYERS dense layers in a row (dense → dense never fuses, so each is a kernel)."""
    x = relay.var("x", shape=(batch, WIDTH))
    w = relay.var("w", shape=(WIDTH, WIDTH))
    h = x
    for _ in range(LAYERS):
        h = relay.nn.dense(h, w)
    return kiln.IRModule.from_expr(relay.Function([x, w], h))


def _compile(mod, lifetimes=True):
    disabled = [] if lifetimes else ["ManifestLifetimes"]
    with kiln.transform.PassContext(opt_level=3, disabled_pass=disabled):
        compiler = VMCompiler()
        compiler.lower(mod, "c")
        compiler.codegen()
    return compiler


def _reference(x, w):
    for _ in range(LAYERS):
        x = x @ w.T
    return x


def test_static_function_allocates_one_arena(rng):
    compiler = _compile(_dense_chain())
    exe = compiler.get_exec()
    opcodes = [i.opcode for i in exe.function("main").instructions]
    assert opcodes.count(Opcode.AllocStorage) == 1
    assert opcodes.count(Opcode.AllocTensor) == opcodes.count(Opcode.InvokePacked)  # one per kernel
    x = rng.standard_normal((ROWS, WIDTH), dtype="float32")
    w = (rng.standard_normal((WIDTH, WIDTH)) / 8).astype("float32")
    out = VirtualMachine(exe, kiln.cpu(0)).run(x, w)
    np.testing.assert_allclose(out.numpy(), _reference(x, w), rtol=1e-4, atol=1e-5)


def test_kills_let_the_arena_reuse_slots():
    with_kills = _compile(_dense_chain(), lifetimes=True)
    without = _compile(_dense_chain(), lifetimes=False)
    # with kills two slots alternate; without, every activation keeps its own slot
    assert with_kills.stats["arena_bytes"]["main"] == 2 * TENSOR_BYTES
    assert without.stats["arena_bytes"]["main"] == LAYERS * TENSOR_BYTES
    kills = [i for i in with_kills.get_exec().function("main").instructions
             if i.opcode == Opcode.KillRegister]
    assert len(kills) >= LAYERS - 1
    assert not any(i.opcode == Opcode.KillRegister
                   for i in without.get_exec().function("main").instructions)


def _peak_bytes(exe, *args):
    """Run once with the naive allocator, recording the most bytes held at any moment."""
    vm = VirtualMachine(exe, kiln.cpu(0), memory_cfg="naive")
    allocator = vm.allocators[0]
    peak = [0]
    acquire = allocator._acquire

    def tracking(nbytes, alignment):
        block = acquire(nbytes, alignment)
        peak[0] = max(peak[0], allocator.used_bytes + block.nbytes)
        return block

    allocator._acquire = tracking
    out = vm.run(*args)
    return peak[0], out


def test_kill_register_reduces_peak_memory_of_dynamic_tensors(rng):
    """With Any rows every activation has its own storage; kills free each one after use."""
    mod = _dense_chain(batch=relay.Any())
    rows = 256
    x = rng.standard_normal((rows, WIDTH), dtype="float32")
    w = (rng.standard_normal((WIDTH, WIDTH)) / 8).astype("float32")
    peak_with, out_with = _peak_bytes(_compile(mod, True).get_exec(), x, w)
    peak_without, out_without = _peak_bytes(_compile(mod, False).get_exec(), x, w)
    activation = rows * WIDTH * 4
    assert peak_without >= LAYERS * activation
    assert peak_with <= 3 * activation
    np.testing.assert_allclose(out_with.numpy(), _reference(x, w), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out_with.numpy(), out_without.numpy())


def test_returned_tensor_is_not_overwritten_by_later_kernels(rng):
    """A tensor that escapes (in the result tuple) keeps its slot while later ones are made."""
    x = relay.var("x", shape=(4, 4))
    w = relay.var("w", shape=(4, 4))
    a = relay.nn.dense(x, w)
    b = relay.nn.dense(a, w)
    c = relay.nn.dense(b, w)
    mod = kiln.IRModule.from_expr(relay.Function([x, w], relay.Tuple([a, c])))
    xv, wv = rng.standard_normal((2, 4, 4), dtype="float32")
    _, vm = compile_vm(mod)
    out = vm.run(xv, wv)
    np.testing.assert_allclose(out[0].numpy(), xv @ wv.T, rtol=1e-5)
    np.testing.assert_allclose(out[1].numpy(), ((xv @ wv.T) @ wv.T) @ wv.T, rtol=1e-4)


def test_wrong_input_shape_and_dtype_are_rejected():
    exe = _compile(_dense_chain()).get_exec()
    vm = VirtualMachine(exe, kiln.cpu(0))
    w = np.zeros((WIDTH, WIDTH), "float32")
    with pytest.raises(kiln.TVMError, match="expects"):
        vm.run(np.zeros((ROWS, WIDTH + 1), "float32"), w)
    with pytest.raises(kiln.TVMError, match="expects"):
        vm.run(np.zeros((ROWS, WIDTH), "float64"), w)
