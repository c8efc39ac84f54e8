"""Instruction records: TVM's serialized field order, the checksum, decoding errors, listing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc

F32 = (2, 32, 1)

# Serialized fields (after hash and opcode) as listed in TVM's SerializeInstruction table.
TVM_FIELD_ORDER = [
    (bc.Move(src=3, dst=4), [3, 4]),
    (bc.Ret(result=5), [5]),
    (bc.Invoke(func_index=1, args=(7, 8), dst=9), [1, 2, 9, 7, 8]),
    (bc.InvokeClosure(closure=2, args=(3,), dst=4), [2, 1, 4, 3]),
    (bc.InvokePacked(packed_index=6, output_size=1, args=(0, 1, 2)), [6, 3, 1, 0, 1, 2]),
    (bc.AllocTensor(storage=1, offset=2, shape=(3, 4), dtype="float32", dst=5),
     [1, 2, 2, 32, 1, 2, 5, 3, 4]),
    (bc.AllocTensorReg(storage=1, offset=2, shape_register=3, dtype="int64", dst=4),
     [1, 2, 3, 0, 64, 1, 4]),
    (bc.AllocADT(tag=2, datatype_fields=(5, 6, 7), dst=8), [2, 3, 8, 5, 6, 7]),
    (bc.AllocClosure(func_index=3, free_vars=(1,), dst=2), [3, 1, 2, 1]),
    (bc.GetField(object=1, field_index=0, dst=2), [1, 0, 2]),
    (bc.If(test=1, target=2, true_offset=1, false_offset=-4), [1, 2, 1, -4]),
    (bc.LoadConst(const_index=4, device_index=1, dst=2), [4, 1, 2]),
    (bc.Goto(pc_offset=-3), [-3]),
    (bc.GetTag(object=1, dst=2), [1, 2]),
    (bc.LoadConsti(val=-7, dst=2), [-7, 2]),
    (bc.Fatal(), []),
    (bc.AllocStorage(allocation_size=1, alignment=64, dtype_hint="uint8", device_index=0,
                     dst=2), [1, 64, 1, 8, 1, 0, 0, 2]),
    (bc.AllocStorage(allocation_size=1, alignment=64, dtype_hint="float32", device_index=1,
                     dst=2, shape=(5, 6)), [1, 64, 2, 32, 1, 1, 2, 2, 5, 6]),
    (bc.ShapeOf(tensor=1, dst=2), [1, 2]),
    (bc.ReshapeTensor(tensor=1, newshape=2, dst=3), [1, 2, 3]),
    (bc.DeviceCopy(src=1, src_device_index=0, dst_device_index=1, dst=2), [1, 0, 1, 2]),
    (bc.KillRegister(dst=9), [9]),
]


def test_all_21_opcodes_numbered_as_tvm():
    names = ["Move", "Ret", "Invoke", "InvokeClosure", "InvokePacked", "AllocTensor",
             "AllocTensorReg", "AllocADT", "AllocClosure", "GetField", "If", "LoadConst", "Goto",
             "GetTag", "LoadConsti", "Fatal", "AllocStorage", "ShapeOf", "ReshapeTensor",
             "DeviceCopy", "KillRegister"]
    assert [op.name for op in bc.Opcode] == names
    assert [int(op) for op in bc.Opcode] == list(range(21))
    assert {type(i) for i, _ in TVM_FIELD_ORDER} == set(bc.INSTRUCTION_CLASSES.values())


@pytest.mark.parametrize("instr, fields", TVM_FIELD_ORDER, ids=lambda v: type(v).__name__)
def test_serialized_field_order_matches_tvm(instr, fields):
    assert list(instr.fields()) == fields
    assert bc.decode_instruction([int(instr.opcode), *fields]) == instr


def tvm_hash(opcode, fields):
    """HashCombine folded over the fields, in wrapping uint64 arithmetic (NumPy as the oracle)."""
    with np.errstate(over="ignore"):
        key = np.uint64(opcode)
        for v in fields:
            value = np.int64(v).astype(np.uint64)
            key = key ^ (value + np.uint64(0x9E3779B9) + (key << np.uint64(6))
                         + (key >> np.uint64(2)))
    return int(key.astype(np.int64))


@pytest.mark.parametrize("instr, fields", TVM_FIELD_ORDER, ids=lambda v: type(v).__name__)
def test_every_opcode_has_a_listing_line(instr, fields):
    line = bc.format_instruction(instr)
    assert line.split()[0] == instr.opcode.name
    assert all(f"${r}" in line for r in instr.registers())


@pytest.mark.parametrize("instr, fields", TVM_FIELD_ORDER, ids=lambda v: type(v).__name__)
def test_instruction_hash_is_tvm_hash_combine(instr, fields):
    assert bc.instruction_hash(instr.opcode, fields) == tvm_hash(int(instr.opcode), fields)


regs = st.integers(0, 1000)
small = st.integers(-(1 << 40), 1 << 40)
reg_lists = st.lists(regs, max_size=5).map(tuple)
dtypes = st.sampled_from(["float32", "int64", "bool", "uint8", "float16", "int8x4"])
instructions = st.one_of(
    st.builds(bc.Move, regs, regs),
    st.builds(bc.Invoke, regs, reg_lists, regs),
    st.builds(bc.InvokePacked, regs, st.just(0), reg_lists),
    st.builds(bc.AllocTensor, regs, regs, st.lists(st.integers(0, 99), max_size=4), dtypes, regs),
    st.builds(bc.AllocADT, small, reg_lists, regs),
    st.builds(bc.If, regs, regs, small, small),
    st.builds(bc.LoadConsti, small, regs),
    st.builds(bc.AllocStorage, regs, st.integers(1, 4096), dtypes, regs, regs,
              st.lists(st.integers(0, 99), max_size=3)),
)


@given(instructions)
def test_fields_round_trip(instr):
    words = [int(instr.opcode), *instr.fields()]
    assert bc.decode_instruction(words) == instr


@pytest.mark.parametrize("words, message", [
    ([], "empty instruction"),
    ([21], "unknown VM opcode 21"),
    ([-1, 0], "unknown VM opcode -1"),
    ([0, 1], "Move takes 2 fields, got 1"),
    ([2, 0, 3, 1, 5], "Invoke declares 3 trailing operands but has 1"),
    ([2, 0, -1, 1], "declares -1 trailing operands"),
    ([4, 0, 1, 2, 9], "output_size 2 is not within arity 1"),
    ([15, 0], "Fatal takes 0 fields"),
])
def test_malformed_instructions_raise_tvm_error(words, message):
    with pytest.raises(TVMError, match=message):
        bc.decode_instruction(words)


def test_listing_format():
    listing = bc.disassemble(
        "f", ["x", "y"],
        [bc.LoadConsti(1, 2), bc.If(0, 2, 1, 3), bc.InvokePacked(0, 1, (0, 1, 3)), bc.Goto(2),
         bc.Invoke(1, (0,), 3), bc.Ret(3)],
        4, {"functions": ["f", "g"], "primitives": ["add"]},
    )
    assert listing.splitlines() == [
        "fn @f(%x, %y) -> registers: 4, instructions: 6",
        "       0 LoadConsti     $2 <- 1",
        "       1 If             $0 == $2 ? +1 : +3  -> 2 / 4",
        "  >>   2 InvokePacked   packed 0 (add) in=[$0, $1] out=[$3]",
        "       3 Goto           +2  -> 5",
        "  >>   4 Invoke         $3 <- func 1 (g) [$0]",
        "  >>   5 Ret            $3",
    ]


def test_dtype_operands_accept_strings_and_print_back():
    instr = bc.AllocTensor(0, 1, (2,), "bool", 3)
    assert instr.dtype == (1, 1, 1) and bc.dtype_str(instr.dtype) == "bool"
    assert bc.dtype_str(bc.normalize_dtype("int8x4")) == "int8x4"
    with pytest.raises(TVMError, match="unknown dtype string"):
        bc.AllocTensor(0, 1, (2,), "floaty", 3)
