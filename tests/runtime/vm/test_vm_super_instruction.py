"""Fused segments as a compiler-emitted super-instruction: ``VMFunction.segments``.

``Executable.fuse_segments`` (the VM compiler's last step) records the ranges; the bytecode
listing shows them, ``save``/``load_exec`` round-trip them, and the loader rejects a range
that is out of order, out of range or covers an instruction a segment cannot hold. NumPy is
the oracle for results.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocStorage,
    AllocTensor,
    InvokePacked,
    KillRegister,
    LoadConsti,
    Ret,
)

PRIMS = ["add_f32", "mul_f32"]
SHAPE = (4, 8)
NBYTES = 4 * 8 * 4


def add_then_mul(segments=()) -> VMFunction:
    """main(x, y) = (x + y) * y."""
    return VMFunction("main", ["x", "y"], [
        LoadConsti(2 * NBYTES, 2), AllocStorage(2, 64, "float32", 0, 3),
        LoadConsti(0, 4), AllocTensor(3, 4, SHAPE, "float32", 5),
        InvokePacked(0, 1, (0, 1, 5)),
        LoadConsti(NBYTES, 6), AllocTensor(3, 6, SHAPE, "float32", 7),
        InvokePacked(1, 1, (5, 1, 7)), KillRegister(5), Ret(7),
    ], 8, segments=segments)


def test_fuse_segments_records_the_straight_run_and_the_listing_shows_it(kernels):
    exe = Executable([add_then_mul()], primitive_names=PRIMS, lib=kernels).fuse_segments()
    assert exe.functions[0].segments == ((0, 9),)
    assert exe.bytecode.splitlines()[1] == "  fused segments: [0, 9)"


def test_kernels_that_are_not_c_functions_are_not_fused():
    exe = Executable([add_then_mul()], primitive_names=PRIMS).fuse_segments()  # no library
    assert exe.functions[0].segments == ()


def test_segments_round_trip_through_save_and_load(kernels, rng):
    exe = Executable([add_then_mul()], primitive_names=PRIMS, lib=kernels).fuse_segments()
    code, lib = exe.save()
    loaded = Executable.load_exec(code, lib)
    assert loaded.functions[0].segments == ((0, 9),)
    assert loaded.bytecode == exe.bytecode
    x, y = (rng.standard_normal(SHAPE).astype("float32") for _ in range(2))
    np.testing.assert_allclose(VirtualMachine(loaded, kiln.cpu(0)).run(x, y).numpy(),
                               (x + y) * y, rtol=1e-6)


@pytest.mark.parametrize("segments, problem", [
    (((0, 11),), "out of order or out of range"),
    (((4, 2),), "out of order or out of range"),
    (((0, 5), (3, 8)), "out of order or out of range"),
    (((0, 10),), r"instruction 9 \(Ret\) cannot be part of it"),
    (((0, 3),), r"segment \[0, 3\) calls no kernel it can fuse"),
])
def test_a_bad_segment_is_rejected_naming_what_is_wrong(kernels, segments, problem):
    with pytest.raises(TVMError, match=f"function 'main': fused .*{problem}"):
        Executable([add_then_mul(segments)], primitive_names=PRIMS, lib=kernels)


def test_a_tampered_segment_entry_in_a_file_is_rejected(kernels):
    exe = Executable([add_then_mul()], primitive_names=PRIMS, lib=kernels).fuse_segments()
    code, lib = exe.save()
    for tampered, match in [(b"0:9", b"0:x"), (b"0:9", b"9:9")]:
        bad = code.replace(tampered, match)
        with pytest.raises(TVMError, match="fused"):
            Executable.load_exec(bad, lib)


def test_the_vm_compiler_emits_segments_and_the_vm_runs_them(rng):
    x = relay.var("x", shape=(2, 6))
    w = relay.var("w", shape=(3, 6))
    mod = kiln.IRModule.from_expr(relay.Function([x, w], relay.nn.relu(relay.nn.dense(x, w))))
    exe = relay.vm.compile(mod, "c")
    assert exe.functions[exe.global_map["main"]].segments
    vm = VirtualMachine(exe, kiln.cpu(0))
    a, b = rng.standard_normal((2, 6)).astype("float32"), rng.standard_normal((3, 6))
    b = b.astype("float32")
    np.testing.assert_allclose(vm.run(a, b).numpy(), np.maximum(a @ b.T, 0), rtol=1e-5)
