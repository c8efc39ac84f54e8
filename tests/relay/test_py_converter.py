"""relay.testing.to_python / run_as_python: Relay programs run as Python scripts.

Oracles: NumPy for tensor programs, and the Relay interpreter for ADT/closure programs (an
independent executor: the script calls each operator compiled on its own by the VM).
"""

import ast

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.relay.prelude import Prelude
from kiln.relay.testing import count, make_nat_expr, run_as_python, to_python


def test_tensor_program_with_let_if_and_tuples_matches_numpy():
    x = relay.var("x", shape=(3, 4), dtype="float32")
    y = relay.var("y", shape=(4,), dtype="float32")
    t = relay.var("t")
    body = relay.Let(t, relay.Tuple([relay.nn.relu(x), relay.exp(y)]),
                     relay.If(relay.greater(relay.sum(relay.TupleGetItem(t, 1)), relay.const(5.0)),
                              relay.add(relay.TupleGetItem(t, 0), relay.TupleGetItem(t, 1)),
                              relay.TupleGetItem(t, 0)))
    f = relay.Function([x, y], body)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4), dtype="float32"), rng.standard_normal(4, dtype="float32")
    got = run_as_python(f(relay.const(a), relay.const(b)))
    want = np.maximum(a, 0) + np.exp(b) if np.exp(b).sum() > 5 else np.maximum(a, 0)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_returns_an_ast_module_whose_source_reads():
    x = relay.var("x", shape=(2,), dtype="float32")
    tree = to_python(relay.Function([x], relay.negative(x)))
    assert isinstance(tree, ast.Module)
    source = ast.unparse(tree)
    assert "_lowered_op_" in source and "_py_out =" in source


def test_recursive_global_and_closures_match_the_interpreter():
    mod = tvm.IRModule()
    p = Prelude(mod)
    fact = relay.GlobalVar("fact")
    n = relay.var("n", "int32")
    mod[fact] = relay.Function([n], relay.If(
        relay.less_equal(n, relay.const(1)), relay.const(1),
        relay.multiply(n, fact(relay.subtract(n, relay.const(1))))))
    x = relay.var("x", "int32")
    add_n = relay.Function([x], relay.add(x, n))  # captures n
    k = relay.var("k", "int32")
    prog = relay.Function([k], relay.Tuple([fact(k), p.map(relay.Function([n], add_n(n)),
                                                           p.cons(k, p.nil()))]))
    got = run_as_python(prog(relay.const(5)), mod)
    want = relay.create_executor("debug", mod=mod).evaluate(prog(relay.const(5)))
    assert int(got[0].numpy()) == int(want[0].numpy()) == 120
    assert int(got[1].fields[0].numpy()) == 10
    assert got[1].constructor.name_hint == "Cons"


def test_match_refs_and_let_bound_recursion():
    mod = tvm.IRModule()
    p = Prelude(mod)
    # count a nat with a let-bound recursive closure and a reference cell
    nat_arg, m, cell = relay.var("m", p.nat()), relay.var("mm"), relay.var("cell")
    loop = relay.var("loop")
    body = relay.Match(nat_arg, [
        relay.Clause(relay.PatternConstructor(p.z), relay.RefRead(cell)),
        relay.Clause(relay.PatternConstructor(p.s, [relay.PatternVar(m)]),
                     relay.Let(relay.var("_"), relay.RefWrite(
                         cell, relay.add(relay.RefRead(cell), relay.const(2))), loop(m)))])
    prog = relay.Let(cell, relay.RefCreate(relay.const(0)),
                     relay.Let(loop, relay.Function([nat_arg], body),
                               loop(make_nat_expr(p, 4))))
    assert int(run_as_python(prog, mod).numpy()) == 8
    double = relay.var("d")
    tup = relay.var("t")
    swap = relay.Match(relay.Tuple([relay.const(1), relay.const(2)]), [
        relay.Clause(relay.PatternTuple([relay.PatternVar(double), relay.PatternVar(tup)]),
                     relay.subtract(double, tup))])
    assert int(run_as_python(swap, mod).numpy()) == -1
    assert count(p, run_as_python(p.s(p.s(p.z())), mod)) == 2


def test_dynamic_shapes_and_tensor_arrays_run():
    mod = tvm.IRModule()
    p = Prelude(mod)
    x = relay.var("x", shape=(relay.Any(), 2), dtype="float32")
    stack = p.get_global_var("tensor_array_stack", "float32")
    unstack = p.get_global_var("tensor_array_unstack_tensor2", "float32")
    data = np.arange(6, dtype="float32").reshape(3, 2)
    got = run_as_python(relay.Function([x], stack(unstack(x)))(relay.const(data)), mod)
    np.testing.assert_array_equal(got.fields[0].numpy(), data)


def test_free_variables_and_unknown_nodes_are_named():
    x = relay.var("x", shape=(2,), dtype="float32")
    with pytest.raises(tvm.TVMError, match="free variable %x"):
        to_python(relay.negative(x))
    with pytest.raises(tvm.TVMError, match="expects a Relay expression, got str"):
        to_python("not relay")


def test_operators_differing_only_in_a_negative_axis_run_their_own_kernels():
    # softmax(axis=-1) and softmax(axis=-2) hash alike (Python hashes -1 and -2 alike); the
    # second once ran the first's compiled operator
    x = relay.var("x", shape=(3, 3), dtype="float32")
    data = np.random.default_rng(1).standard_normal((3, 3), dtype="float32")
    for axis in (-1, -2):
        got = run_as_python(relay.Let(x, relay.const(data), relay.nn.softmax(x, axis=axis)))
        e = np.exp(data - data.max(axis, keepdims=True))
        np.testing.assert_allclose(got.numpy(), e / e.sum(axis, keepdims=True), rtol=1e-5)


def test_constants_holding_nan_and_inf_run():
    # repr(nan) is the name nan, which the script does not define
    data = np.array([[np.nan, np.inf], [-np.inf, -0.0]], "float32")
    got = run_as_python(relay.add(relay.const(data), relay.const(np.float32(1))))
    np.testing.assert_array_equal(got.numpy(), data + np.float32(1))


def test_globals_whose_names_clean_alike_stay_apart():
    # @f.x and @f_x both became _global_f_x: the second call ran the first function
    mod = tvm.IRModule()
    x, y = (relay.var(n, shape=(2,), dtype="float32") for n in "xy")
    dot, underscore = relay.GlobalVar("f.x"), relay.GlobalVar("f_x")
    mod[dot] = relay.Function([x], relay.add(x, relay.const(np.float32(1))))
    mod[underscore] = relay.Function([y], relay.multiply(y, relay.const(np.float32(10))))
    data = np.array([1, 2], "float32")
    got = run_as_python(relay.Tuple([dot(relay.const(data)), underscore(relay.const(data))]),
                        mod)
    np.testing.assert_array_equal(got[0].numpy(), data + 1)
    np.testing.assert_array_equal(got[1].numpy(), data * 10)
