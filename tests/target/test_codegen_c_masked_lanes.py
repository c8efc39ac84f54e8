"""A per-lane ``if_then_else`` on target ``c`` evaluates an arm only in the lanes taking it.

Every kernel here has an arm that would fault in its untaken lanes: a gather, a strided read,
a ``Sub(Ramp, Broadcast)`` index, a broadcast scalar load, a nested choice, a Let, a Shuffle,
math on a load past the end (all against ``PROT_NONE`` guard pages), or an integer division
by zero. Each runs on ``c`` and ``llvm`` and is compared with NumPy; the C text is checked
for the fast path (a blend when both arms are provably in bounds).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from test_codegen_llvm_vector_select import PAGE, GuardedPage

import kiln
from kiln import tir
from kiln.runtime.error import TVMError
from kiln.target import Target
from kiln.target.build import build_module

RNG = np.random.default_rng(29)
# the host's C (AVX-512 vectors where the host has them) and AVX2-wide C
TARGETS = ["c", "c -mcpu=core-avx2", "llvm"]
WIDTHS = [4, 8, 16]
N = 48  # three 16-lane vectors
EDGE = 37  # no width divides it: the last vector hangs past the end of a 37-element buffer
F32 = "float32"


def _kernel(params: list[tir.Buffer], out: tir.Buffer, lanes: int, value,
            kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.PrimFunc:
    """``out[i] = value(i, io)`` with ``i = Ramp(lanes * io, 1, lanes)``: the TIR of a
    vectorized loop."""
    io = tir.Var("io", "int32")
    index = tir.Ramp(io * lanes, 1, lanes)
    extent = int(out.shape[0].value) // lanes
    body = tir.For(io, 0, extent, kind, tir.BufferStore(out, value(index, io), [index]))
    return tir.PrimFunc([*params, out], body)


def _f32(value: float) -> tir.PrimExpr:
    return tir.const(value, F32)


def _buffers(dtype: str = F32, **shapes: int) -> list[tir.Buffer]:
    return [tir.decl_buffer((count,), dtype, name=name) for name, count in shapes.items()]


_FLAG = tir.decl_buffer((1,), "int32", name="flag")


def _lane_kernels(lanes: int) -> dict[str, tir.PrimFunc]:
    """Kernels whose untaken lanes would read outside a guarded buffer."""
    E, A = _buffers(E=EDGE, A=N)
    (index,) = _buffers("int32", index=N)
    (S,) = _buffers(S=4)
    (out,) = _buffers(out=N)
    below = tir.Broadcast(tir.IntImm("int32", 3), lanes)

    def reversed_read(i, io):
        # lane k reads E[io*L + L-1-k]: a Shuffle of a contiguous load, guarded per lane
        source = tir.Ramp(io * lanes, 1, lanes)
        picked = tir.Ramp(io * lanes + (lanes - 1), -1, lanes)
        return tir.if_then_else(picked < EDGE, tir.Shuffle(
            [E[source]], [lanes - 1 - k for k in range(lanes)]), _f32(-1))

    return {
        "gather": _kernel([index, A], out, lanes, lambda i, _: tir.if_then_else(
            index[i] >= 0, A[index[i]], _f32(-1))),
        "stride2": _kernel([E], _buffers(out=32)[0], lanes, lambda i, _: tir.if_then_else(
            i * 2 + 1 < EDGE, E[i * 2 + 1], _f32(-1))),
        "shift_back": _kernel([A], out, lanes, lambda i, _: tir.if_then_else(
            i >= 3, A[i - below], _f32(-1))),
        "scalar_load": _kernel([S], out, lanes, lambda i, io: tir.if_then_else(
            i < 4 * lanes, tir.Broadcast(S[io], lanes), _f32(-1))),
        "nested": _kernel([E], out, lanes, lambda i, _: tir.if_then_else(
            i < EDGE, tir.if_then_else(E[i] > _f32(0), E[i], -E[i]), _f32(0))),
        # the inner choice ignores the border: its arms read E only where both choose them
        "nested_parity": _kernel([E], out, lanes, lambda i, _: tir.if_then_else(
            i < EDGE, tir.if_then_else(tir.equal(tir.floormod(i, 2), 0), E[i], -E[i]),
            _f32(0))),
        "nested_stride2": _kernel([E], _buffers(out=32)[0], lanes, lambda i, _: (
            tir.if_then_else(i * 2 + 1 < EDGE, tir.if_then_else(
                tir.equal(tir.floormod(i, 2), 0), E[i * 2 + 1], -E[i * 2 + 1]), _f32(-1)))),
        # a choice of the whole vector (a flag) inside a per-lane one
        "nested_flag": _kernel([E, _FLAG], out, lanes,
                               lambda i, _: tir.if_then_else(i < EDGE, tir.if_then_else(
                                   _FLAG[0] > 0, E[i], -E[i]), _f32(0))),
        "math": _kernel([E], out, lanes, lambda i, _: tir.if_then_else(
            i < EDGE, tir.exp(tir.max(E[i], tir.min(E[i] * _f32(2), _f32(1)))), _f32(0))),
        "reversed": _kernel([E], out, lanes, reversed_read),
    }


def _division_kernels(lanes: int) -> dict[str, tir.PrimFunc]:
    """``if_then_else(den != 0, num <op> den, 7)``: the division must not run where den is 0."""
    num, den, out = _buffers("int32", num=N, den=N, out=N)
    divisions = {"floordiv": tir.floordiv, "floormod": tir.floormod,
                 "truncdiv": tir.truncdiv, "truncmod": tir.truncmod}
    return {name: _kernel([num, den], out, lanes, lambda i, _, op=op: tir.if_then_else(
        tir.not_equal(den[i], 0), op(num[i], den[i]), tir.const(7, "int32")))
        for name, op in divisions.items()}


def _other_kernels() -> dict[str, tir.PrimFunc]:
    E, A, B = _buffers(E=EDGE, A=N, B=N)
    (flags,) = _buffers("bool", flags=EDGE)
    x = tir.Var("x", "float32x8")
    return {
        "let_x8": _kernel([E], _buffers(out=N)[0], 8, lambda i, _: tir.if_then_else(
            i < EDGE, tir.Let(x, E[i], x + x), _f32(-1))),
        "bool_x8": _kernel([flags], _buffers("bool", out=N)[0], 8, lambda i, _: (
            tir.if_then_else(i < EDGE, flags[i], tir.const(True, "bool"))),
            tir.ForKind.PARALLEL),
        "blend_x8": _kernel([A, B], _buffers(out=N)[0], 8, lambda i, _: tir.if_then_else(
            A[i] > B[i], A[i] - B[i], B[i])),
        "padded_2d_x8": _padded_2d(8),
    }


ROWS, COLS = 5, 29  # a 5 x 29 image padded by one on each side, rows of 32 (31 used + 1)


def _padded_2d(lanes: int) -> tir.PrimFunc:
    """The pad stage of a conv: ``out[i, j] = data[i-1, j-1]`` inside the border, else 0."""
    data = tir.decl_buffer((ROWS, COLS), F32, name="data")
    out = tir.decl_buffer((ROWS + 2, 32), F32, name="out")
    i, jo = tir.Var("i", "int32"), tir.Var("jo", "int32")
    j = tir.Ramp(jo * lanes, 1, lanes)
    inside = tir.And(tir.Broadcast(tir.all(i >= 1, i < ROWS + 1), lanes),
                     tir.all(j >= 1, j < COLS + 1))
    value = tir.if_then_else(inside, data[i - 1, tir.Ramp(jo * lanes - 1, 1, lanes)], _f32(0))
    body = tir.For(jo, 0, 32 // lanes, tir.ForKind.SERIAL, tir.BufferStore(out, value, [i, j]))
    return tir.PrimFunc([data, out], tir.For(i, 0, ROWS + 2, tir.ForKind.SERIAL, body))


def _all_kernels() -> dict[str, tir.PrimFunc]:
    funcs = {f"{name}_x{lanes}": func for lanes in WIDTHS
             for name, func in {**_lane_kernels(lanes), **_division_kernels(lanes)}.items()}
    funcs.update(_other_kernels())
    return {name: func.with_attr("global_symbol", name) for name, func in funcs.items()}


@functools.cache
def _module(target: str):
    """The Module of every kernel for ``target``, compiled once on first use."""
    return build_module(_all_kernels(), Target(target))


@pytest.fixture(scope="module")
def modules():
    return _module


@pytest.fixture(scope="module")
def guarded() -> GuardedPage:
    return GuardedPage()


def _call(module, name: str, args: list, out_shape, out_dtype: str) -> np.ndarray:
    out = kiln.nd.empty(out_shape if isinstance(out_shape, tuple) else (out_shape,), out_dtype)
    module[name](*[a if isinstance(a, kiln.nd.NDArray) else kiln.nd.array(a) for a in args],
                 out)
    return out.numpy()


def _normal(count: int) -> np.ndarray:
    return RNG.standard_normal(count).astype(F32)


# -- arms that would read outside a buffer in untaken lanes -------------------------------------

@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_gather_skips_negative_indices(modules, guarded, target, lanes):
    index = RNG.integers(-200, N, N).astype("int32")
    a = _normal(N)
    got = _call(modules(target), f"gather_x{lanes}", [index, guarded.place(a, "start")], N, F32)
    np.testing.assert_array_equal(got, np.where(index >= 0, a[np.maximum(index, 0)], -1))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_strided_read_stops_at_the_end(modules, guarded, target, lanes):
    e = _normal(EDGE)
    got = _call(modules(target), f"stride2_x{lanes}", [guarded.place(e, "end")], 32, F32)
    odd = np.arange(32) * 2 + 1
    np.testing.assert_array_equal(got, np.where(odd < EDGE, e[np.minimum(odd, EDGE - 1)], -1))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_ramp_minus_broadcast_index_reads_nothing_before_the_start(modules, guarded, target,
                                                                   lanes):
    a = _normal(N)
    got = _call(modules(target), f"shift_back_x{lanes}", [guarded.place(a, "start")], N, F32)
    np.testing.assert_array_equal(got, np.concatenate([np.full(3, -1, F32), a[:N - 3]]))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_broadcast_scalar_load_only_in_taken_rows(modules, guarded, target, lanes):
    """``S[io]`` exists for rows 0..3 only; every lane of the later rows takes -1."""
    s = _normal(4)
    got = _call(modules(target), f"scalar_load_x{lanes}", [guarded.place(s, "end")], N, F32)
    rows = np.arange(N) // lanes
    np.testing.assert_array_equal(got, np.where(rows < 4, s[np.minimum(rows, 3)], -1))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_nested_choice_inside_a_guarded_arm(modules, guarded, target, lanes):
    e = _normal(EDGE)
    got = _call(modules(target), f"nested_x{lanes}", [guarded.place(e, "end")], N, F32)
    np.testing.assert_array_equal(got, np.pad(np.abs(e), (0, N - EDGE)))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_inner_choice_reads_only_where_the_outer_one_chooses(modules, guarded, target, lanes):
    """An inner condition true past the border does not make its arms read there: by
    contiguous loads (a blend) and by strided ones (lane by lane). tir.MaskFaultingLanes
    masks the inner arms with the outer mask too (llvm used to read past E here)."""
    e = _normal(EDGE)
    source = guarded.place(e, "end")
    parity = np.where(np.arange(EDGE) % 2 == 0, e, -e)
    got = _call(modules(target), f"nested_parity_x{lanes}", [source], N, F32)
    np.testing.assert_array_equal(got, np.pad(parity, (0, N - EDGE)))
    got = _call(modules(target), f"nested_stride2_x{lanes}", [source], 32, F32)
    k = np.arange(32)
    odd = np.minimum(k * 2 + 1, EDGE - 1)
    want = np.where(k * 2 + 1 < EDGE, np.where(k % 2 == 0, e[odd], -e[odd]), -1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("flag", [1, 0])
@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_whole_vector_choice_inside_a_guarded_arm(modules, guarded, target, lanes, flag):
    """``flag ? E[i] : -E[i]`` under ``i < 37``: whichever arm the flag picks reads only the
    lanes below 37 (tir.MaskFaultingLanes masks the picked arm on every target)."""
    e = _normal(EDGE)
    got = _call(modules(target), f"nested_flag_x{lanes}",
                [guarded.place(e, "end"), np.array([flag], "int32")], N, F32)
    np.testing.assert_array_equal(got, np.pad(e if flag else -e, (0, N - EDGE)))


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_math_on_a_guarded_load(modules, guarded, target, lanes):
    e = _normal(EDGE)
    got = _call(modules(target), f"math_x{lanes}", [guarded.place(e, "end")], N, F32)
    want = np.exp(np.maximum(e, np.minimum(e * 2, 1)))
    np.testing.assert_allclose(got, np.pad(want, (0, N - EDGE)), rtol=2e-6)


@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_shuffle_inside_a_guarded_arm(modules, guarded, target, lanes):
    """Lane k of row io reads E[io*L + L-1-k] (a reversed load): only where that is < 37
    (each source lane of the Shuffle is read under the mask of the lanes picking it)."""
    e = _normal(EDGE)
    got = _call(modules(target), f"reversed_x{lanes}", [guarded.place(e, "end")], N, F32)
    k = np.arange(N)
    picked = k // lanes * lanes + (lanes - 1 - k % lanes)
    np.testing.assert_array_equal(got, np.where(picked < EDGE,
                                                e[np.minimum(picked, EDGE - 1)], -1))


@pytest.mark.parametrize("target", TARGETS)
def test_let_inside_a_guarded_arm(modules, guarded, target):
    e = _normal(EDGE)
    got = _call(modules(target), "let_x8", [guarded.place(e, "end")], N, F32)
    np.testing.assert_array_equal(got, np.concatenate([e + e, np.full(N - EDGE, -1, F32)]))


@pytest.mark.parametrize("target", TARGETS)
def test_bool_lanes_in_a_parallel_loop(modules, guarded, target):
    flags = RNG.random(EDGE) < 0.5
    got = _call(modules(target), "bool_x8", [guarded.place(flags, "end")], N, "bool")
    np.testing.assert_array_equal(got, np.concatenate([flags, np.ones(N - EDGE, bool)]))


@pytest.mark.parametrize("target", TARGETS)
def test_padded_rows_read_nothing_past_the_image(modules, guarded, target):
    """The last row of ``data`` ends at a guard page; the right border of the padded row
    must not read the element after it."""
    x = RNG.standard_normal((ROWS, COLS)).astype(F32)
    image = np.frombuffer(guarded.pages, F32, x.size, 2 * PAGE - x.nbytes).reshape(x.shape)
    image[:] = x
    got = _call(modules(target), "padded_2d_x8", [kiln.nd.from_dlpack(image)],
                (ROWS + 2, 32), F32)
    np.testing.assert_array_equal(got, np.pad(x, ((1, 1), (1, 2))))


# -- integer division in untaken lanes ---------------------------------------------------------

DIVISIONS = {
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    "truncdiv": lambda a, b: np.trunc(a / b).astype("int32"),
    "truncmod": np.fmod,
}


@pytest.mark.parametrize("division", DIVISIONS)
@pytest.mark.parametrize("lanes", WIDTHS)
@pytest.mark.parametrize("target", TARGETS)
def test_no_division_by_zero_in_untaken_lanes(modules, target, lanes, division):
    """A lane dividing by zero would raise SIGFPE and kill the process."""
    num = RNG.integers(-1000, 1000, N).astype("int32")
    den = RNG.integers(-3, 4, N).astype("int32")
    got = _call(modules(target), f"{division}_x{lanes}", [num, den], N, "int32")
    safe = np.where(den != 0, den, 1)
    np.testing.assert_array_equal(got, np.where(den != 0, DIVISIONS[division](num, safe), 7))


# -- the C text ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def c_source(modules) -> str:
    return modules("c").get_source()


def _function_c(source: str, name: str) -> str:
    start = source.index(f"int32_t {name}_unpacked(")
    return source[start:source.index("\n}\n", start)]


def test_in_bounds_arms_stay_a_blend(modules, c_source):
    body = _function_c(c_source, "blend_x8")
    assert "_o[" not in body and "_m[_l]" not in body
    a, b = _normal(N), _normal(N)
    got = _call(modules("c"), "blend_x8", [a, b], N, F32)
    np.testing.assert_array_equal(got, np.where(a > b, a - b, b))


@pytest.mark.parametrize("name, lane_text", [
    ("gather_x8", "A[_i[_l]]"),  # one element per taken lane, not a whole gather
])
def test_faulting_loads_read_only_taken_lanes(c_source, name, lane_text):
    body = _function_c(c_source, name)
    assert "_o[_l] = _m[_l] ?" in body
    assert lane_text in body.split("_o[_l] = _m[_l] ?", 1)[1]


def test_a_division_in_an_arm_divides_by_one_in_untaken_lanes(c_source):
    """tir.MaskFaultingLanes blends the divisor with 1 on the arm's mask: no lane loop."""
    body = _function_c(c_source, "floordiv_x8")
    assert "kiln_floordiv_32(" in body and "_b = 1;" in body and "_o[_l] = _m[_l] ?" not in body


def test_a_scalar_load_in_an_arm_runs_only_if_some_lane_takes_it(c_source):
    body = _function_c(c_source, "scalar_load_x8")
    assert " ? S[io] : " in body and "_o[_l] = _m[_l] ?" not in body


@functools.cache
def _emitted(target: str) -> str:
    from kiln.target.codegen_c import emit_c

    return emit_c(_all_kernels(), Target(target))[0]


@pytest.mark.parametrize("target, register_lanes", [("c -mcpu=core-avx2", 8),
                                                     ("c -mcpu=skylake-avx512", 16)])
@pytest.mark.parametrize("name, lanes", [("padded_2d_x8", 8), ("nested_parity_x16", 16)])
def test_contiguous_loads_past_the_border_are_masked_loads(name, lanes, target,
                                                           register_lanes):
    """Native-width masked loads: a 16-lane choice arrives in two 8-lane parts on AVX2
    (tir.SplitWideVectors runs before tir.MaskFaultingLanes), whole on AVX-512."""
    source = _emitted(target)
    body = _function_c(source, name)
    assert f"kiln_maskload_float32x{min(lanes, register_lanes)}(" in body
    assert "_m[_l]" not in body
    assert "_mm256_maskload_ps(" in source  # the helper uses AVX2 where it is there


def test_lane_loop_inside_an_arm_reads_under_both_masks(c_source):
    """A strided (gather) load in a nested arm: a guarded lane loop whose mask is the inner
    condition and-ed with the outer one."""
    body = _function_c(c_source, "nested_stride2_x8")
    assert "_o[_l] = _m[_l] ?" in body
    mask = body.split("_o[_l] = _m[_l] ?", 1)[0].rsplit("_mv = ", 1)[1]
    assert " & " in mask.split("; int8_t _m[", 1)[0]


@pytest.mark.parametrize("target", TARGETS)
def test_condition_lanes_must_match_the_arms(target):
    A, out = _buffers(A=8, out=8)
    cond = tir.Ramp(0, 1, 8) < 4
    arm = tir.if_then_else(cond, A[tir.Ramp(0, 1, 4)], tir.Broadcast(_f32(0), 4))
    func = tir.PrimFunc([A, out], tir.BufferStore(out, arm, [tir.Ramp(0, 1, 4)]))
    with pytest.raises(TVMError, match="condition has 8 lanes.*4"):
        build_module({"bad": func.with_attr("global_symbol", "bad")}, Target(target))
