"""A curated fast subset of ONNX's backend node tests (one or two cases per op type kiln
converts), run through from_onnx + the reference interpreter; the full suite runs in
``benchmarks/onnx_conformance.py``."""

from __future__ import annotations

import pytest
from harness import node_cases, run_kiln

CURATED_CASES = [
    "test_abs", "test_acos", "test_acos_example", "test_acosh", "test_acosh_example", "test_add",
    "test_add_bcast", "test_and2d", "test_and3d", "test_argmax_default_axis_example",
    "test_argmax_default_axis_example_select_last_index", "test_argmin_default_axis_example",
    "test_argmin_default_axis_example_select_last_index", "test_asin", "test_asin_example",
    "test_asinh", "test_asinh_example", "test_atan", "test_atan_example", "test_atanh",
    "test_atanh_example", "test_attention_23_boolmask_fullymasked_row_nan_robustness",
    "test_attention_23_fullymasked_qk_matmul_output_mode3_zero", "test_averagepool_1d_default",
    "test_averagepool_2d_ceil", "test_batchnorm_epsilon", "test_batchnorm_epsilon_training_mode",
    "test_bitshift_left_int16", "test_bitshift_left_int32", "test_bitwise_and_i16_3d",
    "test_bitwise_and_i32_2d", "test_bitwise_not_2d", "test_bitwise_not_3d",
    "test_bitwise_or_i16_4d", "test_bitwise_or_i32_2d", "test_bitwise_xor_i16_3d",
    "test_bitwise_xor_i32_2d", "test_blackmanwindow", "test_blackmanwindow_symmetric",
    "test_cast_DOUBLE_to_FLOAT", "test_cast_DOUBLE_to_FLOAT16", "test_castlike_DOUBLE_to_FLOAT",
    "test_castlike_DOUBLE_to_FLOAT16", "test_ceil", "test_ceil_example", "test_celu",
    "test_celu_float16", "test_clip", "test_clip_default_inbounds", "test_concat_1d_axis_0",
    "test_concat_1d_axis_negative_1", "test_constant", "test_elu_default_expanded_ver18",
    "test_elu_example_expanded_ver18", "test_constantofshape_float_ones",
    "test_constantofshape_int_shape_zero", "test_basic_conv_with_padding",
    "test_basic_conv_without_padding", "test_convtranspose", "test_convtranspose_1d", "test_cos",
    "test_cos_example", "test_cosh", "test_cosh_example", "test_depthtospace_crd_mode_example",
    "test_depthtospace_example", "test_dequantizelinear", "test_dequantizelinear_axis", "test_div",
    "test_div_bcast", "test_dropout_default", "test_dropout_default_mask",
    "test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
    "test_einsum_batch_diagonal", "test_einsum_batch_matmul", "test_elu", "test_elu_default",
    "test_equal", "test_equal_bcast", "test_erf", "test_exp", "test_exp_example",
    "test_softplus_example_expanded_ver18", "test_softplus_expanded_ver18",
    "test_expand_dim_changed", "test_expand_dim_unchanged",
    "test_eyelike_populate_off_main_diagonal", "test_eyelike_with_dtype", "test_flatten_axis0",
    "test_flatten_axis1", "test_floor", "test_floor_example", "test_gru_batchwise",
    "test_gru_bidirectional", "test_gather_0", "test_gather_1", "test_gather_elements_0",
    "test_gather_elements_1", "test_gathernd_example_float32", "test_gathernd_example_int32",
    "test_gelu_default_1", "test_gelu_default_2", "test_gemm_all_attributes", "test_gemm_alpha",
    "test_globalaveragepool", "test_globalaveragepool_precomputed", "test_globalmaxpool",
    "test_globalmaxpool_precomputed", "test_greater", "test_greater_bcast", "test_greater_equal",
    "test_greater_equal_bcast", "test_group_normalization_epsilon",
    "test_group_normalization_example", "test_hammingwindow", "test_hammingwindow_symmetric",
    "test_hannwindow", "test_hannwindow_symmetric", "test_hardsigmoid", "test_hardsigmoid_default",
    "test_hardswish", "test_hardmax_axis_0", "test_identity", "test_if",
    "test_instancenorm_epsilon", "test_isinf", "test_isnan", "test_lrn", "test_lstm_batchwise",
    "test_layer_normalization_2d_axis0", "test_leakyrelu", "test_less", "test_less_equal",
    "test_log", "test_logsoftmax_axis_0", "test_l1normalization_axis_0", "test_matmul_1d_3d",
    "test_max_example", "test_maxpool_1d_default", "test_mean_example", "test_mvn",
    "test_min_example", "test_mish", "test_mod_broadcast", "test_mul", "test_neg",
    "test_nllloss_NC", "test_nonzero_example", "test_not_2d", "test_or2d", "test_prelu_broadcast",
    "test_constant_pad", "test_pow", "test_quantizelinear", "test_rms_normalization_2d_axis0",
    "test_rnn_seq_length", "test_range_float16_type_positive_delta", "test_reciprocal",
    "test_reduce_max_default_axes_keepdim_example",
    "test_reduce_min_default_axes_keepdims_example",
    "test_reduce_prod_default_axes_keepdims_example", "test_relu", "test_reshape_extended_dims",
    "test_round", "test_scan9_multi_state",
    "test_scatter_with_axis", "test_scatter_elements_with_axis", "test_scatternd", "test_selu",
    "test_shape", "test_flexattention_causal_mask_expanded_ver26", "test_shrink_hard",
    "test_sigmoid", "test_sign", "test_sin", "test_sinh", "test_size", "test_slice_default_axes",
    "test_softmax_axis_0", "test_sce_NCd1_mean_weight_negative_ii", "test_softplus",
    "test_softsign", "test_spacetodepth", "test_split_1d_uneven_split_opset18", "test_sqrt",
    "test_sub", "test_sum_example", "test_tan", "test_tanh", "test_thresholdedrelu", "test_tile",
    "test_top_k", "test_transpose_all_permutations_0", "test_tril", "test_upsample_nearest",
    "test_where_example", "test_xor2d",
]


@pytest.fixture(scope="module")
def cases_by_name() -> dict:
    return {case.name: case for case in node_cases()}


@pytest.mark.parametrize("name", CURATED_CASES)
def test_node_case_passes_on_the_interpreter(cases_by_name, name):
    outcome = run_kiln(cases_by_name[name])
    assert outcome.status == "pass", outcome.reason


def test_curated_subset_covers_many_op_types(cases_by_name):
    from harness import op_type_of

    assert len({op_type_of(cases_by_name[n]) for n in CURATED_CASES}) >= 100
