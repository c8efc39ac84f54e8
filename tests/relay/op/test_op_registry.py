"""The operator registry: singletons, attribute maps with priority levels, and coverage of
every Tier-1 operator (type relation + pattern kind registered)."""

from __future__ import annotations

import pickle

import pytest

from kiln.ir.op import Op, register, register_op_attr
from kiln.relay import op as relay_op
from kiln.relay.op import OpPattern
from kiln.runtime.error import TVMError

# The 179 Tier-1 operators of relay-ops.md (embedded: the design docs are not in every checkout).
TIER1 = """
abs acos acosh add all any arange argmax argmin argsort argwhere asin asinh atan atanh
bitwise_and bitwise_not bitwise_or bitwise_xor broadcast_to broadcast_to_like cast cast_like
ceil clip collapse_sum_like collapse_sum_to concatenate contrib_reverse_reshape copy cos cosh
cumprod cumsum divide dyn.broadcast_to dyn.expand_dims dyn.full dyn.image.resize2d dyn.nn.pad
dyn.nn.upsampling dyn.one_hot dyn.ones dyn.reshape dyn.squeeze dyn.strided_slice dyn.tile
dyn.topk dyn.zeros equal erf exp expand_dims fast_erf fast_exp fast_tanh floor floor_divide
floor_mod full full_like gather gather_nd greater greater_equal image.resize1d image.resize2d
isfinite isinf isnan layout_transform left_shift less less_equal log log10 log2 logical_and
logical_not logical_or logical_xor max maximum mean min minimum mod multiply ndarray_size
negative nn.adaptive_avg_pool1d nn.adaptive_avg_pool2d nn.adaptive_max_pool1d
nn.adaptive_max_pool2d nn.avg_pool1d nn.avg_pool2d nn.avg_pool3d nn.batch_flatten
nn.batch_matmul nn.batch_norm nn.bias_add nn.contrib_conv2d_gemm_weight_transform
nn.contrib_conv2d_gemm_without_weight_transform nn.contrib_conv2d_winograd_weight_transform
nn.contrib_conv2d_winograd_without_weight_transform nn.contrib_dense_pack nn.conv1d
nn.conv1d_transpose nn.conv2d nn.conv2d_transpose nn.conv3d nn.dense nn.depth_to_space
nn.dropout nn.fast_softmax nn.global_avg_pool2d nn.global_max_pool2d nn.group_norm
nn.instance_norm nn.l2_normalize nn.layer_norm nn.leaky_relu nn.log_softmax nn.lrn nn.matmul
nn.max_pool1d nn.max_pool2d nn.max_pool3d nn.mirror_pad nn.pad nn.prelu nn.relu nn.softmax
nn.space_to_depth nn.upsampling not_equal one_hot ones ones_like power prod reinterpret repeat
reshape reshape_like reverse right_shift round rsqrt scatter_elements scatter_nd sequence_mask
shape_of sigmoid sign sin sinh slice_like sort split sqrt squeeze stack strided_slice subtract
sum take tan tanh tile topk transpose trunc trunc_divide trunc_mod variance where zeros
zeros_like
""".split()

INTERNAL = """
annotation.stop_fusion annotation.checkpoint annotation.compiler_begin annotation.compiler_end
annotation.cast_hint annotation.bitpack_start annotation.bitpack_end call_lowered debug
device_copy memory.alloc_storage memory.alloc_tensor memory.kill on_device vm.invoke_tvm_op
vm.reshape_tensor vm.shape_of
""".split()


def test_tier1_list_has_179_distinct_names():
    assert len(TIER1) == 179 and len(set(TIER1)) == 179


@pytest.mark.parametrize("name", TIER1 + INTERNAL)
def test_every_op_has_relation_and_pattern(name):
    op = Op.get(name)
    assert op.name == name
    assert callable(op.get_attr("FTVMTypeRelation"))
    assert op.get_attr("TOpPattern") in {int(p) for p in OpPattern}


def test_op_pattern_values_are_tvms():
    assert [int(p) for p in OpPattern] == [0, 1, 2, 3, 4, 7, 8]
    assert OpPattern.kOutEWiseFusable is OpPattern.OUT_ELEMWISE_FUSABLE


# TVM's pattern assignments for a representative op of every family.
EXPECTED_PATTERNS = {
    "exp": 0, "nn.relu": 0, "cast": 0, "zeros": 0, "full_like": 0, "clip": 0,
    "add": 1, "less": 1, "where": 1, "nn.bias_add": 1, "broadcast_to": 1, "expand_dims": 1,
    "repeat": 1, "reshape": 2, "transpose": 2, "concatenate": 2, "take": 2, "split": 2,
    "strided_slice": 2, "layout_transform": 2, "image.resize2d": 2, "nn.pad": 2, "tile": 1,
    "sum": 3, "argmax": 3, "mean": 3, "collapse_sum_like": 3,
    "nn.conv2d": 4, "nn.dense": 4, "nn.batch_matmul": 4, "nn.max_pool2d": 4, "one_hot": 4,
    "nn.batch_norm": 4, "nn.softmax": 4, "sort": 8, "topk": 8, "argwhere": 8, "dyn.topk": 8,
    "shape_of": 8, "scatter_nd": 8, "cumsum": 8, "dyn.reshape": 2, "arange": 8, "nn.layer_norm": 8,
}


@pytest.mark.parametrize("name,pattern", sorted(EXPECTED_PATTERNS.items()))
def test_pattern_matches_tvm(name, pattern):
    assert Op.get(name).get_attr("TOpPattern") == pattern


def test_ops_are_singletons_and_calls_point_at_them():
    from kiln import relay

    x = relay.var("x", shape=(2,))
    assert relay.add(x, x).op is Op.get("add") is relay_op.get("add")


def test_op_survives_pickle_as_the_same_object():
    assert pickle.loads(pickle.dumps(Op.get("nn.conv2d"))) is Op.get("nn.conv2d")


def test_unknown_op_is_a_clear_error():
    with pytest.raises(TVMError, match="Operator no_such_op is not registered"):
        Op.get("no_such_op")


def test_ops_cannot_be_constructed_directly():
    with pytest.raises(TVMError, match="singletons"):
        Op("add")


def test_attribute_priority_levels():
    op = register("test.registry_plevel")
    assert op.get_attr("FTest") is None and not op.has_attr("FTest")
    op.set_attr("FTest", "base", plevel=10)
    op.set_attr("FTest", "ignored", plevel=5)  # lower level: keeps the present value
    assert op.get_attr("FTest") == "base"
    op.set_attr("FTest", "override", plevel=20)
    assert op.get_attr("FTest") == "override"
    with pytest.raises(TVMError, match="same plevel=20"):
        op.set_attr("FTest", "again", plevel=20)
    op.reset_attr("FTest")
    assert not op.has_attr("FTest")


def test_register_op_attr_as_decorator_and_value():
    register("test.registry_decorator")

    @register_op_attr("test.registry_decorator", "FNumpyEval")
    def evaluate(inputs, attrs):
        return inputs[0]

    register_op_attr("test.registry_decorator", "TOpPattern", int(OpPattern.INJECTIVE))
    op = Op.get("test.registry_decorator")
    assert op.get_attr("FNumpyEval") is evaluate
    assert op.get_attr("TOpPattern") == 2


def test_register_helpers_attach_beside_the_op():
    register("test.registry_helpers")
    relay_op.register_shape_func("test.registry_helpers", True, lambda *a: None)
    relay_op.register_stateful("test.registry_helpers", True)
    op = Op.get("test.registry_helpers")
    assert op.get_attr("TShapeDataDependent") is True
    assert callable(op.get_attr("FShapeFunc"))
    assert op.get_attr("TOpIsStateful") is True


def test_injective_schedule_helper_registers_a_schedule():
    register("test.registry_schedule")
    relay_op.register_injective_schedule("test.registry_schedule")
    assert callable(Op.get("test.registry_schedule").get_attr("FTVMSchedule"))


def test_op_description_fields():
    op = Op.get("nn.conv2d")
    assert op.num_inputs == 2
    assert op.attrs_type_key == "relay.attrs.Conv2DAttrs"
    assert Op.get("concatenate").num_inputs == 1
    assert Op.get("debug").num_inputs == 1 and Op.get("memory.alloc_storage").num_inputs == 3
    assert "nn.conv2d" in Op.list_op_names()


def test_attrs_nodes_keyword_defaults_and_errors():
    from kiln.relay.op.op_attrs import Conv2DAttrs, Resize2DAttrs

    attrs = Conv2DAttrs(channels=8)
    assert attrs.type_key == "relay.attrs.Conv2DAttrs"
    assert (attrs.strides, attrs.padding, attrs.groups) == ((1, 1), (0, 0), 1)
    assert attrs["channels"] == 8 and attrs.kernel_layout == "OIHW"
    resize = Resize2DAttrs()
    assert (resize.method, resize.coordinate_transformation_mode, resize.cubic_alpha) == (
        "linear", "half_pixel", -0.5)
    with pytest.raises(TypeError, match="no field"):
        Conv2DAttrs(kernel=3)


def test_calls_round_trip_through_json_with_equal_attrs():
    import kiln as tvm
    from kiln import relay

    x = relay.var("x", shape=(1, 3, 8, 8))
    calls = [relay.nn.conv2d(x, relay.var("w", shape=(4, 3, 3, 3)), padding=1),
             relay.strided_slice(x, [0, None], [1, 2]), relay.sum(x, axis=1),
             relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))]
    for call in calls:
        loaded = tvm.ir.load_json(tvm.ir.save_json(call))
        assert loaded.op is call.op
        assert type(loaded.attrs) is type(call.attrs)
        assert tvm.ir.structural_equal(loaded, call, map_free_vars=True)
        assert tvm.ir.structural_hash(loaded.attrs) == tvm.ir.structural_hash(call.attrs)


# Tier-1 ops whose Python constructor has a different name in TVM.
CONSTRUCTOR_NAMES = {"contrib_reverse_reshape": "reverse_reshape"}


@pytest.mark.parametrize("name", [n for n in TIER1 if not n.startswith("dyn.")])
def test_every_tier1_op_has_a_constructor_in_tvms_namespace(name):
    from kiln import relay

    *path, leaf = name.split(".")
    namespace = relay
    for part in path:
        namespace = getattr(namespace, part)
    assert callable(getattr(namespace, CONSTRUCTOR_NAMES.get(leaf, leaf)))
