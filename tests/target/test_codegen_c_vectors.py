"""Vector code from target ``c``: bool masks, selects, padding guards, wide vectors.

Each kernel is built for ``c`` (the host's vector width: AVX-512 where the host has it), AVX2
``c`` and ``llvm`` and compared with NumPy. The C text is checked for the shapes that GCC
rejects or lowers badly (bool vector typedefs, per-lane arrays, vectors wider than a
register).
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te, tir

RNG = np.random.default_rng(7)
TARGETS = ["c", "c -mcpu=core-avx2", "llvm"]
N = 96  # six 16-lane vectors: every lane count below divides it


def _register_lanes(target: str) -> int:
    """float32 lanes of a vector register of C target ``target``."""
    from kiln.target import Target
    from kiln.target.codegen_c import native_vector_bits

    return native_vector_bits(Target(target)) // 32


def _vectorized(out: te.Tensor, lanes: int):
    sch = te.create_schedule(out.op)
    axis = out.op.axis[-1]
    _, inner = sch[out].split(axis, factor=lanes)
    sch[out].vectorize(inner)
    return sch


def _run(mod, name: str, arrays: list[np.ndarray], out_shape, out_dtype) -> np.ndarray:
    out = kiln.nd.empty(out_shape, out_dtype)
    mod[name](*[kiln.nd.array(a) for a in arrays], out)
    return out.numpy()


def _random(shape, dtype: str) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if dtype.startswith("int"):
        return RNG.integers(-100, 100, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int32", "float64"])
def test_select_on_bool_buffer(target, lanes, dtype):
    """A vector condition read from a bool buffer picks between two vectors."""
    mask = te.placeholder((N,), "bool", name="mask")
    a = te.placeholder((N,), dtype, name="a")
    b = te.placeholder((N,), dtype, name="b")
    out = te.compute((N,), lambda i: tir.Select(mask[i], a[i], b[i]), name="out")
    mod = kiln.build(_vectorized(out, lanes), [mask, a, b, out], target=target, name="sel")
    if target.startswith("c"):
        assert "vector_size(1)" not in mod.get_source()
        if lanes > _register_lanes(target) and dtype in ("float32", "int32"):
            # two AVX2 parts per vector
            uses = [line for line in mod.get_source().splitlines()
                    if f"{dtype}x16" in line and not line.startswith("typedef")]
            assert uses == []
    arrays = [_random((N,), "bool"), _random((N,), dtype), _random((N,), dtype)]
    got = _run(mod, "sel", arrays, (N,), dtype)
    np.testing.assert_array_equal(got, np.where(*arrays))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_select_on_comparison_of_other_width(target, lanes):
    """An int8 comparison chooses float32 lanes (mask widened), combined with and/or/not."""
    key = te.placeholder((N,), "int8", name="key")
    flag = te.placeholder((N,), "bool", name="flag")
    a = te.placeholder((N,), "float32", name="a")

    def rule(i):
        cond = tir.Or(tir.And(key[i] > tir.const(0, "int8"), flag[i]),
                      tir.Not(key[i] > tir.const(-50, "int8")))
        return tir.Select(cond, a[i], tir.const(-1.0, "float32"))

    out = te.compute((N,), rule, name="out")
    mod = kiln.build(_vectorized(out, lanes), [key, flag, a, out], target=target, name="sel")
    k, f, x = _random((N,), "int8"), _random((N,), "bool"), _random((N,), "float32")
    got = _run(mod, "sel", [k, f, x], (N,), "float32")
    np.testing.assert_array_equal(got, np.where(((k > 0) & f) | ~(k > -50), x, -1.0))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [8, 16])
def test_bool_vector_store_and_cast(target, lanes):
    """Comparisons stored to a bool buffer hold 0/1 bytes; bool vectors cast to float."""
    a = te.placeholder((N,), "float32", name="a")
    flag = te.placeholder((N,), "bool", name="flag")
    less = te.compute((N,), lambda i: tir.And(a[i] < tir.const(0.5, "float32"), flag[i]),
                      name="less")
    mod = kiln.build(_vectorized(less, lanes), [a, flag, less], target=target, name="less")
    x, f = _random((N,), "float32"), _random((N,), "bool")
    got = _run(mod, "less", [x, f], (N,), "bool")
    np.testing.assert_array_equal(got, (x < 0.5) & f)
    as_float = te.compute((N,), lambda i: flag[i].astype("float32") + a[i], name="as_float")
    mod = kiln.build(_vectorized(as_float, lanes), [flag, a, as_float], target=target,
                     name="as_float")
    got = _run(mod, "as_float", [f, x], (N,), "float32")
    np.testing.assert_array_equal(got, f.astype("float32") + x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("width", [29, 30, 32])
def test_padded_copy(target, lanes, width):
    """A zero-padded copy (the pad stage of a pool or conv), tails included."""
    rows = 5
    data = te.placeholder((rows, width), "float32", name="data")
    padded = te.compute((rows + 2, width + 2), lambda i, j: tir.if_then_else(
        tir.all(i >= 1, i < rows + 1, j >= 1, j < width + 1), data[i - 1, j - 1],
        tir.const(0.0, "float32")), name="padded")
    mod = kiln.build(_vectorized(padded, lanes), [data, padded], target=target, name="pad")
    x = _random((rows, width), "float32")
    got = _run(mod, "pad", [x], (rows + 2, width + 2), "float32")
    np.testing.assert_array_equal(got, np.pad(x, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_vector_if_then_else_of_in_bounds_loads(target, lanes):
    """A per-lane if_then_else whose arms are in-bounds loads becomes a blend."""
    a = te.placeholder((N,), "float32", name="a")
    b = te.placeholder((N,), "float32", name="b")
    out = te.compute((N,), lambda i: tir.if_then_else(a[i] > b[i], a[i] - b[i], b[i]),
                     name="out")
    mod = kiln.build(_vectorized(out, lanes), [a, b, out], target=target, name="ite")
    x, y = _random((N,), "float32"), _random((N,), "float32")
    got = _run(mod, "ite", [x, y], (N,), "float32")
    np.testing.assert_allclose(got, np.where(x > y, x - y, y), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_fma_block_with_min_max(target, lanes):
    """An FMA block with a clamp, at lane counts below, at and above the AVX2 width."""
    a, b, c = (te.placeholder((4, N), "float32", name=n) for n in "abc")
    out = te.compute((4, N), lambda i, j: tir.max(tir.min(a[i, j] * b[i, j] + c[i, j],
                                                          tir.const(1.0, "float32")),
                                                  tir.const(-1.0, "float32")), name="out")
    mod = kiln.build(_vectorized(out, lanes), [a, b, c, out], target=target, name="fma_block")
    xs = [_random((4, N), "float32") for _ in range(3)]
    got = _run(mod, "fma_block", xs, (4, N), "float32")
    np.testing.assert_allclose(got, np.clip(xs[0] * xs[1] + xs[2], -1, 1), rtol=1e-5,
                               atol=1e-6)


def test_selects_avoid_lane_arrays():
    """Selects on masks are blends: no per-lane ``_o[]`` arrays in the C."""
    mask = te.placeholder((N,), "bool", name="mask")
    a = te.placeholder((N,), "float32", name="a")
    out = te.compute((N,), lambda i: tir.Select(tir.And(mask[i], a[i] > tir.const(
        0.0, "float32")), a[i], tir.const(0.0, "float32")), name="out")
    source = kiln.build(_vectorized(out, 8), [mask, a, out], target="c").get_source()
    assert "_o[" not in source
    assert "uint1x" not in source


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("block", [(4, 16), (8, 8), (2, 32)])
def test_conv1d_register_block(target, block):
    """topi.x86 conv1d with 16/32-lane accumulators: wide vectors are split into parts as wide
    as a register on c (the accumulator tile is an array of 8-float vectors on AVX2, 16-float
    ones on AVX-512), results match NumPy."""
    from kiln import topi
    from kiln.topi.x86 import conv1d as x86_conv1d

    data = te.placeholder((1, 8, 64), name="data")
    weight = te.placeholder((8, 8, 3), name="weight")
    out = topi.nn.conv1d(data, weight, 1, 1)
    sch = x86_conv1d.schedule_conv1d_ncw([out], {"oc_bn": block[0], "tile_ow": block[1]})
    mod = kiln.build(sch, [data, weight, out], target=target, name="conv")
    if target.startswith("c"):
        source = mod.get_source()
        lanes = min(_register_lanes(target), block[1])  # the accumulator runs along ow
        assert f"float32x{lanes} conv1d_local[" in source
        for wider in (16, 32):
            assert wider <= lanes or f"float32x{wider} conv1d_local" not in source
    x, w = _random((1, 8, 64), "float32"), _random((8, 8, 3), "float32")
    got = _run(mod, "conv", [x, w], (1, 8, 64), "float32")
    padded = np.pad(x[0], ((0, 0), (1, 1)))
    windows = np.stack([padded[:, k:k + 64] for k in range(3)], axis=-1)  # c, w, k
    expected = np.einsum("cwk,ock->ow", windows, w)[None]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def _vector_if_then_else_kernel() -> tir.PrimFunc:
    """Hand-built vector if_then_else: out[8i:8i+8] = where(a > b, a - b, b), then a
    guarded shifted read with a scalar condition whose load would fall before ``a`` at
    i == 0."""
    a = tir.decl_buffer((32,), "float32", name="a")
    b = tir.decl_buffer((32,), "float32", name="b")
    out = tir.decl_buffer((2, 32), "float32", name="out")
    i = tir.Var("i", "int32")
    lanes = tir.Ramp(i * 8, 1, 8)
    blend = tir.if_then_else(a[lanes] > b[lanes], a[lanes] - b[lanes], b[lanes])
    shifted = tir.if_then_else(i >= 1, a[tir.Ramp(i * 8 - 8, 1, 8)],
                               tir.Broadcast(tir.const(0.0, "float32"), 8))
    body = tir.stmt_seq(tir.BufferStore(out, blend, [tir.IntImm("int32", 0), lanes]),
                        tir.BufferStore(out, shifted, [tir.IntImm("int32", 1), lanes]))
    return tir.PrimFunc([a, b, out], tir.For(i, 0, 4, tir.ForKind.SERIAL, body))


@pytest.mark.parametrize("target", TARGETS)
def test_vector_if_then_else_blend_and_scalar_guard(target):
    """A per-lane choice between in-bounds loads, then a scalar guard over a load that would
    fall before ``a``: a blend on c (no lane arrays), a vector select on llvm."""
    mod = kiln.build(_vector_if_then_else_kernel(), target=target, name="ite_vec")
    if target.startswith("c"):
        assert "_o[" not in mod.get_source()  # a blend, not lane arrays
    x, y = _random((32,), "float32"), _random((32,), "float32")
    got = _run(mod, "ite_vec", [x, y], (2, 32), "float32")
    np.testing.assert_allclose(got[0], np.where(x > y, x - y, y), rtol=1e-6)
    np.testing.assert_array_equal(got[1], np.concatenate([np.zeros(8, "float32"), x[:24]]))


def test_vector_if_then_else_guarded_lane_loads():
    """A per-lane guard over a load that leaves the buffer at the edges (a padded shift):
    a masked load reads only the lanes inside ``a``."""
    a = tir.decl_buffer((32,), "float32", name="a")
    out = tir.decl_buffer((32,), "float32", name="out")
    i = tir.Var("i", "int32")
    lanes = tir.Ramp(i * 8, 1, 8)
    inside = tir.And(lanes >= tir.Broadcast(tir.IntImm("int32", 3), 8),
                     lanes < tir.Broadcast(tir.IntImm("int32", 35), 8))
    shifted = tir.if_then_else(inside, a[tir.Ramp(i * 8 - 3, 1, 8)],
                               tir.Broadcast(tir.const(-1.0, "float32"), 8))
    func = tir.PrimFunc([a, out], tir.For(i, 0, 4, tir.ForKind.SERIAL,
                                          tir.BufferStore(out, shifted, [lanes])))
    mod = kiln.build(func, target="c", name="shift")
    source = mod.get_source()
    assert "kiln_maskload_float32x8(a + ((i * 8) - 3), " in source
    x = _random((32,), "float32")
    got = _run(mod, "shift", [x], (32,), "float32")
    np.testing.assert_array_equal(got, np.concatenate([np.full(3, -1, "float32"), x[:29]]))
