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
    # float floor_mod was x - floor(x / y) * y (NaN for infinite divisors, +0 for negative ones)
    "test_mod_float_edge_cases_fmod_0_float16", "test_mod_float_edge_cases_fmod_0_float64",
    # shifts by negative or too-wide counts were LLVM poison
    "test_bitshift_left_int32_negative_shift", "test_bitshift_left_int32_shift_ge_width",
    # LpNormalization of an all-zero slice is 0, not 0 / 0
    "test_l2normalization_axis_0",
    # SpaceToDepth's CRD mode (opset 25) was converted as DCR
    "test_spacetodepth_crd_mode_example",
    # float16 Conv accumulated in float16
    "test_causal_conv_with_state_silu_fp16_expanded",
]


# cases that once raised: ops kiln converts through their ONNX function bodies
# (kiln/relay/frontend/onnx_functions.py); reductions over an empty axis (reshaping an empty
# tensor divided by its zero extent)
ONCE_UNSUPPORTED = [
    "test_causal_conv_with_state_basic", "test_linear_attention_delta",
    "test_center_crop_pad_crop_and_pad", "test_swiglu_alpha", "test_flexattention_causal_mask",
    "test_linear_attention_gated",
    "test_reduce_sum_empty_set", "test_reduce_log_sum_exp_empty_set_expanded",
    "test_reduce_max_empty_set_bool",
    # DFT as products with constant cosine/sine matrices
    "test_dft_opset19", "test_dft_rfft_opset19", "test_dft_irfft_opset19",
    # GridSample and Det as compositions of Relay ops
    "test_gridsample_reflection_padding", "test_gridsample_volumetric_bilinear_align_corners_1",
    "test_det_nd",
]

# refused with a clear error, never a guess: a random training-mode mask cannot be reproduced;
# Resize's antialias filter is not implemented; a downscale whose output size is not exact maps
# coordinates through ONNX's scale, which Relay's resize (size ratio) cannot express
REFUSED_ON_EVERY_EXECUTOR = {
    "test_training_dropout": "training", "test_training_dropout_mask": "training",
    "test_resize_downsample_scales_linear_antialias": "antialias",
    "test_resize_downsample_sizes_cubic_antialias": "antialias",
    "test_resize_downsample_scales_cubic_A_n0p5_exclude_outside": "negative",
}


@pytest.fixture(scope="module")
def cases_by_name() -> dict:
    return {case.name: case for case in node_cases()}


@pytest.mark.parametrize("name", ONCE_WRONG_ON_THE_VM + ONCE_UNSUPPORTED)
def test_node_case_passes_on_the_vm(cases_by_name, name):
    outcome = run_kiln(cases_by_name[name], "vm")
    assert outcome.status == "pass", outcome.reason


@pytest.mark.parametrize("executor", ["vm", "interpreter"])
@pytest.mark.parametrize("name", sorted(REFUSED_ON_EVERY_EXECUTOR))
def test_unreproducible_case_is_refused_not_guessed(cases_by_name, name, executor):
    outcome = run_kiln(cases_by_name[name], executor)
    assert outcome.status == "error", outcome
    assert REFUSED_ON_EVERY_EXECUTOR[name] in outcome.reason
