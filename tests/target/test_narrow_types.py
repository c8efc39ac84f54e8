"""bfloat16, the 8-bit floats and the sub-byte integers end to end: Relay casts and arithmetic
compiled for c and llvm (LegalizeNarrowTypes + the C helpers), run on the graph executor and
the VM, and the interpreter, against ml_dtypes and ONNX's ``saturate_cast`` (the oracles of
ONNX's own Cast tests)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.testing.executors import ExecutorConfig, run_interpreter, run_on_executors
from kiln.runtime.error import TVMError

ml_dtypes = pytest.importorskip("ml_dtypes")
saturate_cast = pytest.importorskip("onnx.numpy_helper").saturate_cast

FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]
SUB_BYTE = ["int4", "uint4", "int2", "uint2"]
NARROW = FLOAT8 + ["bfloat16"] + SUB_BYTE
# every rounding regime: ties to even, subnormals of each format, the overflow thresholds
# (464 / 248 / 61440), signed zero, NaN and infinities, values that wrap a sub-byte integer
EDGES = np.array([0.0, -0.0, 1 + 2 ** -4, 1 + 3 * 2 ** -4, 0.3, -0.7, 9.7, -9.2, 15.5, -8.5,
                  2 ** -9, 3 * 2 ** -10, 2 ** -17, 2 ** -8 + 2 ** -20, 1e-7, 240, 247.9, 248,
                  448, 463.9, 464, 465, 57344, 61439, 61440, 1e6, -1e6, 3.3e38, np.inf,
                  -np.inf, np.nan], "float32")


def ml(name: str):
    return np.dtype(getattr(ml_dtypes, name))


def oracle_cast(x: np.ndarray, name: str) -> np.ndarray:
    """ONNX Cast (saturate=1) as ONNX's reference computes it."""
    return saturate_cast(x, ml(name)) if name in FLOAT8 else x.astype(ml(name))


def cast_program():
    """main(x: float32, i: int32, h: bfloat16) -> every conversion the tests check."""
    x = relay.var("x", shape=EDGES.shape)
    i = relay.var("i", shape=(6,), dtype="int32")
    h = relay.var("h", shape=(4,), dtype="bfloat16")
    outs = []
    for name in NARROW:
        narrow = relay.cast(x, name)
        outs += [narrow, relay.cast(narrow, "float32")]
    outs.append(relay.cast(relay.cast(x, "float8_e5m2"), "float8_e4m3fn"))  # via float32
    outs.append(relay.cast(relay.cast(i, "int4"), "int8"))
    outs.append(relay.cast(relay.cast(x, "uint4"), "float16"))
    outs.append(relay.cast(i, "float8_e4m3fn"))
    outs.append(relay.nn.relu(relay.multiply(h, h) + h))  # arithmetic computes in float32
    return kiln.IRModule.from_expr(relay.Function([x, i, h], relay.Tuple(outs)))


INTS = np.array([20, -9, 7, -8, 100, 1000], "int32")
HALVES = np.array([1.5, -2.25, 300.0, 0.1], "float32").astype(ml("bfloat16"))


def expected() -> list[np.ndarray]:
    outs = []
    for name in NARROW:
        narrow = oracle_cast(EDGES, name)
        outs += [narrow, narrow.astype("float32")]
    outs.append(oracle_cast(oracle_cast(EDGES, "float8_e5m2").astype("float32"),
                            "float8_e4m3fn"))
    outs.append(INTS.astype(ml("int4")).astype("int8"))
    outs.append(EDGES.astype(ml("uint4")).astype("float16"))
    outs.append(oracle_cast(INTS.astype("float32"), "float8_e4m3fn"))
    h = HALVES.astype("float32")
    square = (h * h).astype(ml("bfloat16")).astype("float32")
    outs.append(np.maximum((square + h).astype(ml("bfloat16")).astype("float32"), 0).astype(
        ml("bfloat16")))
    return outs


def assert_bits_equal(got: list[np.ndarray], want: list[np.ndarray], what: str) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"{what}: output {k} is {g.dtype}, expected {w.dtype}"
        # equal as values (NaN == NaN), and as bits where the value is not NaN (-0 vs +0)
        gv, wv = g.astype("float64"), w.astype("float64")
        np.testing.assert_array_equal(gv, wv, err_msg=f"{what}: output {k}")
        finite = ~np.isnan(wv)
        np.testing.assert_array_equal(np.signbit(gv[finite]), np.signbit(wv[finite]),
                                      err_msg=f"{what}: output {k} (sign of zero)")


def test_the_interpreter_casts_as_onnx_does():
    got = run_interpreter(cast_program(), [EDGES, INTS, HALVES])
    assert_bits_equal(got, expected(), "interpreter")


@pytest.mark.parametrize("target", ["c", "llvm"])
def test_compiled_casts_match_onnx_on_graph_and_vm(target):
    configs = [ExecutorConfig("graph", 3, "inputs"), ExecutorConfig("vm", 0, "inputs")]
    results = run_on_executors(cast_program(), [EDGES, INTS, HALVES], configs=configs,
                               target=target)
    for config, got in results.items():
        assert_bits_equal(got, expected(), f"{target}, {config}")


def test_narrow_tensors_round_trip_through_ndarray_and_params_blob():
    arrays = {name: kiln.nd.array(oracle_cast(EDGES, name)) for name in NARROW}
    loaded = kiln.runtime.load_param_dict(kiln.runtime.save_param_dict(arrays))
    for name, array in arrays.items():
        assert str(loaded[name].dtype) == name
        assert loaded[name].numpy().tobytes() == array.numpy().tobytes()


def test_a_vectorized_narrow_expression_is_rejected_by_name():
    from kiln import tir
    from kiln.tir.transform.narrow_types import legalize_narrow_types

    a = tir.decl_buffer((8,), "float32", name="A")
    b = tir.decl_buffer((8,), "bfloat16", name="B")
    store = tir.BufferStore(b, tir.Cast("bfloat16x8", tir.BufferLoad(a, [tir.Ramp(0, 1, 8)])),
                            [tir.Ramp(0, 1, 8)])
    func = tir.PrimFunc([a.data, b.data], store, buffer_map={a.data: a, b.data: b})
    with pytest.raises(TVMError, match="bfloat16x8 vector"):
        legalize_narrow_types(func)


@pytest.mark.parametrize("build", [lambda h: relay.sum(h, axis=[0]),
                                   lambda h: relay.nn.dense(relay.reshape(h, (1, 4)),
                                                            relay.reshape(h, (1, 4)))])
def test_accumulating_in_a_narrow_type_is_refused_by_name(build):
    # rounding every step of a sum to bfloat16 would disagree with the interpreter and
    # ONNX's reference (each accumulates in its own order and precision): an error instead
    h = relay.var("h", shape=(4,), dtype="bfloat16")
    mod = kiln.IRModule.from_expr(relay.Function([h], build(h)))
    with pytest.raises(TVMError, match="accumulations in bfloat16.*cast the operands"):
        relay.vm.compile(mod, target="llvm")
