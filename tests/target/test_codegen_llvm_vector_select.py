"""``tir.if_then_else`` and ``Select`` with a per-lane (vector) condition, on llvm and c.

The kernels are the TIR a vectorized loop produces: the index ``i`` is ``Ramp(L * io, 1, L)``
and each lane picks its arm. Every kernel runs on both targets against NumPy. Arms that would
fault where they are not taken -- a load past either end of a buffer, a gather through
negative indices, an integer division by zero, a broadcast scalar load past the end -- also
run against buffers placed next to ``PROT_NONE`` guard pages, so a single stray read crashes
the test instead of passing silently.
"""

from __future__ import annotations

import ctypes
import mmap
import re
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.runtime.error import TVMError
from kiln.target import Target
from kiln.target.build import build_module

RNG = np.random.default_rng(23)
TARGETS = ["c", "llvm"]
DTYPES = ["float32", "int32", "float16"]
WIDTHS = [4, 8, 16]
N = 48  # three 16-lane vectors: every width divides it
EDGE = 37  # a length no width divides: a last vector hangs past the buffer's end
PAD = 48  # EDGE rounded up to every width
SHIFT = 3
STRIDED = 32  # out[k] = E[2k + 1]: lanes reach far past E's end


# -- kernels -----------------------------------------------------------------------------------

def _kernel(params: list[tir.Buffer], out: tir.Buffer, lanes: int, value,
            kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.PrimFunc:
    """``out[i] = value(i, io)`` over ``out``, ``i = Ramp(lanes * io, 1, lanes)`` (``lanes``
    1: a scalar loop)."""
    io = tir.Var("io", "int32")
    index = tir.Ramp(io * lanes, 1, lanes) if lanes > 1 else io
    extent = int(out.shape[0].value) // lanes
    body = tir.For(io, 0, extent, kind, tir.BufferStore(out, value(index, io), [index]))
    return tir.PrimFunc([*params, out], body)


def _const(value, dtype: str) -> tir.PrimExpr:
    return tir.const(value, dtype)


def _per_dtype_kernels(dtype: str, lanes: int) -> dict[str, tir.PrimFunc]:
    A = tir.decl_buffer((N,), dtype, name="A")
    B = tir.decl_buffer((N,), dtype, name="B")
    E = tir.decl_buffer((EDGE,), dtype, name="E")

    def out(count: int = N) -> tir.Buffer:
        return tir.decl_buffer((count,), dtype, name="out")

    return {
        "lane_index": _kernel([A, B], out(), lanes, lambda i, _: tir.if_then_else(
            tir.equal(tir.floormod(i, 3), 0), A[i], B[i])),
        "data": _kernel([A, B], out(), lanes, lambda i, _: tir.if_then_else(
            A[i] > _const(0, dtype), A[i] * _const(2, dtype), B[i])),
        "select": _kernel([A, B], out(), lanes, lambda i, _: tir.Select(
            A[i] < B[i], A[i] - B[i], B[i])),
        "pad_end": _kernel([E], out(PAD), lanes, lambda i, _: tir.if_then_else(
            i < EDGE, E[i], _const(0, dtype))),
        # (the vectorizer folds i - 3 into the Ramp, so the load stays contiguous)
        "shift": _kernel([A], out(), lanes, lambda i, io: tir.if_then_else(
            i >= SHIFT, A[tir.Ramp(io * lanes - SHIFT, 1, lanes)], _const(-1, dtype))),
    }


def _guard_kernels() -> dict[str, tir.PrimFunc]:
    """float32 kernels whose not-taken arms would fault: gathers, divisions, scalar loads."""
    E = tir.decl_buffer((EDGE,), "float32", name="E")
    A = tir.decl_buffer((N,), "float32", name="A")
    index = tir.decl_buffer((N,), "int32", name="index")
    num = tir.decl_buffer((N,), "int32", name="num")
    den = tir.decl_buffer((N,), "int32", name="den")
    S = tir.decl_buffer((4,), "float32", name="S")
    f32 = tir.decl_buffer((N,), "float32", name="out")
    i32 = tir.decl_buffer((N,), "int32", name="out")
    odd = tir.decl_buffer((STRIDED,), "float32", name="out")
    kernels = {}
    for lanes in WIDTHS:
        kernels[f"stride2_x{lanes}"] = _kernel([E], odd, lanes, lambda i, _: tir.if_then_else(
            i * 2 + 1 < EDGE, E[i * 2 + 1], _const(-1, "float32")))
        kernels[f"indirect_x{lanes}"] = _kernel([index, A], f32, lanes, lambda i, _: (
            tir.if_then_else(index[i] >= 0, A[index[i]], _const(-1, "float32"))))
        kernels[f"divide_x{lanes}"] = _kernel([num, den], i32, lanes, lambda i, _: (
            tir.if_then_else(tir.not_equal(den[i], 0), tir.floordiv(num[i], den[i]),
                             _const(7, "int32"))))
        # all lanes of io >= 4 are false: S[io] must not be read there
        kernels[f"scalar_load_x{lanes}"] = _kernel([S], f32, lanes, lambda i, io, lanes=lanes: (
            tir.if_then_else(i < 4 * lanes, tir.Broadcast(S[io], lanes),
                             _const(-1, "float32"))))
        kernels[f"nested_x{lanes}"] = _kernel(
            [E], tir.decl_buffer((PAD,), "float32", name="out"), lanes,
            lambda i, _: tir.if_then_else(i < EDGE, tir.if_then_else(
                E[i] > _const(0, "float32"), E[i], -E[i]), _const(0, "float32")))
    # bool lanes (stored as bytes) in a parallel loop; an arm binding a Let
    flags = tir.decl_buffer((EDGE,), "bool", name="flags")
    kernels["pad_end_bool_x8"] = _kernel(
        [flags], tir.decl_buffer((PAD,), "bool", name="out"), 8,
        lambda i, _: tir.if_then_else(i < EDGE, flags[i], tir.const(True, "bool")),
        tir.ForKind.PARALLEL)
    x = tir.Var("x", "float32x8")
    kernels["let_arm_x8"] = _kernel(
        [E], tir.decl_buffer((PAD,), "float32", name="out"), 8,
        lambda i, _: tir.if_then_else(i < EDGE, tir.Let(x, E[i], x + x),
                                      _const(-1, "float32")))
    # scalar if_then_else keeps short-circuit semantics: the untaken arm is never evaluated
    kernels["scalar_pad_end"] = _kernel(
        [E], tir.decl_buffer((PAD,), "float32", name="out"), 1,
        lambda i, _: tir.if_then_else(i < EDGE, E[i], _const(0, "float32")))
    kernels["scalar_divide"] = _kernel([num, den], i32, 1, lambda i, _: tir.if_then_else(
        tir.not_equal(den[i], 0), tir.floordiv(num[i], den[i]), _const(7, "int32")))
    return kernels


def _all_kernels() -> dict[str, tir.PrimFunc]:
    funcs = {f"{name}_{dtype}_x{lanes}": func
             for dtype in DTYPES for lanes in WIDTHS
             for name, func in _per_dtype_kernels(dtype, lanes).items()}
    funcs.update(_guard_kernels())
    return {name: func.with_attr("global_symbol", name) for name, func in funcs.items()}


@pytest.fixture(scope="module")
def modules():
    """target -> Module of every kernel, each compiled once, on first use."""
    cache: dict[str, Any] = {}

    def module_for(target: str):
        if target not in cache:
            cache[target] = build_module(_all_kernels(), Target(target))
        return cache[target]

    return module_for


# -- guard pages -------------------------------------------------------------------------------

PAGE = mmap.PAGESIZE
PROT_NONE = 0  # <sys/mman.h>; the mmap module exports only PROT_READ/WRITE/EXEC
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class GuardedPage:
    """One read-write page between two ``PROT_NONE`` pages: an array placed against either
    guard makes any access one element outside it fault."""

    def __init__(self) -> None:
        self.pages = mmap.mmap(-1, 3 * PAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.pages))
        for guard in (base, base + 2 * PAGE):
            assert _libc.mprotect(guard, PAGE, PROT_NONE) == 0, ctypes.get_errno()

    def place(self, values: np.ndarray, edge: str) -> kiln.nd.NDArray:
        """A zero-copy NDArray of ``values`` ending at the upper guard (``edge="end"``) or
        starting at the lower one (``"start"``)."""
        offset = 2 * PAGE - values.nbytes if edge == "end" else PAGE
        view = np.frombuffer(self.pages, values.dtype, values.size, offset)
        view[:] = values
        return kiln.nd.from_dlpack(view)


@pytest.fixture(scope="module")
def guarded() -> GuardedPage:
    return GuardedPage()


def _random(count: int, dtype: str) -> np.ndarray:
    if dtype == "int32":
        return RNG.integers(-50, 50, count).astype(dtype)
    return RNG.standard_normal(count).astype(dtype)


def _call(module, name: str, args: list, out_shape: int, out_dtype: str) -> np.ndarray:
    out = kiln.nd.empty((out_shape,), out_dtype)
    module[name](*[a if isinstance(a, kiln.nd.NDArray) else kiln.nd.array(a) for a in args],
                 out)
    return out.numpy()


# -- lane-wise choices against NumPy -----------------------------------------------------------

# kernel kind -> its NumPy oracle: a per-lane if_then_else on the lane index and on data,
# and a Select with a vector condition
CHOICES = {
    "lane_index": lambda a, b: np.where(np.arange(N) % 3 == 0, a, b),
    "data": lambda a, b: np.where(a > 0, a * a.dtype.type(2), b),
    "select": lambda a, b: np.where(a < b, a - b, b),
}


@pytest.mark.parametrize("kind", CHOICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_lanewise_choice_matches_numpy(modules, target, kind, dtype, lanes):
    a, b = _random(N, dtype), _random(N, dtype)
    got = _call(modules(target), f"{kind}_{dtype}_x{lanes}", [a, b], N, dtype)
    np.testing.assert_array_equal(got, CHOICES[kind](a, b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_padding_past_the_end_reads_nothing_there(modules, target, guarded, dtype, lanes):
    """``if_then_else(i < 37, E[i], 0)`` over 48 lanes with E's last element just before a
    guard page: the lanes past the end are not loaded."""
    module = modules(target)
    e = _random(EDGE, dtype)
    got = _call(module, f"pad_end_{dtype}_x{lanes}", [guarded.place(e, "end")], PAD, dtype)
    np.testing.assert_array_equal(got, np.pad(e, (0, PAD - EDGE)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_shift_reads_nothing_before_the_start(modules, target, guarded, dtype, lanes):
    """``if_then_else(i >= 3, A[i - 3], -1)`` with A's first element just after a guard."""
    module = modules(target)
    a = _random(N, dtype)
    got = _call(module, f"shift_{dtype}_x{lanes}", [guarded.place(a, "start")], N, dtype)
    np.testing.assert_array_equal(got, np.concatenate([np.full(SHIFT, -1, dtype),
                                                       a[:N - SHIFT]]))


# -- arms that would fault in untaken lanes ----------------------------------------------------

@pytest.mark.parametrize("lanes", WIDTHS)
def test_strided_load_past_the_end(modules, guarded, lanes):
    module = modules("llvm")
    e = _random(EDGE, "float32")
    source = guarded.place(e, "end")
    got = _call(module, f"stride2_x{lanes}", [source], STRIDED, "float32")
    odd = np.arange(STRIDED) * 2 + 1
    np.testing.assert_array_equal(got, np.where(odd < EDGE, e[np.minimum(odd, EDGE - 1)], -1))


@pytest.mark.parametrize("lanes", WIDTHS)
def test_gather_through_negative_indices(modules, guarded, lanes):
    """Lanes whose index is negative take -1; their A[index] (before A) is not read."""
    module = modules("llvm")
    index = RNG.integers(-200, N, N).astype("int32")
    a = _random(N, "float32")
    source = guarded.place(a, "start")
    got = _call(module, f"indirect_x{lanes}", [index, source], N, "float32")
    np.testing.assert_array_equal(got, np.where(index >= 0, a[np.maximum(index, 0)], -1))


@pytest.mark.parametrize("target, name", [("llvm", f"divide_x{lanes}") for lanes in WIDTHS]
                         + [(target, "scalar_divide") for target in TARGETS])
def test_division_by_zero_in_untaken_lanes(modules, target, name):
    """A lane dividing by zero would raise SIGFPE: its arm is not evaluated there."""
    module = modules(target)
    num = RNG.integers(-1000, 1000, N).astype("int32")
    den = RNG.integers(-3, 4, N).astype("int32")
    got = _call(module, name, [num, den], N, "int32")
    np.testing.assert_array_equal(got, np.where(den != 0, num // np.where(den, den, 1), 7))


@pytest.mark.parametrize("lanes", WIDTHS)
def test_broadcast_scalar_load_only_when_a_lane_is_taken(modules, guarded, lanes):
    """``S[io]`` (4 elements, against a guard) is needed only while some lane of row io is
    taken; the rows past 4 are all -1."""
    module = modules("llvm")
    s = _random(4, "float32")
    source = guarded.place(s, "end")
    got = _call(module, f"scalar_load_x{lanes}", [source], N, "float32")
    rows = np.arange(N) // lanes
    np.testing.assert_array_equal(got, np.where(rows < 4, s[np.minimum(rows, 3)], -1))


@pytest.mark.parametrize("lanes", WIDTHS)
def test_nested_vector_if_then_else(modules, guarded, lanes):
    """An inner per-lane choice inside an arm guarded by the outer one: the inner
    condition's loads run under the outer mask."""
    module = modules("llvm")
    e = _random(EDGE, "float32")
    source = guarded.place(e, "end")
    got = _call(module, f"nested_x{lanes}", [source], PAD, "float32")
    np.testing.assert_array_equal(got, np.pad(np.abs(e), (0, PAD - EDGE)))


def test_bool_lanes_in_a_parallel_loop(modules, guarded):
    flags = RNG.random(EDGE) < 0.5
    got = _call(modules("llvm"), "pad_end_bool_x8", [guarded.place(flags, "end")], PAD, "bool")
    np.testing.assert_array_equal(got, np.concatenate([flags, np.ones(PAD - EDGE, bool)]))


def test_let_inside_a_masked_arm(modules, guarded):
    e = _random(EDGE, "float32")
    got = _call(modules("llvm"), "let_arm_x8", [guarded.place(e, "end")], PAD, "float32")
    np.testing.assert_array_equal(got, np.concatenate([e + e, np.full(PAD - EDGE, -1, "f4")]))


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_if_then_else_short_circuits(modules, target, guarded):
    """A scalar condition still branches: iterations past the end never load E."""
    module = modules(target)
    e = _random(EDGE, "float32")
    got = _call(module, "scalar_pad_end", [guarded.place(e, "end")], PAD, "float32")
    np.testing.assert_array_equal(got, np.pad(e, (0, PAD - EDGE)))


# -- the LLVM IR -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llvm_ir() -> str:
    from kiln.target.codegen_llvm import emit_llvm

    cg, _, _ = emit_llvm(_all_kernels(), Target("llvm"))
    return str(cg.module)


def _function_ir(ir_text: str, name: str) -> str:
    start = ir_text.index(f'@"{name}_unpacked"(')
    return ir_text[start:ir_text.index("\n}\n", start)]


def test_in_bounds_arms_are_a_plain_blend(llvm_ir):
    """Both arms provably in bounds: two vector loads and a select, nothing masked."""
    body = _function_ir(llvm_ir, "lane_index_float32_x8")
    assert re.search(r"select\s+<8 x i1> %\S+, <8 x float> %\S+, <8 x float> %", body)
    assert "masked" not in body and "any_lane" not in body


@pytest.mark.parametrize("name, intrinsic", [
    ("pad_end_float32_x8", "llvm.masked.load.v8f32.p0"),
    ("shift_int32_x16", "llvm.masked.load.v16i32.p0"),
    ("indirect_x8", "llvm.masked.gather.v8f32.v8p0"),
    ("stride2_x4", "llvm.masked.gather.v4f32.v4p0"),
])
def test_loads_not_proved_in_bounds_are_masked(llvm_ir, name, intrinsic):
    assert intrinsic in _function_ir(llvm_ir, name)


def test_scalar_condition_branches(llvm_ir):
    body = _function_ir(llvm_ir, "scalar_pad_end")
    assert "br i1" in body and "masked" not in body


def test_condition_lanes_must_match_the_arms():
    A = tir.decl_buffer((8,), "float32", name="A")
    out = tir.decl_buffer((8,), "float32", name="out")
    cond = tir.Ramp(0, 1, 8) < 4
    arm = tir.if_then_else(cond, A[tir.Ramp(0, 1, 4)], tir.Broadcast(_const(0, "float32"), 4))
    func = tir.PrimFunc([A, out], tir.BufferStore(out, arm, [tir.Ramp(0, 1, 4)]))
    with pytest.raises(TVMError, match="condition has 8 lanes.*4"):
        build_module({"bad": func.with_attr("global_symbol", "bad")}, Target("llvm"))
