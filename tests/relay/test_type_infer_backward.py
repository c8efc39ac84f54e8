"""InferType derives unannotated parameter types backwards from op attrs and the other inputs.

``relay.var("w")`` without a type, used as the weight of ``nn.dense(x, w, units=16)``, gets
``Tensor[(16, K), dtype]`` — TVM's type relations do the same, which is why TVM's model
zoo (``relay.testing``) annotates only the data. Every expected type below is written by hand
from the op's definition; the error cases check that a conflict names the op.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import relay
from kiln.ir import structural_equal
from kiln.relay.testing import mlp, resnet
from kiln.runtime.error import TypeInferenceError


def param_types(out, *names):
    """Infer ``fn(free vars) { out }`` as a module; the types of the named parameters."""
    func = relay.Function(relay.analysis.free_vars(out), out)
    main = relay.transform.InferType()(kiln.IRModule.from_expr(func))["main"]
    by_name = {p.name_hint: p.checked_type for p in main.params}
    return [by_name[n] for n in names] + [main.checked_type.ret_type]


def tensor(shape, dtype="float32"):
    return relay.TensorType(shape, dtype)


def assert_types(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert structural_equal(got, want), f"{got} != {want}"


# -- matrix products ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_dense_weight_is_units_by_in_features_of_the_data_dtype(dtype):
    x = relay.var("x", shape=(4, 32), dtype=dtype)
    out = relay.nn.dense(x, relay.var("w"), units=16)
    assert_types(param_types(out, "w"), [tensor((16, 32), dtype), tensor((4, 16), dtype)])


def test_dense_weight_on_rank_3_data_uses_the_last_axis():
    out = relay.nn.dense(relay.var("x", shape=(2, 5, 8)), relay.var("w"), units=3)
    assert_types(param_types(out, "w"), [tensor((3, 8)), tensor((2, 5, 3))])


@pytest.mark.parametrize("transpose_a, transpose_b, x_shape, w_shape, out_shape", [
    (False, False, (4, 32), (32, 16), (4, 16)),
    (False, True, (4, 32), (16, 32), (4, 16)),
    (True, False, (32, 4), (32, 16), (4, 16)),
    (True, True, (32, 4), (16, 32), (4, 16)),
])
def test_matmul_weight_follows_both_transposes(transpose_a, transpose_b, x_shape, w_shape,
                                               out_shape):
    out = relay.nn.matmul(relay.var("x", shape=x_shape), relay.var("w"), units=16,
                          transpose_a=transpose_a, transpose_b=transpose_b)
    assert_types(param_types(out, "w"), [tensor(w_shape), tensor(out_shape)])


def test_mlp_chain_infers_every_weight_and_bias():
    x = relay.var("x", shape=(8, 784))
    h = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, relay.var("w1"), units=128),
                                        relay.var("b1")))
    out = relay.nn.bias_add(relay.nn.dense(h, relay.var("w2"), units=10), relay.var("b2"))
    assert_types(param_types(out, "w1", "b1", "w2", "b2"),
                 [tensor((128, 784)), tensor((128,)), tensor((10, 128)), tensor((10,)),
                  tensor((8, 10))])


# -- convolutions ---------------------------------------------------------------------------

def test_conv2d_weight_is_channels_in_per_group_kernel():
    data = relay.var("x", shape=(1, 3, 16, 16))
    out = relay.nn.conv2d(data, relay.var("w"), channels=8, kernel_size=(3, 3), padding=(1, 1))
    assert_types(param_types(out, "w"), [tensor((8, 3, 3, 3)), tensor((1, 8, 16, 16))])


def test_grouped_and_depthwise_conv2d_weights():
    data = relay.var("x", shape=(1, 8, 10, 10))
    grouped = relay.nn.conv2d(data, relay.var("w"), channels=16, kernel_size=(3, 3), groups=4)
    assert_types(param_types(grouped, "w"), [tensor((16, 2, 3, 3)), tensor((1, 16, 8, 8))])
    depthwise = relay.nn.conv2d(data, relay.var("w"), channels=8, kernel_size=(3, 3), groups=8)
    assert_types(param_types(depthwise, "w"), [tensor((8, 1, 3, 3)), tensor((1, 8, 8, 8))])


def test_conv2d_weight_in_nhwc_hwio_layout():
    data = relay.var("x", shape=(1, 16, 16, 3))
    out = relay.nn.conv2d(data, relay.var("w"), channels=8, kernel_size=(5, 3),
                          data_layout="NHWC", kernel_layout="HWIO")
    assert_types(param_types(out, "w"), [tensor((5, 3, 3, 8)), tensor((1, 12, 14, 8))])


def test_conv1d_and_conv3d_weights():
    out1 = relay.nn.conv1d(relay.var("x", shape=(2, 4, 20)), relay.var("w"), channels=6,
                           kernel_size=5)
    assert_types(param_types(out1, "w"), [tensor((6, 4, 5)), tensor((2, 6, 16))])
    out3 = relay.nn.conv3d(relay.var("x", shape=(1, 2, 6, 6, 6)), relay.var("w"), channels=4,
                           kernel_size=(3, 3, 3))
    assert_types(param_types(out3, "w"), [tensor((4, 2, 3, 3, 3)), tensor((1, 4, 4, 4, 4))])


def test_conv2d_transpose_weight_is_in_by_out_per_group():
    data = relay.var("x", shape=(1, 8, 5, 5))
    out = relay.nn.conv2d_transpose(data, relay.var("w"), channels=6, kernel_size=(2, 2),
                                    strides=(2, 2), groups=2)
    # IOHW: (in channels, channels / groups, kh, kw); output (5 - 1) * 2 + 2 = 10
    assert_types(param_types(out, "w"), [tensor((8, 3, 2, 2)), tensor((1, 6, 10, 10))])


def test_conv1d_transpose_weight():
    out = relay.nn.conv1d_transpose(relay.var("x", shape=(1, 4, 7)), relay.var("w"),
                                    channels=2, kernel_size=3)
    assert_types(param_types(out, "w"), [tensor((4, 2, 3)), tensor((1, 2, 9))])


@settings(max_examples=25, deadline=None)
@given(groups=st.sampled_from([1, 2, 4]), per_group_in=st.integers(1, 3),
       per_group_out=st.integers(1, 3), kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       nhwc=st.booleans())
def test_conv2d_inferred_weight_matches_the_definition(groups, per_group_in, per_group_out,
                                                       kernel, nhwc):
    in_c, out_c = groups * per_group_in, groups * per_group_out
    layout = {"data_layout": "NHWC", "kernel_layout": "HWIO"} if nhwc else {}
    shape = (1, 6, 6, in_c) if nhwc else (1, in_c, 6, 6)
    out = relay.nn.conv2d(relay.var("x", shape=shape), relay.var("w"), channels=out_c,
                          kernel_size=kernel, groups=groups, **layout)
    (w_type, _) = param_types(out, "w")
    kh, kw = kernel
    expected = (kh, kw, per_group_in, out_c) if nhwc else (out_c, per_group_in, kh, kw)
    assert structural_equal(w_type, tensor(expected))


# -- per-channel parameters -----------------------------------------------------------------

def test_bias_add_bias_on_the_axis():
    data = relay.var("x", shape=(2, 5, 7))
    assert_types(param_types(relay.nn.bias_add(data, relay.var("b")), "b")[:1], [tensor((5,))])
    assert_types(param_types(relay.nn.bias_add(data, relay.var("b"), axis=-1), "b")[:1],
                 [tensor((7,))])


def test_prelu_alpha():
    out = relay.nn.prelu(relay.var("x", shape=(1, 6, 4, 4), dtype="float16"), relay.var("a"))
    assert_types(param_types(out, "a")[:1], [tensor((6,), "float16")])


def test_batch_norm_infers_all_four_vectors():
    data = relay.var("x", shape=(1, 16, 8, 8))
    names = ("gamma", "beta", "mean", "var")
    out = relay.nn.batch_norm(data, *[relay.var(n) for n in names])[0]
    assert_types(param_types(out, *names), [tensor((16,))] * 4 + [tensor((1, 16, 8, 8))])


def test_batch_norm_keeps_an_annotated_vector_and_infers_the_rest():
    data = relay.var("x", shape=(1, 4, 3, 3))
    out = relay.nn.batch_norm(data, relay.var("g", shape=(4,)), relay.var("b"),
                              relay.var("m"), relay.var("v"), axis=1)[0]
    assert_types(param_types(out, "g", "b", "m", "v")[:4], [tensor((4,))] * 4)


@pytest.mark.parametrize("norm, kwargs, extent", [
    (relay.nn.layer_norm, {}, 10),
    (relay.nn.layer_norm, {"axis": 1}, 6),
    (relay.nn.instance_norm, {}, 6),
    (relay.nn.group_norm, {"num_groups": 3}, 6),
])
def test_norm_gamma_and_beta(norm, kwargs, extent):
    out = norm(relay.var("x", shape=(2, 6, 10)), relay.var("gamma"), relay.var("beta"), **kwargs)
    assert_types(param_types(out, "gamma", "beta"),
                 [tensor((extent,)), tensor((extent,)), tensor((2, 6, 10))])


def test_conv_bn_relu_chain_types_flow_through_inferred_weights():
    x = relay.var("x", shape=(1, 3, 8, 8))
    y = relay.nn.conv2d(x, relay.var("w1"), channels=4, kernel_size=(3, 3), padding=(1, 1))
    y = relay.nn.relu(relay.nn.batch_norm(y, *[relay.var(n) for n in "gbmv"])[0])
    y = relay.nn.conv2d(y, relay.var("w2"), channels=2, kernel_size=(1, 1))
    assert_types(param_types(y, "w1", "g", "w2"),
                 [tensor((4, 3, 3, 3)), tensor((4,)), tensor((2, 4, 1, 1)),
                  tensor((1, 2, 8, 8))])


def test_weight_inferred_once_the_data_type_arrives_later():
    x, w = relay.var("x"), relay.var("w")
    dense = relay.nn.dense(x, w, units=4)  # visited first: x and w both unknown
    p = relay.var("p", shape=(2, 3))
    out = relay.Tuple([dense, relay.Function([p], p)(x)])  # the call fixes x to (2, 3)
    assert_types(param_types(out, "x", "w")[:2], [tensor((2, 3)), tensor((4, 3))])


def test_one_weight_shared_by_two_calls_gets_one_consistent_type():
    w = relay.var("w")
    x = relay.var("x", shape=(2, 8))
    out = relay.add(relay.nn.dense(x, w, units=8), relay.nn.dense(x, w, units=8))
    assert_types(param_types(out, "w"), [tensor((8, 8)), tensor((2, 8))])


def test_relay_testing_workloads_annotate_only_the_data():
    net = mlp.get_net(batch_size=2)
    assert [p.name_hint for p in net.params if p.type_annotation is not None] == ["data"]
    mod, params = mlp.get_workload(batch_size=2)
    assert params["fc2_weight"].shape == (64, 128) and params["fc3_bias"].shape == (10,)
    net = resnet.get_net(num_layers=18, image_shape=(3, 32, 32))
    assert [p.name_hint for p in net.params if p.type_annotation is not None] == ["data"]
    mod, params = resnet.get_workload(num_layers=18, image_shape=(3, 32, 32))
    assert params["conv0_weight"].shape == (64, 3, 7, 7)
    # the workload's main carries the inferred types as annotations, as TVM's InferType leaves
    conv0 = next(p for p in mod["main"].params if p.name_hint == "conv0_weight")
    assert structural_equal(conv0.type_annotation, tensor((64, 3, 7, 7)))
    assert "%conv0_weight: Tensor[(64, 3, 7, 7), float32]" in str(mod)
    assert params["stage2_unit1_sc_weight"].shape == (128, 64, 1, 1)
    assert params["fc1_weight"].shape == (1000, 512)


# -- what cannot be determined, and conflicts -----------------------------------------------

def test_dense_units_conflicting_with_an_annotated_weight_names_the_op():
    x = relay.var("x", shape=(4, 32))
    out = relay.nn.dense(x, relay.var("w", shape=(8, 32)), units=16)
    with pytest.raises(TypeInferenceError, match=r"nn\.dense.*units=16.*8"):
        param_types(out)


def test_conv2d_channels_conflicting_with_an_annotated_weight_names_the_op():
    out = relay.nn.conv2d(relay.var("x", shape=(1, 3, 8, 8)), relay.var("w", shape=(4, 3, 3, 3)),
                          channels=8, kernel_size=(3, 3))
    with pytest.raises(TypeInferenceError, match=r"nn\.conv2d.*channels=8"):
        param_types(out)


def test_one_weight_used_with_two_different_units_is_a_type_error():
    w = relay.var("w")
    x = relay.var("x", shape=(2, 8))
    out = relay.Tuple([relay.nn.dense(x, w, units=4), relay.nn.dense(x, w, units=6)])
    with pytest.raises(TypeInferenceError, match=r"nn\.dense.*units=6.*4"):
        param_types(out)


def test_bias_shared_by_mismatched_axes_is_a_type_error():
    b = relay.var("b")
    x = relay.var("x", shape=(2, 3, 5))
    out = relay.Tuple([relay.nn.bias_add(x, b), relay.nn.bias_add(x, b, axis=2)])
    with pytest.raises(TypeInferenceError, match="nn.bias_add"):
        param_types(out)


def test_a_weight_rule_on_data_of_the_wrong_rank_names_the_op():
    out = relay.nn.conv2d(relay.var("x", shape=(1, 3, 8)), relay.var("w"), channels=4,
                          kernel_size=(3, 3))
    with pytest.raises(TypeInferenceError, match=r"operator nn\.conv2d failed.*NCHW"):
        param_types(out)


@pytest.mark.parametrize("data_shape, make", [
    ((2, 6), lambda x, w: relay.nn.dense(x, w)),  # no units
    ((1, 4, 6, 6), lambda x, w: relay.nn.conv2d(x, w, kernel_size=(3, 3))),  # no channels
    ((1, 4, 6, 6), lambda x, w: relay.nn.conv2d(x, w, channels=4)),  # no kernel_size
    ((2, 3, 6), lambda x, w: relay.nn.batch_matmul(x, w)),  # no units: N is unknown
], ids=["dense", "conv2d-channels", "conv2d-kernel", "batch_matmul"])
def test_an_undeterminable_weight_asks_for_an_annotation(data_shape, make):
    out = make(relay.var("x", shape=data_shape), relay.var("w"))
    with pytest.raises(TypeInferenceError, match="cannot infer the type of %w; annotate it"):
        param_types(out)


# -- polymorphic calls get type_args; a match must be exhaustive ----------------------------

@pytest.fixture()
def prelude_mod():
    return relay.prelude.Prelude().mod


def _list_match(mod, *clauses, complete=True):
    """``fn (%xs: List[int32]) { match (%xs) { clauses } }`` as @main of ``mod``."""
    _, cons, nil = mod.get_type("List")
    list_type = relay.TypeCall(mod.get_global_type_var("List"), [tensor((), "int32")])
    xs = relay.var("xs", type_annotation=list_type)
    built = [relay.Clause(lhs(cons, nil), relay.const(i)) for i, lhs in enumerate(clauses)]
    mod["main"] = relay.Function([xs], relay.Match(xs, built, complete=complete))
    return mod


def _wild():
    return relay.PatternWildcard()


def _nil_pattern(cons, nil):
    return relay.PatternConstructor(nil)


def _cons_pattern(cons, nil):
    return relay.PatternConstructor(cons, [_wild(), _wild()])


def _single_pattern(cons, nil):  # a one-element list: Cons(_, Nil)
    return relay.PatternConstructor(cons, [_wild(), relay.PatternConstructor(nil)])


@pytest.mark.parametrize("clauses, expected", [
    ((_nil_pattern,), ["Cons(_, _)"]),
    ((_cons_pattern,), ["Nil"]),
    ((_single_pattern, _nil_pattern), ["Cons(_, Cons(_, _))"]),
    ((_cons_pattern, _nil_pattern), []),
    ((lambda cons, nil: relay.PatternVar(relay.var("v")),), []),
])
def test_unmatched_cases_of_list_matches(prelude_mod, clauses, expected):
    mod = _list_match(prelude_mod, *clauses)
    cases = relay.analysis.unmatched_cases(mod["main"].body, mod)
    assert [repr(c) for c in cases] == expected


def test_unmatched_cases_of_a_tuple_of_options(prelude_mod):
    _, some, none = prelude_mod.get_type("Option")

    def both(first, second):
        return relay.Clause(relay.PatternTuple([first, second]), relay.const(0))

    is_some, is_none = relay.PatternConstructor(some, [_wild()]), relay.PatternConstructor(none)
    x = relay.var("x")
    partial = relay.Match(x, [both(is_some, is_some), both(is_none, is_none)])
    assert sorted(map(repr, relay.analysis.unmatched_cases(partial, prelude_mod))) == \
        ["(None, Some(_))", "(Some(_), None)"]
    full = relay.Match(x, [both(is_some, _wild()), both(_wild(), is_none),
                           both(is_none, is_some)])
    assert relay.analysis.unmatched_cases(full, prelude_mod) == []


def test_a_non_exhaustive_match_is_a_type_error_naming_the_missing_case(prelude_mod):
    mod = _list_match(prelude_mod, _single_pattern, _nil_pattern)
    with pytest.raises(TypeInferenceError, match=r"does not handle the following cases: "
                                                 r"case 0: Cons\(_, Cons\(_, _\)\)"):
        relay.transform.InferType()(mod)


def test_a_partial_match_marked_incomplete_type_checks(prelude_mod):
    mod = relay.transform.InferType()(_list_match(prelude_mod, _nil_pattern, complete=False))
    assert structural_equal(mod["main"].checked_type.ret_type, tensor((), "int32"))


def test_calls_to_polymorphic_functions_and_constructors_get_type_args(prelude_mod):
    a = relay.TypeVar("a")
    y = relay.var("y", type_annotation=a)
    ident = relay.GlobalVar("ident")
    prelude_mod[ident] = relay.Function([y], y, a, [a])
    _, cons, nil = prelude_mod.get_type("List")
    x = relay.var("x", shape=(2,))
    call, items = ident(x), cons(relay.const(1), nil())
    prelude_mod["main"] = relay.Function([x], relay.Tuple([call, items]))
    relay.transform.InferType()(prelude_mod)
    assert_types(call.type_args, [tensor((2,))])
    assert_types(items.type_args, [tensor((), "int32")])
    assert_types(items.args[1].type_args, [tensor((), "int32")])
