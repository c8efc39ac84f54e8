"""ONNX's Cast / CastLike / QuantizeLinear / DequantizeLinear node cases for bfloat16, the
8-bit floats and int4/uint4/int2/uint2, on the compiled path (relay.vm.compile at opt_level
3 for llvm + the VM) and the interpreter; the types kiln lacks fail with a clear error.
benchmarks/onnx_conformance.py runs all of them."""

from __future__ import annotations

import pytest
from harness import node_cases, run_kiln

pytest.importorskip("ml_dtypes")

# one case per conversion family (the benchmark runs the 154 Cast/CastLike ones)
COMPILED_CASES = [
    "test_cast_FLOAT_to_BFLOAT16", "test_cast_BFLOAT16_to_FLOAT",
    "test_cast_FLOAT_to_FLOAT8E4M3FN", "test_cast_FLOAT16_to_FLOAT8E4M3FNUZ",
    "test_cast_FLOAT_to_FLOAT8E5M2", "test_cast_FLOAT16_to_FLOAT8E5M2FNUZ",
    "test_cast_FLOAT8E4M3FN_to_FLOAT16", "test_cast_FLOAT8E5M2FNUZ_to_FLOAT",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FN", "test_cast_no_saturate_FLOAT16_to_FLOAT8E5M2",
    "test_cast_no_saturate_FLOAT_to_FLOAT8E4M3FNUZ",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2FNUZ",
    "test_cast_FLOAT_to_INT4", "test_cast_FLOAT16_to_UINT4", "test_cast_INT4_to_INT8",
    "test_cast_FLOAT_to_INT2", "test_cast_UINT2_to_FLOAT16",
    "test_castlike_FLOAT_to_FLOAT8E4M3FN_expanded",
    "test_quantizelinear_e4m3fn", "test_quantizelinear_int4", "test_quantizelinear_uint2",
    "test_dequantizelinear_e5m2", "test_dequantizelinear_int4",
]
UNSUPPORTED = {"test_cast_FLOAT_to_FLOAT4E2M1": "FLOAT4E2M1",
               "test_cast_e8m0_FLOAT_to_FLOAT8E8M0": "FLOAT8E8M0"}


@pytest.fixture(scope="module")
def cases_by_name() -> dict:
    return {case.name: case for case in node_cases()}


@pytest.mark.parametrize("name", COMPILED_CASES)
def test_narrow_type_case_passes_compiled_and_interpreted(cases_by_name, name):
    for executor in ("vm", "interpreter"):
        outcome = run_kiln(cases_by_name[name], executor)
        assert outcome.status == "pass", f"{executor}: {outcome.reason}"


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_types_kiln_lacks_are_named_in_the_error(cases_by_name, name):
    outcome = run_kiln(cases_by_name[name], "vm")
    assert outcome.status == "error" and "OpNotImplemented" in outcome.reason
    assert f"ONNX element type {UNSUPPORTED[name]} has no kiln dtype" in outcome.reason
