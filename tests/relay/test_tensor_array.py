"""Tensor arrays of the prelude (TVM's TensorArrayOps / StaticTensorArrayOps) against NumPy.

Each case builds a Relay program from the prelude's tensor-array functions, runs it on the
interpreter and on the VM, and compares the flattened result with the NumPy computation.
"""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.relay.backend.interpreter import ConstructorValue
from kiln.relay.prelude import Prelude, StaticTensorArrayOps, get_tensor_array_shape

EXECUTORS = ("debug", "vm")


def _to_list(value, nil_tags=()):
    """A tensor-array result as a flat Python list: tensors as arrays, unwritten slots as 0.

    ``nil_tags``: the VM's constructor tags of ``tensor_nil`` (its ADTs carry tags, not names).
    """
    if isinstance(value, tvm.nd.NDArray):
        return [value.numpy()]
    if isinstance(value, ConstructorValue):
        name = value.constructor.name_hint
        if name == "Cons":
            return _to_list(value.fields[0]) + _to_list(value.fields[1])
        if name == "Nil":
            return []
        if "tensor_nil" in name:
            return [0]
        return [value.fields[0].numpy()]
    if isinstance(value, tvm.runtime.container.ADT):
        if len(value) == 0:
            return [0] if value.tag in nil_tags else []  # an unwritten slot, or Nil
        out = []
        for field in value:
            out += _to_list(field, nil_tags)
        return out
    raise TypeError(type(value))


def _run(mod, *args):
    nil_tags = {c.tag for gtv in mod.get_global_type_vars()
                for c in mod.type_definitions[gtv].constructors if "tensor_nil" in c.name_hint}
    results = []
    for kind in EXECUTORS:
        ex = relay.create_executor(kind, mod=mod, device=tvm.cpu(0), target="llvm")
        results.append(_to_list(ex.evaluate()(*args), nil_tags))
    return results


def _check(mod, expected, *args):
    for got in _run(mod, *args):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-6)


def _int_vector(name):
    return relay.var(name, shape=(relay.Any(),), dtype="int32")


@pytest.fixture
def prelude():
    return Prelude(tvm.IRModule())


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_array_write_read_and_unwritten_slots(prelude, dtype):
    p = prelude
    v1, v2, i = relay.var("v1"), relay.var("v2"), relay.var("i", "int32")
    tensor1 = p.get_tensor_ctor("tensor1", dtype)
    write = p.get_global_var("tensor_array_write", dtype)
    ta = p.get_global_var("tensor_array", dtype)(relay.const(3))
    ta = write(write(ta, relay.const(0), tensor1(v1)), relay.const(2), tensor1(v2))
    p.mod["main"] = relay.Function([v1, v2], ta)
    a, b = np.arange(3).astype(dtype), np.arange(5, 9).astype(dtype)
    _check(p.mod, [a, 0, b], a, b)
    read = p.get_global_var("tensor_array_read", dtype)
    p.mod["main"] = relay.Function([v1, v2, i], read(ta, i))
    _check(p.mod, [b], a, b, 2)


def test_stack_concat_take_expand_dims(prelude):
    p, dtype = prelude, "float32"
    t2 = p.get_tensor_ctor("tensor2", dtype)
    x, y = relay.var("x"), relay.var("y")
    ta = p.get_global_var("tensor_array", dtype)(relay.const(2))
    write = p.get_global_var("tensor_array_write", dtype)
    ta = write(write(ta, relay.const(0), t2(x)), relay.const(1), t2(y))
    a = np.random.default_rng(0).random((2, 3), dtype="float32")
    b = np.random.default_rng(1).random((4, 3), dtype="float32")
    p.mod["main"] = relay.Function([x, y], p.get_global_var("tensor_array_concat", dtype)(ta))
    _check(p.mod, [np.concatenate([a, b])], a, b)
    p.mod["main"] = relay.Function(
        [x], p.get_global_var("tensor_take", dtype)(t2(x), relay.const(1), relay.const(4)))
    c = np.arange(15, dtype="float32").reshape(5, 3)
    _check(p.mod, [c[1:4]], c)
    p.mod["main"] = relay.Function([x], p.get_global_var("tensor_expand_dims", dtype)(t2(x)))
    _check(p.mod, [c[None]], c)
    ta = p.get_global_var("tensor_array", dtype)(relay.const(2))
    ta = write(write(ta, relay.const(0), t2(x)), relay.const(1), t2(y))
    p.mod["main"] = relay.Function([x, y], p.get_global_var("tensor_array_stack", dtype)(ta))
    _check(p.mod, [np.stack([a, a + 1])], a, a + 1)


@pytest.mark.parametrize("rank", [1, 3])
def test_unstack_then_stack_round_trips(prelude, rank):
    p, dtype = prelude, "float32"
    x = relay.var("x")
    unstack = p.get_global_var(f"tensor_array_unstack_tensor{rank}", dtype)
    p.mod["main"] = relay.Function([x], unstack(x))
    data = np.random.default_rng(rank).random((4,) + (2,) * (rank - 1), dtype="float32")
    _check(p.mod, list(data), data)
    stack = p.get_global_var("tensor_array_stack", dtype)
    p.mod["main"] = relay.Function([x], stack(unstack(x)))
    _check(p.mod, [data], data)


def test_scatter_split_and_gather(prelude):
    p, dtype = prelude, "float32"
    t1 = p.get_tensor_ctor("tensor1", dtype)
    x, idx, lengths = relay.var("x"), _int_vector("idx"), _int_vector("lengths")
    ta = p.get_global_var("tensor_array", dtype)(relay.const(4))
    values = p.get_global_var("tensor_array_unstack_tensor2", dtype)(x)
    # unstack of a rank-2 tensor gives rank-1 elements; scatter puts row k at idx[k]
    scattered = p.get_global_var("tensor_array_scatter", dtype)(ta, idx, values)
    p.mod["main"] = relay.Function([x, idx], scattered)
    rows = np.arange(6, dtype="float32").reshape(2, 3)
    _check(p.mod, [0, rows[1], 0, rows[0]], rows, np.array([3, 1], "int32"))
    vec = relay.var("vec")
    split = p.get_global_var("tensor_array_split", dtype)(ta, t1(vec), lengths)
    p.mod["main"] = relay.Function([vec, lengths], split)
    v = np.arange(7, dtype="float32")
    _check(p.mod, [v[0:2], v[2:3], v[3:7], 0], v, np.array([2, 1, 4], "int32"))
    mat, rows_idx = relay.var("mat"), _int_vector("rows_idx")
    gather = p.get_global_var("tensor_array_gather", dtype)(
        p.get_global_var("tensor_array_unstack_tensor2", dtype)(mat), rows_idx)
    p.mod["main"] = relay.Function([mat, rows_idx], gather)
    m = np.arange(12, dtype="float32").reshape(4, 3)
    _check(p.mod, [m[[3, 0, 3]]], m, np.array([3, 0, 3], "int32"))


@pytest.mark.parametrize("shape", [(3,), (2, 3)])
def test_static_array_write_stack_get_data(prelude, shape):
    p, dtype = prelude, "float32"
    ops = StaticTensorArrayOps(p, dtype, shape)
    ops.register()
    ctor = ops.get_ctor("tensor_constructor")
    x, y, i = relay.var("x"), relay.var("y"), relay.var("i", "int32")
    write = ops.get_global_var("tensor_array_write")
    ta = write(write(ops.get_global_var("tensor_array")(relay.const(2)), relay.const(0), ctor(x)),
               relay.const(1), ctor(y))
    a = np.random.default_rng(2).random(shape, dtype="float32")
    b = a * 2
    p.mod["main"] = relay.Function([x, y], ops.get_global_var("tensor_array_stack")(ta))
    _check(p.mod, [np.stack([a, b])], a, b)
    read = ops.get_global_var("tensor_array_read")
    p.mod["main"] = relay.Function(
        [x, y, i], ops.get_global_var("tensor_get_data")(read(ta, i)))
    _check(p.mod, [b], a, b, 1)
    assert get_tensor_array_shape(ta, dtype, p) == shape


def test_static_split_concat_unstack(prelude):
    p, dtype = prelude, "float32"
    ops = StaticTensorArrayOps(p, dtype, (4, 2))
    ops.register()
    x, lengths = relay.var("x"), _int_vector("lengths")
    out = StaticTensorArrayOps(p, dtype, (relay.Any(), 2))
    out.register()
    ta = out.get_global_var("tensor_array")(relay.const(2))
    split = ops.get_global_var("tensor_array_split")(ta, ops.get_ctor("tensor_constructor")(x),
                                                     lengths)
    p.mod["main"] = relay.Function([x, lengths], out.get_global_var("tensor_array_concat")(split))
    v = np.arange(8, dtype="float32").reshape(4, 2)
    _check(p.mod, [v], v, np.array([1, 3], "int32"))
    p.mod["main"] = relay.Function([x], ops.get_global_var("tensor_array_unstack")(x))
    _check(p.mod, list(v), v)
    assert get_tensor_array_shape(split, dtype, p)[1] == 2


def test_dynamic_array_has_no_static_shape_and_bad_input_is_named(prelude):
    p = prelude
    ta = p.get_global_var("tensor_array", "float32")(relay.const(1))
    assert get_tensor_array_shape(ta, "float32", p) is None
    with pytest.raises(tvm.TVMError, match="tensor array"):
        get_tensor_array_shape(relay.const(1.0), "float32", p)
    with pytest.raises(KeyError, match="tensor7_float32"):
        p.get_tensor_ctor("tensor7", "float32")
    with pytest.raises(tvm.TVMError):
        p.get_global_var("tensor_array", "complex64")


def test_prelude_accumulating_maps_and_unfoldl(prelude):
    p = prelude
    acc, x = relay.var("acc", "int32"), relay.var("x", "int32")
    xs = p.cons(relay.const(1), p.cons(relay.const(2), p.cons(relay.const(3), p.nil())))
    running = relay.Function([acc, x], relay.Tuple([acc + x, acc + x]))
    ex = relay.create_executor("debug", mod=p.mod)
    total, ys = ex.evaluate(p.map_accumr(running, relay.const(0), xs))
    assert int(total.numpy()) == 6
    assert [int(v) for v in _to_list(ys)] == [6, 5, 3]  # right to left
    total, ys = ex.evaluate(p.map_accuml(running, relay.const(0), xs))
    assert [int(v) for v in _to_list(ys)] == [6, 3, 1]  # consed: last first
    n = relay.var("n", "int32")
    down = relay.Function([n], relay.If(relay.equal(n, relay.const(0)), p.none(),
                                        p.some(relay.Tuple([n - relay.const(1), n]))))
    assert [int(v) for v in _to_list(ex.evaluate(p.unfoldl(down, relay.const(3))))] == \
        [1, 2, 3]


def test_import_nat_std_file_twice_and_its_functions(prelude):
    from kiln.relay.testing import count, make_nat_expr

    p = prelude
    p.mod.import_from_std("nat.rly")
    p.mod.import_from_std("nat.rly")  # a second import adds nothing and does not clash
    ex = relay.create_executor("debug", mod=p.mod)
    double = p.mod.get_global_var("nat_double")
    assert count(p, ex.evaluate(double(make_nat_expr(p, 3)))) == 6
    xs = p.cons(relay.const(1), p.cons(relay.const(2), p.cons(relay.const(3), p.nil())))
    nth, update = p.mod.get_global_var("nat_nth"), p.mod.get_global_var("nat_update")
    one = make_nat_expr(p, 1)
    assert [int(v) for v in _to_list(ex.evaluate(update(xs, one, relay.const(9))))] == [1, 9, 3]
    assert int(ex.evaluate(nth(xs, make_nat_expr(p, 2))).numpy()) == 3
    x = relay.var("x", "int32")
    iterate = p.mod.get_global_var("nat_iterate")
    plus2 = relay.Function([x], x + relay.const(2))
    assert int(ex.evaluate(iterate(plus2, make_nat_expr(p, 3))(relay.const(1))).numpy()) == 7
    with pytest.raises(tvm.TVMError, match="no standard library file"):
        p.mod.import_from_std("../prelude.rly.bak")
