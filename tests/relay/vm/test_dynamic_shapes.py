"""VM compiler: ``Any`` dimensions through shape-function kernels (oracle: NumPy)."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import compile_vm

import kiln
from kiln import relay
from kiln.runtime.vm import Opcode

ANY = relay.Any()


@pytest.fixture(scope="module")
def mlp():
    """An MLP with a dynamic batch: dense → bias_add → relu → dense → softmax."""
    x = relay.var("x", shape=(ANY, 8))
    w1, b1 = relay.var("w1", shape=(16, 8)), relay.var("b1", shape=(16,))
    w2 = relay.var("w2", shape=(4, 16))
    hidden = relay.nn.relu(relay.nn.bias_add(relay.nn.dense(x, w1), b1))
    out = relay.nn.softmax(relay.nn.dense(hidden, w2))
    mod = kiln.IRModule.from_expr(relay.Function([x, w1, b1, w2], out))
    return compile_vm(mod)


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_any_batch_mlp_runs_at_several_batch_sizes(mlp, batch, rng):
    exe, vm = mlp
    w1 = rng.standard_normal((16, 8), dtype="float32")
    b1 = rng.standard_normal(16, dtype="float32")
    w2 = rng.standard_normal((4, 16), dtype="float32")
    x = rng.standard_normal((batch, 8), dtype="float32")
    out = vm.run(x, w1, b1, w2)
    expected = _softmax(np.maximum(x @ w1.T + b1, 0) @ w2.T)
    assert out.shape == (batch, 4)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-6)
    opcodes = [i.opcode for i in exe.function("main").instructions]
    assert Opcode.ShapeOf in opcodes and Opcode.AllocTensorReg in opcodes


def test_any_batch_rejects_a_wrong_static_dim(mlp):
    _, vm = mlp
    with pytest.raises(kiln.TVMError, match="expects"):
        vm.run(np.zeros((2, 7), "float32"), np.zeros((16, 8), "float32"),
               np.zeros(16, "float32"), np.zeros((4, 16), "float32"))


def _run(func, *args):
    _, vm = compile_vm(kiln.IRModule.from_expr(func))
    return vm.run(*args)


@pytest.mark.parametrize("newshape, expected", [
    ((-1,), lambda a: a.reshape(-1)),
    ((0, -1, 2), lambda a: a.reshape(a.shape[0], -1, 2)),
    ((-1, 2), lambda a: a.reshape(-1, 2)),
])
def test_reshape_with_dynamic_shapes(newshape, expected, rng):
    """reshape after dense is its own group: a zero-copy ReshapeTensor shaped at run time."""
    x = relay.var("x", shape=(ANY, 3))
    w = relay.var("w", shape=(4, 3))
    func = relay.Function([x, w], relay.reshape(relay.nn.dense(x, w), newshape))
    exe, vm = compile_vm(kiln.IRModule.from_expr(func))
    assert Opcode.ReshapeTensor in [i.opcode for i in exe.function("main").instructions]
    weight = rng.standard_normal((4, 3), dtype="float32")
    for rows in (2, 6):
        data = rng.standard_normal((rows, 3), dtype="float32")
        out = vm.run(data, weight)
        np.testing.assert_allclose(out.numpy(), expected(data @ weight.T), rtol=1e-5)


def test_reshape_fused_with_elementwise_on_dynamic_shapes(rng):
    x = relay.var("x", shape=(ANY, 4))
    func = relay.Function([x], relay.reshape(relay.add(x, relay.const(1.0)), (-1, 2)))
    for rows in (1, 5):
        data = rng.standard_normal((rows, 4), dtype="float32")
        np.testing.assert_allclose(_run(func, data).numpy(), (data + 1).reshape(-1, 2))


def test_concatenate_dynamic_inputs(rng):
    x = relay.var("x", shape=(ANY, 3))
    y = relay.var("y", shape=(ANY, 3))
    z = relay.var("z", shape=(ANY, 3))
    func = relay.Function([x, y, z], relay.concatenate([x, y, z], axis=0))
    a, b, c = (rng.standard_normal((n, 3), dtype="float32") for n in (2, 4, 1))
    np.testing.assert_array_equal(_run(func, a, b, c).numpy(), np.concatenate([a, b, c]))


def test_concatenate_along_a_dynamic_inner_axis(rng):
    x = relay.var("x", shape=(2, ANY))
    y = relay.var("y", shape=(2, ANY))
    a, b = rng.standard_normal((2, 3), dtype="float32"), rng.standard_normal((2, 5),
                                                                             dtype="float32")
    out = _run(relay.Function([x, y], relay.concatenate([x, y], axis=1)), a, b)
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, b], axis=1))


@pytest.mark.parametrize("rows", [7, 2])
def test_strided_slice_of_a_dynamic_dim(rows, rng):
    x = relay.var("x", shape=(ANY, 4))
    a = rng.standard_normal((rows, 4), dtype="float32")
    out = _run(relay.Function([x], relay.strided_slice(x, [1, 0], [-1, 4], [2, 1])), a)
    np.testing.assert_array_equal(out.numpy(), a[1:-1:2])


def test_batch_matmul_with_dynamic_batch(rng):
    x = relay.var("x", shape=(ANY, 2, 3))
    y = relay.var("y", shape=(ANY, 4, 3))
    a = rng.standard_normal((3, 2, 3), dtype="float32")
    b = rng.standard_normal((3, 4, 3), dtype="float32")
    out = _run(relay.Function([x, y], relay.nn.batch_matmul(x, y)), a, b)
    np.testing.assert_allclose(out.numpy(), a @ b.transpose(0, 2, 1), rtol=1e-5, atol=1e-6)


def test_broadcast_between_dynamic_dims(rng):
    x = relay.var("x", shape=(ANY, 1))
    y = relay.var("y", shape=(1, ANY))
    a = rng.standard_normal((5, 1), dtype="float32")
    b = rng.standard_normal((1, 3), dtype="float32")
    out = _run(relay.Function([x, y], relay.multiply(x, y)), a, b)
    np.testing.assert_allclose(out.numpy(), a * b, rtol=1e-6)


@pytest.mark.parametrize("rows", [(2, 3), (3, 2), (4, 3)])
def test_dynamic_extents_that_do_not_broadcast_raise(rows, rng):
    """2 rows plus 3 rows is NumPy's (and TVM's shape function's) error; it gave 2 rows."""
    x, y = relay.var("x", shape=(ANY, 8)), relay.var("y", shape=(ANY, 8))
    _, vm = compile_vm(kiln.IRModule.from_expr(relay.Function([x, y], relay.nn.relu(x + y))))
    a = rng.standard_normal((rows[0], 8), dtype="float32")
    b = rng.standard_normal((rows[1], 8), dtype="float32")
    with pytest.raises(ValueError):
        np.add(a, b)
    with pytest.raises(kiln.TVMError, match="do not broadcast"):
        vm.run(a, b)
    same = rng.standard_normal((rows[0], 8), dtype="float32")  # the VM still runs after it
    np.testing.assert_allclose(vm.run(a, same).numpy(), np.maximum(a + same, 0), rtol=1e-6)


@pytest.mark.parametrize("x_shape, y_shape, a_shape, b_shape", [
    ((ANY, 8), (ANY, 8), (1, 8), (3, 8)),  # failed the kernel's argument check
    ((ANY, 8), (ANY, 8), (3, 8), (1, 8)),  # read 3 rows of a 1-row tensor
    ((ANY, 8), (3, 8), (1, 8), (3, 8)),  # read 3 rows of a 1-row tensor
    ((4, ANY), (4, ANY), (4, 1), (4, 9)),  # the vectorized inner dim
    ((ANY, ANY), (ANY,), (5, 9), (1,)),
])
def test_a_dynamic_extent_of_1_broadcasts_as_numpy(x_shape, y_shape, a_shape, b_shape, rng):
    x, y = relay.var("x", shape=x_shape), relay.var("y", shape=y_shape)
    cond = relay.greater(x, relay.const(0.0))
    body = relay.Tuple([relay.nn.relu(x + y), relay.where(cond, x, y * y)])
    _, vm = compile_vm(kiln.IRModule.from_expr(relay.Function([x, y], body)))
    # then x as large as the result: the same kernel, another run-time signature
    for a_dims in (a_shape, np.broadcast_shapes(a_shape, b_shape)):
        a = rng.standard_normal(a_dims, dtype="float32")
        b = rng.standard_normal(b_shape, dtype="float32")
        added, chosen = vm.run(a, b)
        np.testing.assert_allclose(added.numpy(), np.maximum(a + b, 0), rtol=1e-6)
        np.testing.assert_allclose(chosen.numpy(), np.where(a > 0, a, b * b), rtol=1e-6)


def test_take_with_dynamic_indices(rng):
    data = relay.var("data", shape=(5, 3))
    idx = relay.var("idx", shape=(ANY,), dtype="int32")
    a = rng.standard_normal((5, 3), dtype="float32")
    i = np.array([4, 0, 2, 2], "int32")
    out = _run(relay.Function([data, idx], relay.take(data, idx, axis=0)), a, i)
    np.testing.assert_allclose(out.numpy(), a[i], rtol=1e-6)


def test_transpose_expand_dims_and_reduce(rng):
    x = relay.var("x", shape=(ANY, 3))
    body = relay.sum(relay.expand_dims(relay.transpose(x), 0), axis=2, keepdims=True)
    a = rng.standard_normal((4, 3), dtype="float32")
    out = _run(relay.Function([x], body), a)
    np.testing.assert_allclose(out.numpy(), a.T[None].sum(axis=2, keepdims=True), rtol=1e-5)


def test_op_without_shape_function_is_a_clear_error():
    # an injective op whose output shape is not its input's needs a rule; this one has none
    from kiln import te
    from kiln.relay.op.op import (
        INJECTIVE,
        define_op,
        register_compute,
        register_injective_schedule,
    )
    from kiln.relay.op.type_relations import tensor_arg, tensor_type

    def _swap_rel(types, attrs, op_name):
        return tensor_type(list(tensor_arg(types, 0, op_name).shape)[::-1], "float32")

    def _swap(attrs, inputs, out_type):
        x = inputs[0]
        return [te.compute(x.shape[::-1], lambda i, j: x[j, i], name="swap")]

    define_op("test.swap_no_shape_func", _swap_rel, INJECTIVE, 1)
    register_compute("test.swap_no_shape_func", _swap)
    register_injective_schedule("test.swap_no_shape_func")
    x2 = relay.var("x", shape=(ANY, 3))
    func = relay.Function([x2], relay.Call(kiln.ir.op.Op.get("test.swap_no_shape_func"), [x2]))
    with pytest.raises(kiln.TVMError, match="shape function"):
        compile_vm(kiln.IRModule.from_expr(func))


# -- the shape functions themselves, compiled and run on shape tensors ---------------------


def _shape_of_output(body_fn, arg_types, arg_shapes):
    """Run the shape function kernel of ``body_fn(*vars)`` on concrete input shapes."""
    from kiln.relay import transform
    from kiln.relay.backend.te_compiler import TECompiler

    params = [relay.var(f"p{i}", t) for i, t in enumerate(arg_types)]
    func = relay.Function(params, body_fn(*params)).with_attr("Primitive", 1)
    func = transform.InferType()(kiln.IRModule.from_expr(func))["main"]
    compiler = TECompiler("c")
    shape_func = compiler.lower_shape_func(func)
    lib = compiler.build()
    flat = [s for s, t in zip(arg_shapes, arg_types)]
    ins = [kiln.nd.array(np.array(flat[i], "int64")) for i in shape_func.inputs]
    ndim = len(func.body.checked_type.shape)
    shape, size = kiln.nd.empty((ndim,), "int64"), kiln.nd.empty((1,), "int64")
    agreement = [kiln.nd.empty((1,), "int64")] if shape_func.checked else []
    lib[shape_func.name](*ins, shape, size, *agreement)
    return tuple(shape.numpy()), int(size.numpy()[0])


def _t(*shape, dtype="float32"):
    return relay.TensorType(shape, dtype)


@pytest.mark.parametrize("case", [
    ("concatenate", lambda a, b: relay.concatenate([a, b], 1), [_t(2, ANY), _t(2, ANY)],
     [(2, 3), (2, 5)], lambda a, b: np.concatenate([a, b], 1)),
    ("strided_slice", lambda a: relay.strided_slice(a, [1], [-1], [2], axes=[0]), [_t(ANY, 3)],
     [(9, 3)], lambda a: a[1:-1:2]),
    ("batch_matmul", lambda a, b: relay.nn.batch_matmul(a, b), [_t(ANY, 2, 3), _t(ANY, 4, 3)],
     [(5, 2, 3), (5, 4, 3)], lambda a, b: a @ b.transpose(0, 2, 1)),
    ("reshape -3", lambda a: relay.reshape(a, (-3, -2)), [_t(ANY, ANY, 2)], [(3, 4, 2)],
     lambda a: a.reshape(12, 2)),
    ("reshape -4", lambda a: relay.reshape(a, (-4, 2, -1, 0)), [_t(ANY, 5)], [(6, 5)],
     lambda a: a.reshape(2, 3, 5)),
    ("squeeze", lambda a: relay.squeeze(a, [1]), [_t(ANY, 1, 4)], [(3, 1, 4)],
     lambda a: a.squeeze(1)),
    ("mean exclude", lambda a: relay.mean(a, axis=[0], exclude=True), [_t(ANY, 2, ANY)],
     [(3, 2, 7)], lambda a: a.mean(axis=(1, 2))),
    ("take flat", lambda a, i: relay.take(a, i), [_t(3, 4), _t(ANY, ANY, dtype="int32")],
     [(3, 4), (2, 5)], lambda a, i: np.take(a, i.astype("int64"))),
    ("tile", lambda a: relay.tile(a, (2, 3)), [_t(ANY, 2)], [(4, 2)],
     lambda a: np.tile(a, (2, 3))),
    ("repeat", lambda a: relay.repeat(a, 3, 0), [_t(ANY, 2)], [(4, 2)],
     lambda a: np.repeat(a, 3, 0)),
    ("pad", lambda a: relay.nn.pad(a, ((1, 2), (0, 1))), [_t(ANY, 2)], [(4, 2)],
     lambda a: np.pad(a, ((1, 2), (0, 1)))),
    ("stack", lambda a, b: relay.stack([a, b], 1), [_t(ANY, 2), _t(ANY, 2)],
     [(4, 2), (4, 2)], lambda a, b: np.stack([a, b], 1)),
    ("layout_transform", lambda a: relay.layout_transform(a, "NCHW", "NCHW4c"),
     [_t(ANY, 8, ANY, 2)], [(3, 8, 5, 2)], lambda a: np.zeros((3, 2, 5, 2, 4))),
    ("slice_like", lambda a, b: relay.slice_like(a, b, axes=[1]), [_t(ANY, ANY), _t(ANY, ANY)],
     [(4, 6), (2, 3)], lambda a, b: a[:, :3]),
    ("strided_slice backwards", lambda a: relay.strided_slice(a, [-1], [0], [-2], axes=[1]),
     [_t(2, ANY)], [(2, 6)], lambda a: a[:, -1:0:-2]),
    ("topk past a run-time axis", lambda a: relay.topk(a, 3, axis=0, ret_type="values"),
     [_t(ANY, ANY)], [(2, 2)], None),
])
def test_shape_function_matches_numpy(case):
    _, body_fn, types, shapes, numpy_fn = case
    arrays = [np.zeros(s, "float32") if t.dtype == "float32" else np.zeros(s, "int32")
              for s, t in zip(shapes, types)]
    if numpy_fn is None:  # invalid at run time: the shape function itself fails
        with pytest.raises(kiln.TVMError, match="k must not exceed the axis"):
            _shape_of_output(body_fn, types, shapes)
        return
    shape, size = _shape_of_output(body_fn, types, shapes)
    expected = numpy_fn(*arrays)
    assert shape == expected.shape
    assert size == expected.size * 4


@pytest.mark.parametrize("start, stop", [(0.0, 3.0), (1.0, 1.2), (2.0, 1.0)])
def test_arange_shape_depends_on_input_values(start, stop):
    """arange's length is read from its inputs by a data-dependent shape function kernel."""
    s = relay.var("s", shape=(), dtype="float32")
    e = relay.var("e", shape=(), dtype="float32")
    body = relay.multiply(relay.arange(s, e, relay.const(0.5)), relay.const(2.0))
    out = _run(relay.Function([s, e], body), np.float32(start), np.float32(stop))
    np.testing.assert_allclose(out.numpy(), np.arange(start, stop, 0.5, dtype="float32") * 2)


_BATCH_OPS = {
    "conv2d": lambda x: relay.nn.conv2d(x, relay.const(np.linspace(-1, 1, 108, dtype="float32")
                                                       .reshape(4, 3, 3, 3)), padding=(1, 1)),
    "max_pool2d": lambda x: relay.nn.max_pool2d(x, (2, 2), (2, 2)),
    "global_avg_pool2d": lambda x: relay.nn.global_avg_pool2d(x),
    "batch_flatten+softmax": lambda x: relay.nn.softmax(relay.nn.batch_flatten(x)),
    "sum": lambda x: relay.sum(x, axis=(2, 3)),
    "mean keepdims": lambda x: relay.mean(x, axis=1, keepdims=True),
    "argmax": lambda x: relay.argmax(x, axis=1),
    "transpose": lambda x: relay.transpose(x, (0, 2, 3, 1)),
    "take": lambda x: relay.take(x, relay.const(np.array([0, 2], "int32")), axis=1),
    "expand/squeeze": lambda x: relay.squeeze(relay.expand_dims(x, 1), [1]),
    "split": lambda x: relay.split(x, 3, axis=1)[1],
    "tile": lambda x: relay.tile(x, (1, 1, 1, 2)),
    "pad": lambda x: relay.nn.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
    "stack": lambda x: relay.stack([x, x], 1),
    "where": lambda x: relay.where(relay.greater(x, relay.const(0.0)), x,
                                   relay.zeros_like(x)),
    "layer_norm": lambda x: relay.nn.layer_norm(x, relay.const(np.ones(8, "float32")),
                                                relay.const(np.zeros(8, "float32"))),
    # reshapes fused after a computation are kernels over run-time extents, not views
    "add+batch_flatten": lambda x: relay.nn.batch_flatten(relay.add(x, relay.const(1.0))),
    "add+reverse_reshape": lambda x: relay.reverse_reshape(relay.add(x, relay.const(1.0)),
                                                           (-1, 0)),
    "add+reshape_like": lambda x: relay.reshape_like(relay.add(x, relay.const(1.0)),
                                                     relay.nn.batch_flatten(x)),
}


@pytest.mark.parametrize("name", sorted(_BATCH_OPS))
def test_ops_with_an_any_batch_match_the_static_program(name, rng):
    """Oracle: the interpreter on the same program with the batch fixed."""
    from kiln.relay.backend.interpreter import Interpreter

    data = rng.standard_normal((2, 3, 8, 8), dtype="float32")
    dynamic = relay.var("x", shape=(ANY, 3, 8, 8))
    static = relay.var("x", shape=(2, 3, 8, 8))
    out = _run(relay.Function([dynamic], _BATCH_OPS[name](dynamic)), data)
    mod = kiln.IRModule.from_expr(relay.Function([static], _BATCH_OPS[name](static)))
    expected = Interpreter(mod).evaluate()(data).numpy()
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_zeros_ones_full_with_a_shape_tensor():
    s = relay.var("s", shape=(2,), dtype="int64")
    shape = np.array([3, 2], "int64")
    ones = _run(relay.Function([s], relay.add(relay.ones(s, "float32"), relay.const(1.0))),
                shape)
    np.testing.assert_array_equal(ones.numpy(), np.full((3, 2), 2.0, "float32"))
    zeros = _run(relay.Function([s], relay.zeros(s, "float32")), np.array([1, 4], "int64"))
    np.testing.assert_array_equal(zeros.numpy(), np.zeros((1, 4), "float32"))
    full = _run(relay.Function([s], relay.full(relay.const(7.0), s, "float32")), shape)
    np.testing.assert_array_equal(full.numpy(), np.full((3, 2), 7.0, "float32"))


@pytest.mark.parametrize("newshape", [[-1, 3], [0, -1], [3, 2]])
def test_dyn_reshape_reads_the_new_shape_at_run_time(newshape):
    x = relay.var("x", shape=(6, 1))
    s = relay.var("s", shape=(2,), dtype="int64")
    data = np.arange(6, dtype="float32").reshape(6, 1)
    out = _run(relay.Function([x, s], relay.reshape(x, s)), data, np.array(newshape, "int64"))
    expected_shape = [d if d != 0 else data.shape[k] for k, d in enumerate(newshape)]
    np.testing.assert_array_equal(out.numpy(), data.reshape(expected_shape))


def test_dyn_broadcast_to():
    x = relay.var("x", shape=(1, 3))
    s = relay.var("s", shape=(2,), dtype="int64")
    data = np.arange(3, dtype="float32")[None]
    out = _run(relay.Function([x, s], relay.broadcast_to(x, s)), data, np.array([4, 3], "int64"))
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(data, (4, 3)))


_ROW_OPS = {
    "topk": lambda x: relay.topk(x, 2, axis=1, ret_type="values"),
    "cumsum": lambda x: relay.cumsum(x, axis=1),
    "sort": lambda x: relay.sort(x, axis=1),
    "argsort": lambda x: relay.argsort(x, axis=1),
    "one_hot": lambda x: relay.one_hot(relay.cast(x, "int32"), relay.const(1.0),
                                       relay.const(0.0), 3, -1, "float32"),
    "gather": lambda x: relay.gather(x, 1, relay.cast(relay.zeros_like(x), "int32")),
    "concatenate+strided_slice": lambda x: relay.strided_slice(
        relay.concatenate([x, x], 1), [0, 2], [5, 6]),
    "repeat": lambda x: relay.repeat(x, 2, 0),
    "batch_norm": lambda x: relay.nn.batch_norm(
        x, *[relay.const(np.full(4, 1.5, "float32"))] * 4)[0],
    "log_softmax": lambda x: relay.nn.log_softmax(x),
    "reverse": lambda x: relay.reverse(x, 1),
    "prelu": lambda x: relay.nn.prelu(x, relay.const(np.full(4, 0.1, "float32"))),
    "dropout": lambda x: relay.nn.dropout(x),
    "variance": lambda x: relay.variance(x, axis=1),
    "max over the dynamic axis": lambda x: relay.max(x, axis=0),
    "split along the dynamic axis": lambda x: relay.split(relay.add(x, relay.const(1.0)), 3,
                                                          axis=0)[1],
    "split at indices": lambda x: relay.split(relay.add(x, relay.const(1.0)), [1], axis=0)[1],
    # an inner reshape's extents come from the shape rules; the output's from the VM
    "reshape then layout_transform": lambda x: relay.layout_transform(
        relay.add(relay.reshape(x, (-1, 2, 2, 1)), relay.const(1.0)), "NCHW", "NHWC"),
    "reshape then pad": lambda x: relay.nn.pad(
        relay.add(relay.reshape(x, (-1, 2, 2)), relay.const(1.0)), ((1, 0), (0, 0), (0, 2))),
}


@pytest.mark.parametrize("name", sorted(_ROW_OPS))
def test_ops_with_dynamic_rows_match_the_static_program(name, rng):
    from kiln.relay.backend.interpreter import Interpreter

    data = rng.standard_normal((3, 4), dtype="float32")
    out = _run(relay.Function([x := relay.var("x", shape=(ANY, 4))], _ROW_OPS[name](x)), data)
    static = relay.var("x", shape=(3, 4))
    mod = kiln.IRModule.from_expr(relay.Function([static], _ROW_OPS[name](static)))
    expected = Interpreter(mod).evaluate()(data).numpy()
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 4), (5,)])
def test_argwhere_output_length_depends_on_the_data(shape, rng):
    x = relay.var("x", shape=tuple(ANY for _ in shape))
    func = relay.Function([x], relay.argwhere(relay.greater(x, relay.const(0.0))))
    _, vm = compile_vm(kiln.IRModule.from_expr(func))
    data = rng.standard_normal(shape, dtype="float32")
    for values in (data, -np.abs(data), np.abs(data) + 1):
        out = vm.run(values).numpy()
        np.testing.assert_array_equal(out, np.argwhere(values > 0))
        assert out.dtype == np.int32


def _run_params(params, body, *args):
    return _run(relay.Function(params, body), *args).numpy()


def test_dyn_tile_one_hot_pad_and_strided_slice_read_their_tensors_at_run_time():
    x = relay.var("x", shape=(6, 4))
    data = np.arange(24, dtype="float32").reshape(6, 4)
    reps = relay.var("reps", shape=(2,), dtype="int64")
    np.testing.assert_array_equal(
        _run_params([x, reps], relay.tile(x, reps), data, np.array([2, 3], "int64")),
        np.tile(data, (2, 3)))
    idx = relay.var("idx", shape=(3,), dtype="int32")
    depth = relay.var("depth", shape=(), dtype="int32")
    body = relay.one_hot(idx, relay.const(1.0), relay.const(0.0), depth, -1, "float32")
    np.testing.assert_array_equal(
        _run_params([idx, depth], body, np.array([0, 2, 1], "int32"), np.int32(4)),
        np.eye(4, dtype="float32")[[0, 2, 1]])
    widths = relay.var("widths", shape=(2, 2), dtype="int64")
    np.testing.assert_array_equal(
        _run_params([x, widths], relay.nn.pad(x, widths, relay.const(-1.0)), data,
                    np.array([[1, 0], [2, 1]], "int64")),
        np.pad(data, ((1, 0), (2, 1)), constant_values=-1))
    b, e, s = (relay.var(n, shape=(2,), dtype="int64") for n in "bes")
    np.testing.assert_array_equal(
        _run_params([x, b, e, s], relay.strided_slice(x, b, e, s), data,
                    np.array([1, 0], "int64"), np.array([-1, 4], "int64"),
                    np.array([2, 3], "int64")),
        data[1:-1:2, 0:4:3])


@pytest.mark.parametrize("axis", [0, 2, 3, -1])
def test_dyn_expand_dims_at_a_run_time_axis(axis):
    x = relay.var("x", shape=(6, 1, 4))
    a = relay.var("a", shape=(), dtype="int64")
    data = np.arange(24, dtype="float32").reshape(6, 1, 4)
    out = _run_params([x, a], relay.expand_dims(x, a), data, np.int64(axis))
    np.testing.assert_array_equal(out, np.expand_dims(data, axis))


@pytest.mark.parametrize("axis", [1, -2])
def test_dyn_squeeze_of_a_run_time_axis(axis):
    x = relay.var("x", shape=(6, 1, 4))
    ax = relay.var("ax", shape=(1,), dtype="int64")
    data = np.arange(24, dtype="float32").reshape(6, 1, 4)
    out = _run_params([x, ax], relay.squeeze(x, ax), data, np.array([axis], "int64"))
    np.testing.assert_array_equal(out, data.squeeze(axis))


@pytest.mark.parametrize("body, good, bad, message", [
    (lambda x: relay.reshape(relay.add(x, relay.const(1.0)), (2, 3)), (2, 3), (1, 3),
     "element count"),
    (lambda x: relay.topk(x, 3, axis=0, ret_type="values"), (4, 3), (2, 3), "k must not exceed"),
])
def test_static_outputs_of_run_time_shaped_inputs_are_checked(body, good, bad, message, rng):
    """The types fix the output shape, so a run-time input that disagrees with it would be read
    out of bounds; the shape function checks the agreement instead."""
    from kiln.relay.backend.interpreter import Interpreter

    x = relay.var("x", shape=(ANY, 3))
    _, vm = compile_vm(kiln.IRModule.from_expr(relay.Function([x], body(x))))
    data = rng.standard_normal(good, dtype="float32")
    static = relay.var("x", shape=good)
    expected = Interpreter(kiln.IRModule.from_expr(relay.Function([static], body(static))))
    np.testing.assert_allclose(vm.run(data).numpy(), expected.evaluate()(data).numpy())
    with pytest.raises(kiln.TVMError, match=message):
        vm.run(rng.standard_normal(bad, dtype="float32"))
