"""TIR nodes and arithmetic: dtype promotion, constant folding, EqualOp, errors, printer,
visitors."""

from __future__ import annotations

import pytest

from kiln import tir
from kiln.ir.structural import structural_equal, structural_hash
from kiln.runtime.error import TVMError


def test_python_numbers_take_the_expression_dtype():
    x64 = tir.Var("x", "int64")
    assert (x64 + 1).dtype == "int64"
    assert (x64 + 1).b.dtype == "int64"
    f16 = tir.Var("h", "float16")
    assert (f16 * 2).dtype == "float16"
    i = tir.Var("i", "int32")
    promoted = i + 1.5
    assert promoted.dtype == "float32"
    assert isinstance(promoted.a, tir.Cast)


def test_integer_widening_and_float_promotion():
    a, b = tir.Var("a", "int32"), tir.Var("b", "int64")
    assert (a + b).dtype == "int64"
    assert isinstance((a + b).a, tir.Cast)
    f = tir.Var("f", "float64")
    assert (a * f).dtype == "float64"


def test_constant_folding_of_immediates():
    assert tir.const(3) + 4 == 7
    assert (tir.const(7) // 2).value == 3
    assert (tir.const(-7) // 2).value == -4
    assert tir.floormod(tir.const(-7), 2).value == 1
    assert tir.truncdiv(tir.const(-7), 2).value == -3
    assert tir.truncmod(tir.const(-7), 2).value == -1
    assert tir.cast(tir.const(300), "int8").value == 44
    x = tir.Var("x", "int32")
    assert (x + 0) is x and (x * 1) is x
    assert (x * 0).value == 0
    assert isinstance(tir.const(2.0) * 3.0, tir.FloatImm)


def test_comparisons_build_bool_nodes_and_equalop_is_identity():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    assert (x < y).dtype == "bool"
    assert bool(x == x) and not bool(x == y)
    assert bool(x != y)
    node = tir.Select(x == y, x, y).condition
    assert isinstance(node, tir.EQ)
    cache = {x: "found"}
    assert cache[x] == "found"


def test_integer_true_division_is_rejected():
    x = tir.Var("x", "int32")
    with pytest.raises(TVMError, match="//"):
        _ = x / 2


def test_division_by_zero_constant_is_rejected():
    x = tir.Var("x", "int32")
    with pytest.raises(TVMError, match="division by zero"):
        tir.floordiv(x, 0)


def test_symbolic_bool_raises():
    x = tir.Var("x", "int32")
    with pytest.raises(ValueError):
        bool(x < 3)


def test_intrinsics_are_calls_with_table_names():
    f = tir.Var("f", "float32")
    for fn, name in ((tir.exp, "tir.exp"), (tir.sigmoid, "tir.sigmoid"), (tir.erf, "tir.erf"),
                     (tir.sqrt, "tir.sqrt"), (tir.floor, "tir.floor")):
        call = fn(f)
        assert call.op == name and call.dtype == "float32" and name in tir.INTRINSICS
    assert tir.power(f, 2.0).op == "tir.pow"
    assert tir.abs(f).op == "tir.fabs"
    assert isinstance(tir.abs(tir.Var("i", "int32")), tir.Select)
    with pytest.raises(TVMError, match="unknown TIR intrinsic"):
        tir.call_intrin("float32", "tir.no_such_thing", f)


def test_min_max_value():
    assert tir.max_value("int8").value == 127
    assert tir.min_value("int32").value == -(2 ** 31)
    assert tir.max_value("uint8").value == 255
    assert tir.min_value("float32").value == float("-inf")


def test_all_any_fold_and_combine():
    x = tir.Var("x", "int32")
    assert isinstance(tir.all(tir.const(True), x < 3), tir.LT)
    assert isinstance(tir.any(x < 1, x > 5), tir.Or)
    assert tir.all(tir.const(False), x < 3).value == 0


def test_reducer_builds_reduce_node():
    from kiln import te

    A = te.placeholder((8,), name="A")
    k = te.reduce_axis((0, 8), name="k")
    red = te.sum(A[k], axis=k)
    assert isinstance(red, tir.Reduce) and red.axis[0] is k
    assert red.combiner.identity_element[0].value == 0.0


def test_printer_and_script():
    A = tir.decl_buffer((4, 8), "float32", name="A")
    i = tir.Var("i", "int32")
    loop = tir.For(i, 0, 4, tir.ForKind.PARALLEL,
                   tir.BufferStore(A, A[i, 0] * 2.0, [i, 1]))
    func = tir.PrimFunc([A.data], loop, buffer_map={A.data: A}).with_attr("global_symbol", "f")
    text = func.script()
    assert "def f(A: T.Buffer((4, 8), 'float32')):" in text
    assert "for i in T.parallel(4):" in text
    assert "A[i, 1] = A[i, 0] * 2.0" in text
    assert str(func) == text


def test_substitute_and_post_order_visit():
    x, y = tir.Var("x", "int32"), tir.Var("y", "int32")
    assert tir.substitute(x + 1, {x: 41}).value == 42
    replaced = tir.substitute(x * y, {y: x})
    assert replaced.a is x and replaced.b is x
    order = []
    tir.post_order_visit(x * 2 + y, lambda n: order.append(type(n).__name__))
    assert order == ["Var", "IntImm", "Mul", "Var", "Add"]


def test_ir_transform_rewrites_selected_nodes():
    A = tir.decl_buffer((4,), "float32", name="A")
    i = tir.Var("i", "int32")
    loop = tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(A, 1.0, [i]))

    def make_parallel(node):
        return tir.For(node.loop_var, node.min, node.extent, tir.ForKind.PARALLEL, node.body)

    out = tir.ir_transform(loop, None, make_parallel, ["tir.For"])
    assert out.kind == tir.ForKind.PARALLEL and loop.kind == tir.ForKind.SERIAL


def test_nodes_are_immutable():
    x = tir.Var("x", "int32")
    with pytest.raises(AttributeError):
        x.name = "y"


def test_structural_equality_of_alpha_equivalent_functions():
    def make():
        A = tir.decl_buffer((4,), "float32", name="A")
        i = tir.Var("i", "int32")
        body = tir.For(i, 0, 4, tir.ForKind.SERIAL, tir.BufferStore(A, A[i] + 1.0, [i]))
        return tir.PrimFunc([A.data], body, buffer_map={A.data: A})

    f1, f2 = make(), make()
    assert structural_equal(f1, f2)
    assert structural_hash(f1) == structural_hash(f2)


def test_buffer_access_ptr_and_offsets():
    A = tir.decl_buffer((4, 8), "float32", name="A")
    ptr = A.access_ptr("r")
    assert ptr.op == "tir.tvm_access_ptr" and ptr.args[4].value == 1
    assert A.offset_of([2, 3])[0].value == 19
    i = tir.Var("i", "int32")
    assert tir.script(A.offset_of([i, 3])[0]) == "i * 8 + 3"
    assert A.scope() == "global"
    local = tir.decl_buffer((4,), "float32", name="L", scope="local")
    assert local.scope() == "local"
