"""VectorizeLoop turns ``if_then_else`` in a vectorized loop into a per-lane choice.

A condition that depends on the vectorized variable becomes a vector of bool lanes and the
arms vector values; one that does not stays scalar (one arm for all lanes, short-circuit).
The vectorized kernels run on ``c`` and ``llvm`` against NumPy, with the padded input placed
against ``PROT_NONE`` pages so a border lane that read outside it would crash the test.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.runtime.dtype import DataType
from kiln.tir.transform.vectorize import vectorize_stmt

RNG = np.random.default_rng(41)
TARGETS = ["c", "c -mcpu=core-avx2", "llvm"]  # c: the host's vector width
F32 = "float32"


def _vectorized_store(value, lanes: int = 8, extent: int = 16):
    """``B[i] = value(i, A)`` in a loop over ``i`` vectorized by ``lanes``, vectorized."""
    A = tir.decl_buffer((extent,), F32, name="A")
    B = tir.decl_buffer((extent,), F32, name="B")
    io, ii = tir.Var("io", "int32"), tir.Var("ii", "int32")
    i = io * lanes + ii
    inner = tir.For(ii, 0, lanes, tir.ForKind.VECTORIZED, tir.BufferStore(B, value(i, A), [i]))
    loop = tir.For(io, 0, extent // lanes, tir.ForKind.SERIAL, inner)
    return vectorize_stmt(loop).body  # the store inside the remaining io loop


def _lanes_of(expr) -> tuple[int, bool]:
    t = DataType(expr.dtype)
    return t.lanes, t.is_bool


def test_lane_dependent_condition_becomes_bool_lanes():
    store = _vectorized_store(lambda i, A: tir.if_then_else(i < 13, A[i], tir.const(0.0, F32)))
    assert type(store).__name__ == "BufferStore"  # no loop over the lanes is left
    choice = store.value
    assert choice.op == "tir.if_then_else" and DataType(choice.dtype).lanes == 8
    cond, then, other = choice.args
    assert _lanes_of(cond) == (8, True)
    assert type(then).__name__ == "BufferLoad" and type(then.indices[0]).__name__ == "Ramp"
    assert type(other).__name__ == "Broadcast"


def test_condition_without_the_lane_variable_stays_scalar():
    """A flag that is the same in every lane chooses one arm for the whole vector."""
    flag = tir.Var("flag", "bool")
    store = _vectorized_store(lambda i, A: tir.if_then_else(flag, A[i], tir.const(1.0, F32)))
    cond, then, other = store.value.args
    assert cond is flag
    assert DataType(then.dtype).lanes == 8 and DataType(other.dtype).lanes == 8


def test_choice_inside_a_per_lane_choice_keeps_the_loop_serial():
    """(llvm evaluates the inner choice's arms in lanes the outer one does not take.)"""
    flag = tir.Var("flag", "bool")
    for inner in (lambda i, A: tir.if_then_else(A[i] > tir.const(0.0, F32), A[i], -A[i]),
                  lambda i, A: tir.if_then_else(flag, A[i], -A[i])):
        store = _vectorized_store(lambda i, A, inner=inner: tir.if_then_else(
            i < 13, inner(i, A), tir.const(-1.0, F32)))
        assert type(store).__name__ == "For" and store.kind == tir.ForKind.SERIAL


def test_per_lane_choice_inside_a_whole_vector_choice():
    flag = tir.Var("flag", "bool")
    store = _vectorized_store(lambda i, A: tir.if_then_else(
        flag, tir.if_then_else(i < 13, A[i], tir.const(0.0, F32)), tir.const(-1.0, F32)))
    outer = store.value
    assert outer.args[0] is flag and _lanes_of(outer.args[1].args[0]) == (8, True)


@pytest.mark.parametrize("index", [
    lambda i: i * 2 % 16,  # a strided read
    lambda i: 15 - i,  # lanes in reverse
])
def test_gathering_arm_keeps_the_loop_serial(index):
    """A guarded gather ran slower vectorized than as a scalar loop (topi's depthwise input
    packing, on c and llvm): such a loop is left serial."""
    store = _vectorized_store(lambda i, A: tir.if_then_else(
        i < 13, A[index(i)], tir.const(0.0, F32)))
    assert type(store).__name__ == "For" and store.kind == tir.ForKind.SERIAL


def test_choice_without_the_lane_variable_is_left_alone():
    A = tir.decl_buffer((4,), F32, name="A")
    B = tir.decl_buffer((8,), F32, name="B")
    ii, k = tir.Var("ii", "int32"), tir.Var("k", "int32")
    same = tir.if_then_else(k < 2, A[k], tir.const(0.0, F32))
    loop = tir.For(ii, 0, 8, tir.ForKind.VECTORIZED, tir.BufferStore(B, same, [ii]))
    store = vectorize_stmt(loop)
    assert type(store.value).__name__ == "Broadcast" and store.value.value is same


# -- vectorized kernels against NumPy, next to guard pages -------------------------------------

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_KEEP: list[mmap.mmap] = []  # the mappings must outlive the arrays viewing them


def _fenced(values: np.ndarray, at_end: bool) -> kiln.nd.NDArray:
    """``values`` copied into a mapping whose page after (``at_end``) or before it is
    ``PROT_NONE``: a read one element past that edge faults."""
    pages = mmap.mmap(-1, 3 * PAGE)
    _KEEP.append(pages)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
    fence = base + (2 * PAGE if at_end else 0)
    assert _libc.mprotect(fence, PAGE, 0) == 0, ctypes.get_errno()
    start = 2 * PAGE - values.nbytes if at_end else PAGE
    view = np.frombuffer(pages, values.dtype, values.size, start).reshape(values.shape)
    view[:] = values
    return kiln.nd.from_dlpack(view)


def _split_vectorize(tensor: te.Tensor, lanes: int):
    sch = te.create_schedule(tensor.op)
    _, inner = sch[tensor].split(tensor.op.axis[-1], factor=lanes)
    sch[tensor].vectorize(inner)
    return sch


def _padded(rows: int, cols: int):
    data = te.placeholder((rows, cols), F32, name="data")
    out = te.compute((rows + 2, cols + 3), lambda i, j: tir.if_then_else(
        tir.all(i >= 1, i < rows + 1, j >= 1, j < cols + 1), data[i - 1, j - 1],
        tir.const(0.0, F32)), name="padded")
    return data, out


@pytest.mark.parametrize("at_end", [True, False])
@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("target", TARGETS)
def test_padded_copy_reads_only_the_image(target, lanes, at_end):
    """A one-element zero border, rows of 29 + 3 = 32: the left border lane of row 1 is just
    before the image, the right border lanes of the last row just after it."""
    rows, cols = 6, 29
    data, out = _padded(rows, cols)
    mod = kiln.build(_split_vectorize(out, lanes), [data, out], target=target, name="pad")
    x = RNG.standard_normal((rows, cols)).astype(F32)
    result = kiln.nd.empty((rows + 2, cols + 3), F32)
    mod["pad"](_fenced(x, at_end), result)
    np.testing.assert_array_equal(result.numpy(), np.pad(x, ((1, 1), (1, 2))))


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("target", TARGETS)
def test_padded_copy_is_vector_code(target, lanes):
    """The lane loop is gone: llvm reads the image with a masked load, c with its
    masked-load helper, in parts as wide as a register (on AVX2 16 lanes are two 8-lane
    stores)."""
    data, out = _padded(6, 29)
    mod = kiln.build(_split_vectorize(out, lanes), [data, out], target=target, name="pad")
    text = mod.get_source()
    if target == "llvm":
        assert f"llvm.masked.load.v{lanes}f32" in text
        return
    body = text[text.index("int32_t pad_unpacked("):]
    body = body[:body.index("\n}\n")]
    from kiln.target import Target
    from kiln.target.codegen_c import native_vector_bits

    part = min(lanes, native_vector_bits(Target(target)) // 32)
    assert f"kiln_maskload_float32x{part}(" in body and "_o[" not in body
    assert part == 16 or "float32x16" not in body


@pytest.mark.parametrize("lanes", [4, 8])
@pytest.mark.parametrize("target", TARGETS)
def test_guarded_division_by_zero(target, lanes):
    """``b != 0 ? a // b : 0`` per lane: no lane divides by zero (that would be SIGFPE)."""
    n = 64
    a = te.placeholder((n,), "int32", name="a")
    b = te.placeholder((n,), "int32", name="b")
    out = te.compute((n,), lambda i: tir.if_then_else(
        tir.not_equal(b[i], 0), tir.floordiv(a[i], b[i]), tir.const(0, "int32")), name="q")
    mod = kiln.build(_split_vectorize(out, lanes), [a, b, out], target=target, name="q")
    x = RNG.integers(-100, 100, n).astype("int32")
    y = RNG.integers(-2, 3, n).astype("int32")
    result = kiln.nd.empty((n,), "int32")
    mod["q"](kiln.nd.array(x), kiln.nd.array(y), result)
    np.testing.assert_array_equal(result.numpy(), np.where(y != 0, x // np.where(y, y, 1), 0))
