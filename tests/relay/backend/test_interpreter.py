"""The reference interpreter against NumPy (and PyTorch for conv/pool)."""

import numpy as np
import pytest
import torch

import kiln as tvm
from kiln import relay
from kiln.relay.backend.interpreter import ConstructorValue, Interpreter
from kiln.relay.prelude import Prelude
from kiln.runtime.error import TVMError


def run(func, *args, mod=None):
    return Interpreter(mod).evaluate(func)(*args)


def test_broadcast_relu():
    x, y = relay.var("x", shape=(2, 3)), relay.var("y", shape=(3,))
    a, b = np.random.randn(2, 3).astype("float32"), np.random.randn(3).astype("float32")
    out = run(relay.Function([x, y], relay.nn.relu(x + y)), a, b)
    np.testing.assert_allclose(out.numpy(), np.maximum(a + b, 0))


def test_tail_recursive_loop_to_depth_100000():
    mod = tvm.IRModule()
    n, acc = relay.var("n", shape=(), dtype="int64"), relay.var("acc", shape=(), dtype="int64")
    loop = relay.GlobalVar("loop")
    one = relay.const(1, "int64")
    mod[loop] = relay.Function([n, acc], relay.If(
        relay.equal(n, relay.const(0, "int64")), acc, loop(n - one, acc + n)))
    mod["main"] = relay.Function([], loop(relay.const(100000, "int64"), relay.const(0, "int64")))
    assert Interpreter(mod).evaluate()().numpy() == 100000 * 100001 // 2


def test_closures_capture_their_environment():
    x, y = relay.var("x", shape=()), relay.var("y", shape=())
    adder = relay.Function([x], relay.Function([y], x + y))
    f = relay.var("f")
    prog = relay.Function([], relay.Let(f, adder(relay.const(2.0)), f(relay.const(3.0))))
    assert run(prog).numpy() == 5.0


def test_prelude_list_map_fold_nth():
    p = Prelude()
    xs = p.Cons(relay.const(1), p.Cons(relay.const(2), p.Cons(relay.const(3), p.Nil())))
    v = relay.var("v", shape=(), dtype="int32")
    double = relay.Function([v], v * relay.const(2))
    a, b = relay.var("a", shape=(), dtype="int32"), relay.var("b", shape=(), dtype="int32")
    plus = relay.Function([a, b], a + b)
    p.mod["main"] = relay.Function([], relay.Tuple([
        p.foldl(plus, relay.const(0), p.map(double, xs)), p.nth(xs, relay.const(2)),
        p.length(xs)]))
    total, third, length = Interpreter(p.mod).evaluate()()
    assert (total.numpy(), third.numpy(), length.numpy()) == (12, 3, 3)


def test_adt_values_and_refs():
    p = Prelude()
    p.mod["main"] = relay.Function([], p.Some(relay.const(1.0)))
    value = Interpreter(p.mod).evaluate()()
    assert isinstance(value, ConstructorValue) and value.constructor.name_hint == "Some"
    r = relay.var("r")
    prog = relay.Function([], relay.Let(r, relay.RefCreate(relay.const(1.0)), relay.Let(
        relay.var("_"), relay.RefWrite(r, relay.const(7.0)), relay.RefRead(r))))
    assert run(prog).numpy() == 7.0


def test_conv_pool_match_pytorch():
    d, w = relay.var("d", shape=(1, 4, 9, 9)), relay.var("w", shape=(6, 2, 3, 3))
    y = relay.nn.conv2d(d, w, padding=(1, 2), strides=(2, 1), dilation=(1, 2), groups=2)
    y = relay.nn.avg_pool2d(y, pool_size=(2, 2), strides=(2, 2), ceil_mode=True,
                            count_include_pad=False)
    dv, wv = np.random.randn(1, 4, 9, 9).astype("float32"), np.random.randn(6, 2, 3, 3).astype(
        "float32")
    ref = torch.nn.functional.conv2d(torch.tensor(dv), torch.tensor(wv), stride=(2, 1),
                                     padding=(1, 2), dilation=(1, 2), groups=2)
    ref = torch.nn.functional.avg_pool2d(ref, 2, 2, ceil_mode=True, count_include_pad=False)
    np.testing.assert_allclose(run(relay.Function([d, w], y), dv, wv).numpy(), ref.numpy(),
                               rtol=1e-4, atol=1e-4)


def test_conv3d_matches_pytorch():
    # three spatial dims: the einsum's spatial letters must not reuse the channel letters
    d, w = relay.var("d", shape=(1, 2, 4, 5, 3)), relay.var("w", shape=(3, 2, 2, 3, 2))
    y = relay.nn.conv3d(d, w, padding=(1, 0, 1, 1, 0, 1))
    dv = np.random.randn(1, 2, 4, 5, 3).astype("float32")
    wv = np.random.randn(3, 2, 2, 3, 2).astype("float32")
    ref = torch.nn.functional.conv3d(
        torch.nn.functional.pad(torch.tensor(dv), (1, 1, 0, 0, 1, 1)), torch.tensor(wv))
    np.testing.assert_allclose(run(relay.Function([d, w], y), dv, wv).numpy(), ref.numpy(),
                               rtol=1e-4, atol=1e-4)


def test_pre_transformed_weight_convolutions_match_pytorch():
    # winograd (NCHW, stride 1, asymmetric padding) and gemm (NHWC, strided) convolutions,
    # each fed the weight transform's output, against the plain convolution
    x, w = np.random.randn(1, 3, 7, 9).astype("float32"), np.random.randn(4, 3, 3, 3).astype(
        "float32")
    d, k = relay.var("d", shape=x.shape), relay.var("k", shape=w.shape)
    u = relay.nn.contrib_conv2d_winograd_weight_transform(k, tile_size=4)
    wino = relay.nn.contrib_conv2d_winograd_without_weight_transform(
        d, u, tile_size=4, padding=(1, 0, 2, 1), channels=4, kernel_size=(3, 3))
    ref = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.tensor(x), (0, 1, 1, 2)), torch.tensor(w))
    np.testing.assert_allclose(run(relay.Function([d, k], wino), x, w).numpy(), ref.numpy(),
                               rtol=1e-4, atol=1e-4)
    xn, hwio = x.transpose(0, 2, 3, 1).copy(), w.transpose(2, 3, 1, 0).copy()
    dn, kn = relay.var("d", shape=xn.shape), relay.var("k", shape=hwio.shape)
    packed = relay.nn.contrib_conv2d_gemm_weight_transform(kn, tile_N=3, tile_K=8)
    gemm = relay.nn.contrib_conv2d_gemm_without_weight_transform(
        dn, packed, strides=(2, 1), padding=(1, 1, 0, 0), channels=4, kernel_size=(3, 3),
        data_layout="NHWC", kernel_layout="HWIO")
    ref = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.tensor(x), (1, 0, 1, 0)), torch.tensor(w), stride=(2, 1))
    np.testing.assert_allclose(run(relay.Function([dn, kn], gemm), xn, hwio).numpy(),
                               ref.permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-4)


def test_nhwc_conv_matches_nchw():
    d, w = relay.var("d", shape=(1, 5, 5, 3)), relay.var("w", shape=(3, 3, 3, 4))
    y = relay.nn.conv2d(d, w, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    dv, wv = np.random.randn(1, 5, 5, 3).astype("float32"), np.random.randn(3, 3, 3, 4).astype(
        "float32")
    ref = torch.nn.functional.conv2d(torch.tensor(dv).permute(0, 3, 1, 2),
                                     torch.tensor(wv).permute(3, 2, 0, 1), padding=1)
    np.testing.assert_allclose(run(relay.Function([d, w], y), dv, wv).numpy(),
                               ref.permute(0, 2, 3, 1).numpy(), rtol=1e-4, atol=1e-4)


def test_softmax_and_layer_norm_match_pytorch():
    x = relay.var("x", shape=(2, 5))
    g, b = relay.var("g", shape=(5,)), relay.var("b", shape=(5,))
    out = relay.Tuple([relay.nn.softmax(x), relay.nn.layer_norm(x, g, b)])
    xv, gv, bv = (np.random.randn(*s).astype("float32") for s in ((2, 5), (5,), (5,)))
    sm, ln = run(relay.Function([x, g, b], out), xv, gv, bv)
    np.testing.assert_allclose(sm.numpy(), torch.softmax(torch.tensor(xv), -1).numpy(), 1e-5)
    ref = torch.nn.functional.layer_norm(torch.tensor(xv), (5,), torch.tensor(gv),
                                         torch.tensor(bv))
    np.testing.assert_allclose(ln.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)


def test_integer_division_truncates_like_tir():
    x, y = relay.var("x", shape=(4,), dtype="int32"), relay.var("y", shape=(4,), dtype="int32")
    a = np.array([7, -7, 7, -7], "int32")
    b = np.array([2, 2, -2, -2], "int32")
    out = run(relay.Function([x, y], relay.Tuple([relay.divide(x, y), relay.floor_divide(x, y),
                                                    relay.mod(x, y), relay.floor_mod(x, y)])),
              a, b)
    assert [o.numpy().tolist() for o in out] == [[3, -3, -3, 3], [3, -4, -4, 3],
                                                 [1, -1, 1, -1], [1, 1, -1, -1]]


def test_float_trunc_divide_rounds_toward_zero_and_divide_does_not():
    x, y = relay.var("x", shape=(4,)), relay.var("y", shape=(4,))
    a = np.array([7, -7, 7.5, -0.5], "float32")
    b = np.array([2, 2, -2, 4], "float32")
    out = run(relay.Function([x, y], relay.Tuple([relay.trunc_divide(x, y),
                                                   relay.divide(x, y)])), a, b)
    np.testing.assert_array_equal(out[0].numpy(), np.trunc(a / b))
    np.testing.assert_array_equal(out[1].numpy(), a / b)


def test_bad_arguments_raise_clear_errors():
    x = relay.var("x", shape=(2, 2))
    f = Interpreter().evaluate(relay.Function([x], x))
    with pytest.raises(TVMError, match="expected shape"):
        f(np.zeros((3, 2), "float32"))
    with pytest.raises(TVMError, match="expected dtype float32"):
        f(np.zeros((2, 2), "int32"))
    with pytest.raises(TVMError, match="takes 1 arguments, got 2"):
        f(np.zeros((2, 2), "float32"), 1)


def test_incomplete_match_failure_is_reported():
    p = Prelude()
    ints = relay.TypeCall(p.List, [relay.TensorType((), "int32")])
    empty = relay.var("empty", type_annotation=ints)
    p.mod["main"] = relay.Function([], relay.Let(empty, p.Nil(), p.hd(empty)))
    with pytest.raises(TVMError, match="match failed"):
        Interpreter(p.mod).evaluate()()


def test_let_bound_function_can_call_itself():
    n = relay.var("n", shape=(), dtype="int32")
    f = relay.var("f")
    body = relay.If(relay.less(n, relay.const(1)), relay.const(0),
                    relay.add(n, f(relay.subtract(n, relay.const(1)))))
    fn = relay.Function([n], body, relay.TensorType((), "int32"))
    prog = relay.Function([], relay.Let(f, fn, f(relay.const(10))))
    assert run(prog).numpy() == 55


def test_shared_subexpressions_are_evaluated_once():
    x = relay.var("x", shape=(2,))
    y = x
    for _ in range(40):  # 2**40 evaluations without sharing
        y = relay.add(y, y)
    out = run(relay.Function([x], y), np.ones(2, "float32"))
    np.testing.assert_allclose(out.numpy(), [2.0 ** 40] * 2)


def test_avg_pool_count_include_pad_matches_pytorch():
    x = relay.var("x", shape=(1, 1, 3, 3))
    f = relay.Function([x], relay.nn.avg_pool2d(x, pool_size=(3, 3), padding=(1, 1),
                                                count_include_pad=True))
    xv = np.arange(9, dtype="float32").reshape(1, 1, 3, 3)
    ref = torch.nn.functional.avg_pool2d(torch.tensor(xv), 3, 1, 1, count_include_pad=True)
    np.testing.assert_allclose(run(f, xv).numpy(), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize("mode, combine", [("add", np.add), ("mul", np.multiply),
                                           ("min", np.minimum), ("max", np.maximum)])
def test_scatter_nd_modes(mode, combine):
    data = relay.var("d", shape=(4,))
    idx = relay.const(np.array([[1, 3]], "int64"))
    upd = relay.const(np.array([5.0, -2.0], "float32"))
    f = relay.Function([data], relay.scatter_nd(data, idx, upd, mode=mode))
    dv = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    expected = dv.copy()
    expected[[1, 3]] = combine(dv[[1, 3]], [5.0, -2.0])
    np.testing.assert_allclose(run(f, dv).numpy(), expected)


@pytest.mark.parametrize("newshape, shape", [((0, -1), (2, 12)), ((-3, 4), (6, 4)),
                                             ((-4, 1, 2, -2), (1, 2, 3, 4)), ((-2,), (2, 3, 4))])
def test_reshape_special_values(newshape, shape):
    x = relay.var("x", shape=(2, 3, 4))
    xv = np.arange(24, dtype="float32").reshape(2, 3, 4)
    out = run(relay.Function([x], relay.reshape(x, newshape)), xv)
    np.testing.assert_array_equal(out.numpy(), xv.reshape(shape))


def test_float16_sum_and_mean_accumulate_in_float32_along_any_axis():
    # as the kernels do (kiln.topi.reduction.ACCUMULATOR_DTYPE); NumPy's float16 sum
    # accumulates in float32 only along a contiguous axis
    data = (np.random.default_rng(5).standard_normal((4, 301, 3)) * 3).astype("float16")
    x = relay.var("x", shape=data.shape, dtype="float16")
    out = run(relay.Function([x], relay.Tuple([relay.sum(x, axis=[1]),
                                               relay.mean(x, axis=[0, 1])])), data)
    wide = data.astype("float32")
    np.testing.assert_array_equal(out[0].numpy(), wide.sum(1).astype("float16"))
    np.testing.assert_array_equal(out[1].numpy(), wide.mean((0, 1)).astype("float16"))
