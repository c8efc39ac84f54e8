"""ONNX node-suite cases on the compiled path a user takes for control-flow models
(``relay.vm.compile`` at opt_level 3 for llvm, run on the VM), compared with ONNX's expected
outputs at ONNX's tolerances. Every case here once gave a wrong answer on that path while the
interpreter was right; the full suite runs in ``benchmarks/onnx_conformance.py``."""

from __future__ import annotations

import pytest
from harness import node_cases, run_kiln

ONCE_WRONG_ON_THE_VM = [
    # dyn.nn.pad (pads given at run time) ignored edge/reflect and padded with zeros
    "test_edge_pad", "test_reflect_pad",
    # float16 matmul/sum/softmax accumulated in float16 (NumPy and ORT accumulate in float32)
    "test_attention_4d_fp16", "test_attention_4d_fp16_expanded", "test_attention_4d_causal_fp16",
    "test_attention_4d_gqa_causal_nonpad_decode_fp16",
    "test_attention_4d_gqa_with_past_and_present_fp16_expanded",
]


@pytest.fixture(scope="module")
def cases_by_name() -> dict:
    return {case.name: case for case in node_cases()}


@pytest.mark.parametrize("name", ONCE_WRONG_ON_THE_VM)
def test_node_case_passes_on_the_vm(cases_by_name, name):
    outcome = run_kiln(cases_by_name[name], "vm")
    assert outcome.status == "pass", outcome.reason
