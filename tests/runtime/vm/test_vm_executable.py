"""Executable: byte layout vs hand-packed bytes, load validation, fuzzing, late-bound consts."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from vm_programs import alloc_tensor

import kiln
from kiln.runtime import ndarray as nd
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import (
    AllocClosure,
    DeviceCopy,
    Goto,
    If,
    Invoke,
    InvokePacked,
    LoadConst,
    LoadConsti,
    Move,
    Ret,
)


def u64(v):
    return struct.pack("<Q", v)


def i64s(values):
    return u64(len(values)) + struct.pack(f"<{len(values)}q", *values)


def string(text):
    data = text.encode()
    return u64(len(data)) + data


def strings(items):
    return u64(len(items)) + b"".join(string(s) for s in items)


def tvm_hash(opcode, fields):
    key = opcode
    for v in fields:
        key ^= ((v % (1 << 64)) + 0x9E3779B9 + (key << 6) + (key >> 2)) % (1 << 64)
    return key - (1 << 64) if key >= 1 << 63 else key


def test_save_writes_tvm_sections_in_order():
    main = VMFunction("main", ["x"], [LoadConsti(3, 1), Ret(1)], 2)
    exe = Executable([main], primitive_names=["k"], primitive_attrs={0: {"a": "b"}})
    expected = b"".join([
        u64(0xD225DE2F4214151D), string("kiln-0.1.0"),
        u64(1), struct.pack("<ii", 1, 0), string(""),          # virtual devices: cpu(0), ""
        struct.pack("<i", 0),                                  # host device index
        strings(["main"]),                                     # globals
        u64(0), i64s([]),                                      # constants, their devices
        strings(["k"]),                                        # primitive names
        u64(1), u64(0), u64(1), string("a"), string("b"),      # primitive attrs
        u64(1), strings(["main", "2", "2"]), strings(["x"]), i64s([0]),
        i64s([tvm_hash(14, [3, 1]), 14, 3, 1]),
        i64s([tvm_hash(1, [1]), 1, 1]),
    ])
    code, lib = exe.save()
    assert code == expected and lib is None


def program_with_constants(kernels):
    weight = nd.array(np.arange(6, dtype="float32").reshape(2, 3))
    bias = nd.array(np.full((2, 3), 0.5, dtype="float32"))
    main = VMFunction("main", ["x"], [
        LoadConst(0, 0, 1),
        *alloc_tensor((2, 3), "float32", 2, 3, 4, 5),
        InvokePacked(1, 1, (0, 1, 5)),
        LoadConst(1, 0, 6),
        *alloc_tensor((2, 3), "float32", 7, 8, 9, 10),
        InvokePacked(0, 1, (5, 6, 10)),
        Ret(10),
    ], 11, param_types=[((2, 3), "float32")])
    helper = VMFunction("helper", ["a", "b"], [Invoke(0, (0,), 2), Ret(2)], 3,
                        param_types=[((-1, 3), "float32"), None])
    return Executable([main, helper], constants=[weight, bias],
                      primitive_names=["add_f32", "mul_f32"], lib=kernels,
                      primitive_attrs={1: {"op_pattern": "0"}})


def test_save_load_run_identical(kernels, rng):
    exe = program_with_constants(kernels)
    code, lib = exe.save()
    loaded = Executable.load_exec(code, lib)
    assert loaded.bytecode == exe.bytecode
    assert loaded.save()[0] == code
    assert loaded.globals == ["main", "helper"]
    assert loaded.primitive_ops == ["add_f32", "mul_f32"]
    assert loaded.get_function_params("helper") == ["a", "b"]
    assert loaded.get_function_arity("main") == 1
    assert loaded.functions[1].param_types == (((-1, 3), "float32"), None)
    assert loaded.primitive_attrs == {1: {"op_pattern": "0"}}
    assert loaded.virtual_devices == [kiln.cpu(0)]
    for a, b in zip(loaded.constants, exe.constants):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    x = rng.standard_normal((2, 3), dtype="float32")
    expected = x * np.arange(6, dtype="float32").reshape(2, 3) + 0.5
    np.testing.assert_allclose(VirtualMachine(loaded, kiln.cpu(0)).run(x).numpy(), expected,
                               rtol=1e-6)


def test_stats_and_bytecode_listing(kernels):
    exe = program_with_constants(kernels)
    stats = exe.stats
    assert "Constants (#2, 48 bytes)" in stats and "(2, 3) float32" in stats
    assert "Globals (#2): [(main, 0), (helper, 1)]" in stats
    assert "Primitive ops (#2): [add_f32, mul_f32]" in stats
    assert "InvokePacked: 2" in stats and "LoadConst: 2" in stats
    listing = exe.bytecode
    assert listing.startswith("fn @main(%x) -> registers: 11, instructions: 13\n")
    assert "InvokePacked   packed 1 (mul_f32) in=[$0, $1] out=[$5]" in listing
    assert "fn @helper(%a, %b)" in listing


def test_version_mismatch_names_both_versions():
    code, _ = Executable([VMFunction("main", [], [LoadConsti(1, 0), Ret(0)], 1)]).save()
    tampered = code.replace(b"kiln-0.1.0", b"kiln-9.9.9")
    with pytest.raises(TVMError, match="written by 'kiln-9.9.9', this runtime is 'kiln-0.1.0'"):
        Executable.load_exec(tampered)
    with pytest.raises(TVMError, match="bad magic"):
        Executable.load_exec(b"\x00" * 8 + code[8:])
    with pytest.raises(TVMError, match="expects bytes"):
        Executable.load_exec("not bytes")


def test_tampered_instruction_fails_its_hash():
    code, _ = Executable([VMFunction("main", [], [LoadConsti(1234, 0), Ret(0)], 1)]).save()
    tampered = code.replace(struct.pack("<q", 1234), struct.pack("<q", 1235))
    with pytest.raises(TVMError, match="hash mismatch in instruction 0 of 'main'"):
        Executable.load_exec(tampered)


def test_loader_checks_registers_against_the_frame():
    code, _ = Executable([VMFunction("main", [], [LoadConsti(1, 0), Ret(0)], 1)]).save()
    good = i64s([tvm_hash(1, [0]), 1, 0])
    bad = i64s([tvm_hash(1, [7]), 1, 7])                  # Ret $7 with a hash that matches
    assert code.endswith(good)
    with pytest.raises(TVMError, match="register 7 is out of range"):
        Executable.load_exec(code[: -len(good)] + bad)


def test_trailing_and_truncated_bytes_are_errors():
    code, _ = Executable([VMFunction("main", [], [LoadConsti(1, 0), Ret(0)], 1)]).save()
    with pytest.raises(TVMError, match="unexpected trailing bytes"):
        Executable.load_exec(code + b"\x00")
    for cut in (4, 20, len(code) // 2, len(code) - 1):
        with pytest.raises(TVMError, match="truncated"):
            Executable.load_exec(code[:cut])


two = VMFunction("two", ["a", "b"], [Ret(0)], 2)


@pytest.mark.parametrize("functions, kwargs, message", [
    ([VMFunction("main", [], [Move(0, 3), Ret(0)], 2)], {}, "register 3 is out of range"),
    ([VMFunction("main", [], [Invoke(5, (), 0), Ret(0)], 1)], {}, "function index 5"),
    ([VMFunction("main", ["x"], [Invoke(1, (0,), 0), Ret(0)], 1), two], {},
     "passes 1 args to 'two' which takes 2"),
    ([VMFunction("main", ["x"], [AllocClosure(1, (0, 0, 0), 0), Ret(0)], 1), two], {},
     "captures 3 values but the function takes 2"),
    ([VMFunction("main", [], [LoadConst(0, 0, 0), Ret(0)], 1)], {}, "constant index 0"),
    ([VMFunction("main", ["x"], [InvokePacked(2, 1, (0,)), Ret(0)], 1)],
     {"primitive_names": ["k"]}, "packed index 2"),
    ([VMFunction("main", ["x"], [If(0, 0, 1, 9), Ret(0)], 1)], {}, "jump target 9"),
    ([VMFunction("main", ["x"], [If(0, 0, 0, 1), Ret(0)], 1)], {}, "must be non-zero"),
    ([VMFunction("main", [], [Goto(0)], 1)], {}, "a zero offset loops forever"),
    ([VMFunction("main", ["x"], [Move(0, 0)], 1)], {}, "last instruction must be Ret"),
    ([VMFunction("main", ["x"], [], 1)], {}, "has no instructions"),
    ([VMFunction("main", ["x"], [DeviceCopy(0, 0, 3, 0), Ret(0)], 1)], {},
     "destination device index 3"),
    ([VMFunction("main", ["x", "y"], [Ret(0)], 1)], {}, "2 params but 1 registers"),
    ([VMFunction("main", [], [Ret(0)], 1 << 30)], {}, "register file size"),
    ([VMFunction("main", ["x"], [Ret(0)], 1, param_types=[((2,), "floaty32")])], {},
     "floaty32"),
    ([VMFunction("main", [], [Ret(0)], 1), VMFunction("main", [], [Ret(0)], 1)], {},
     "duplicate function names"),
    ([VMFunction("main", [], [LoadConsti(1 << 64, 0), Ret(0)], 1)], {}, "is not an int64"),
    ([VMFunction("main", [], [LoadConsti(1.5, 0), Ret(0)], 1)], {}, "is not an int64"),
    ([VMFunction("main", [], ["Ret 0"], 1)], {}, "'Ret 0' is not an instruction"),
    (["main"], {}, "'main' is not a VMFunction"),
])
def test_verification_rejects_bad_programs(functions, kwargs, message):
    with pytest.raises(TVMError, match=message):
        Executable(functions, **kwargs)


def fuzz_target():
    weight = nd.array(np.arange(4, dtype="float32"))
    f = VMFunction("f", ["a", "b"], [
        LoadConsti(1, 2), If(0, 2, 1, 2), Ret(1), LoadConst(0, 0, 3), Invoke(0, (3, 1), 4),
        Ret(4),
    ], 5, param_types=[((4,), "float32"), None])
    main = VMFunction("main", ["x"], [AllocClosure(0, (0,), 1), Invoke(0, (0, 0), 2), Ret(2)], 3)
    return Executable([f, main], constants=[weight], primitive_names=["add"],
                      primitive_attrs={0: {"k": "v"}}).save()[0]


FUZZ_CODE = fuzz_target()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, len(FUZZ_CODE) - 1), st.integers(0, 7)), max_size=4),
    st.integers(0, len(FUZZ_CODE)),
    st.binary(max_size=16),
)
def test_fuzzed_executables_only_raise_tvm_error(flips, cut, garbage):
    data = bytearray(FUZZ_CODE)
    for position, bit in flips:
        data[position] ^= 1 << bit
    data = bytes(data[:cut]) + garbage
    try:
        exe = Executable.load_exec(data)
    except TVMError:
        return
    # Whatever loaded passed verification, so building a VM on it must be safe too.
    VirtualMachine(exe, kiln.cpu(0)) if not exe.primitive_names else None


def test_late_bound_constants_round_trip(kernels, tmp_path, rng):
    exe = program_with_constants(kernels)
    path = str(tmp_path / "late.params")
    exe.move_late_bound_consts(path, byte_limit=24)       # both constants are 24 bytes
    code, lib = exe.save()
    assert struct.pack("<I", 1) + string("const_0") in code
    loaded = Executable.load_exec(code, lib)
    assert loaded.unbound_constants() == [0, 1]
    with pytest.raises(TVMError, match="late-bound"):
        VirtualMachine(loaded, kiln.cpu(0))
    loaded.load_late_bound_consts(path)
    x = rng.standard_normal((2, 3), dtype="float32")
    expected = x * np.arange(6, dtype="float32").reshape(2, 3) + 0.5
    np.testing.assert_allclose(VirtualMachine(loaded, kiln.cpu(0)).run(x).numpy(), expected,
                               rtol=1e-6)


def test_late_bound_file_missing_a_constant(kernels, tmp_path):
    exe = program_with_constants(kernels)
    exe.move_late_bound_consts(str(tmp_path / "all.params"), byte_limit=1)
    other = program_with_constants(kernels)
    other.move_late_bound_consts(str(tmp_path / "none.params"), byte_limit=1 << 30)
    with pytest.raises(TVMError, match="'const_0' is missing"):
        exe.load_late_bound_consts(str(tmp_path / "none.params"))
