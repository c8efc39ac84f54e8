"""VM compiler: control flow, recursion, closures, ADTs and tuples (oracle: the interpreter)."""

from __future__ import annotations

import numpy as np
import pytest
from vm_testlib import check_against_interpreter, compile_vm

import kiln
from kiln import relay
from kiln.relay.prelude import Prelude
from kiln.runtime.container import ADT
from kiln.runtime.vm import Opcode


def _opcodes(exe, name="main"):
    return [i.opcode for i in exe.function(name).instructions]


@pytest.mark.parametrize("take_then", [True, False])
def test_if_else_on_tensors(take_then, rng):
    x = relay.var("x", shape=(2, 3))
    y = relay.var("y", shape=(2, 3))
    cond = relay.var("c", shape=(), dtype="bool")
    z = relay.If(cond, relay.add(x, y), relay.multiply(relay.nn.relu(x), y))
    mod = kiln.IRModule.from_expr(relay.Function([cond, x, y], relay.add(z, x)))
    a, b = rng.standard_normal((2, 2, 3), dtype="float32")
    exe, vm = check_against_interpreter(mod, np.array(take_then), a, b)
    expected = (a + b if take_then else np.maximum(a, 0) * b) + a
    np.testing.assert_allclose(vm.run(np.array(take_then), a, b).numpy(), expected, rtol=1e-6)
    assert Opcode.If in _opcodes(exe) and Opcode.Goto in _opcodes(exe)


def test_if_on_computed_condition(rng):
    x = relay.var("x", shape=(4,))
    cond = relay.greater(relay.sum(x), relay.const(0.0))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.If(cond, x, relay.negative(x))))
    for sign in (1.0, -1.0):
        data = (sign * np.abs(rng.standard_normal(4))).astype("float32")
        check_against_interpreter(mod, data)


def _sum_module():
    mod = kiln.IRModule()
    sum_up = relay.GlobalVar("sum_up")
    i = relay.var("i", shape=(), dtype="int64")
    acc = relay.var("acc", shape=(), dtype="int64")
    one, zero = relay.const(1, "int64"), relay.const(0, "int64")
    body = relay.If(relay.equal(i, zero), acc,
                    sum_up(relay.subtract(i, one), relay.add(acc, i)))
    mod[sum_up] = relay.Function([i, acc], body, relay.TensorType((), "int64"))
    n = relay.var("n", shape=(), dtype="int64")
    mod["main"] = relay.Function([n], sum_up(n, zero))
    return mod


def test_recursive_sum_matches_interpreter():
    check_against_interpreter(_sum_module(), np.array(10, "int64"))


def test_tail_recursive_kernel_loop_runs_in_one_frame():
    exe, vm = compile_vm(_sum_module())
    # the recursive call is an Invoke whose result flows only through Move/Goto/Kill to Ret
    assert Opcode.Invoke in _opcodes(exe, "sum_up")
    n = 3000
    assert int(vm.run(np.array(n, "int64")).numpy()) == n * (n + 1) // 2
    assert vm.frame_depth == 0


def test_tail_recursion_to_depth_100000(prelude):
    """``count(n, acc) = match n { z => acc, s(m) => count(m, s(acc)) }`` on a nat of depth
    100,000: each step is a tail call, so the VM reuses one frame instead of 100,000."""
    p = prelude
    mod = p.mod.copy()
    count = relay.GlobalVar("count_down")
    nat = relay.TypeCall(p.nat, [])
    n, acc, m = relay.var("n", nat), relay.var("acc", nat), relay.var("m", nat)
    body = relay.Match(n, [
        relay.Clause(relay.PatternConstructor(p.z, []), acc),
        relay.Clause(relay.PatternConstructor(p.s, [relay.PatternVar(m)]), count(m, p.s(acc))),
    ])
    mod[count] = relay.Function([n, acc], body, nat)
    x = relay.var("x", nat)
    mod["main"] = relay.Function([x], count(x, p.z()))
    _, vm = compile_vm(mod)
    depth = 100_000
    value = ADT(p.z.tag, [])
    for _ in range(depth):
        value = ADT(p.s.tag, [value])
    pushed_depths = []
    push = vm._push  # spy: every non-tail call pushes a frame

    def spy(*args):
        pushed_depths.append(vm.frame_depth)
        return push(*args)

    vm._push = spy
    result = vm.run(value)
    assert pushed_depths == []  # main -> count_down and all 100,000 steps reuse one frame
    seen = 0
    while result.tag == p.s.tag:
        result, seen = result.fields[0], seen + 1
    assert seen == depth and result.tag == p.z.tag
    assert vm.frame_depth == 0


def test_closure_returned_and_applied(rng):
    x = relay.var("x", shape=(2,))
    y = relay.var("y", shape=(2,))
    make_adder = relay.Function([x], relay.Function([y], relay.add(x, y)))
    adder = relay.var("adder")
    body = relay.Let(adder, make_adder(x), adder(relay.multiply(x, x)))
    mod = kiln.IRModule.from_expr(relay.Function([x], body))
    exe, _ = check_against_interpreter(mod, rng.standard_normal(2, dtype="float32"))
    ops = {i.opcode for f in exe.functions for i in f.instructions}
    assert {Opcode.AllocClosure, Opcode.InvokeClosure} <= ops


def test_closure_is_a_return_value(rng):
    """A closure result comes back to Python and captures its free variable."""
    x = relay.var("x", shape=(3,))
    y = relay.var("y", shape=(3,))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.Function([y], relay.add(x, y))))
    _, vm = compile_vm(mod)
    closure = vm.run(np.ones(3, "float32"))
    assert type(closure).__name__ == "VMClosure" and len(closure.free_vars) == 1
    np.testing.assert_array_equal(closure.free_vars[0].numpy(), np.ones(3, "float32"))


def test_recursive_local_closure():
    """``let f = fn (i) { if i == 0 then 0 else i + f(i - 1) }`` (a closure calling itself)."""
    i = relay.var("i", shape=(), dtype="int32")
    f = relay.var("f")
    one, zero = relay.const(1, "int32"), relay.const(0, "int32")
    body = relay.If(relay.equal(i, zero), zero, relay.add(i, f(relay.subtract(i, one))))
    fn = relay.Function([i], body, relay.TensorType((), "int32"))
    n = relay.var("n", shape=(), dtype="int32")
    mod = kiln.IRModule.from_expr(relay.Function([n], relay.Let(f, fn, f(n))))
    _, vm = compile_vm(mod)  # the interpreter has no let-rec; the oracle is n(n+1)/2
    for n in (0, 7, 20):
        assert int(vm.run(np.array(n, "int32")).numpy()) == n * (n + 1) // 2


@pytest.fixture(scope="module")
def prelude():
    return Prelude()


def _int_list(p, values):
    result = p.Nil()
    for v in reversed(values):
        result = p.Cons(relay.const(v, "int32"), result)
    return result


def test_prelude_map_and_nth(prelude):
    p = prelude
    x = relay.var("x", shape=(), dtype="int32")
    inc = relay.Function([x], relay.multiply(x, relay.const(3, "int32")))
    mapped = p.map(inc, _int_list(p, [1, 2, 5]))
    mod = p.mod.copy()
    mod["main"] = relay.Function([], relay.Tuple([p.nth(mapped, relay.const(2, "int32")),
                                                  mapped]))
    _, vm = check_against_interpreter(mod)
    assert int(vm.run()[0].numpy()) == 15


def test_prelude_foldl_sums_a_list(prelude):
    p = prelude
    a = relay.var("a", shape=(), dtype="int32")
    b = relay.var("b", shape=(), dtype="int32")
    total = p.foldl(relay.Function([a, b], relay.add(a, b)), relay.const(0, "int32"),
                    _int_list(p, [4, 5, 6]))
    mod = p.mod.copy()
    mod["main"] = relay.Function([], total)
    _, vm = check_against_interpreter(mod)
    assert int(vm.run().numpy()) == 15


def _shape_module():
    """type Shape = Circle(r) | Rect(w, h) | Empty; area by pattern matching."""
    mod = kiln.IRModule()
    header = relay.GlobalTypeVar("Shape")
    scalar = relay.TensorType((), "float32")
    circle = relay.Constructor("Circle", [scalar], header)
    rect = relay.Constructor("Rect", [scalar, scalar], header)
    empty = relay.Constructor("Empty", [], header)
    mod[header] = relay.TypeData(header, [], [circle, rect, empty])
    s = relay.var("s", relay.TypeCall(header, []))
    r, w, h = relay.var("r", scalar), relay.var("w", scalar), relay.var("h", scalar)
    area = relay.Match(s, [
        relay.Clause(relay.PatternConstructor(circle, [relay.PatternVar(r)]),
                     relay.multiply(relay.const(3.0), relay.multiply(r, r))),
        relay.Clause(relay.PatternConstructor(rect, [relay.PatternVar(w),
                                                     relay.PatternVar(h)]),
                     relay.multiply(w, h)),
        relay.Clause(relay.PatternWildcard(), relay.const(0.0)),
    ])
    area_fn = relay.GlobalVar("area")
    mod[area_fn] = relay.Function([s], area)
    return mod, area_fn, circle, rect, empty


@pytest.mark.parametrize("which", ["circle", "rect", "empty"])
def test_adt_pattern_matching(which):
    mod, area_fn, circle, rect, empty = _shape_module()
    value = {"circle": circle(relay.const(2.0)),
             "rect": rect(relay.const(2.0), relay.const(5.0)),
             "empty": empty()}[which]
    mod["main"] = relay.Function([], area_fn(value))
    exe, vm = check_against_interpreter(mod)
    assert float(vm.run().numpy()) == {"circle": 12.0, "rect": 10.0, "empty": 0.0}[which]
    assert Opcode.GetTag in _opcodes(exe, "area") and Opcode.Fatal in _opcodes(exe, "area")


def test_constructor_used_as_a_function_value():
    mod, area_fn, _, rect, _ = _shape_module()
    make = relay.var("make")
    mod["main"] = relay.Function([], relay.Let(
        make, rect, area_fn(make(relay.const(2.0), relay.const(4.0)))))
    _, vm = check_against_interpreter(mod)
    assert float(vm.run().numpy()) == 8.0


def test_incomplete_match_is_a_fatal_error():
    mod, _, circle, rect, _ = _shape_module()
    header = mod.get_global_type_var("Shape")
    s = relay.var("s", relay.TypeCall(header, []))
    r = relay.var("r", relay.TensorType((), "float32"))
    only_circle = relay.Match(s, [relay.Clause(
        relay.PatternConstructor(circle, [relay.PatternVar(r)]), r)], complete=False)
    mod["main"] = relay.Function([], relay.Let(s, rect(relay.const(1.0), relay.const(1.0)),
                                               only_circle))
    _, vm = compile_vm(mod)
    with pytest.raises(kiln.TVMError, match="fatal"):
        vm.run()


def test_nested_tuple_patterns_and_tuple_io(rng):
    x = relay.var("x", shape=(2,))
    y = relay.var("y", shape=(2,))
    pair = relay.var("pair", relay.TupleType([x.type_annotation, y.type_annotation]))
    a, b = relay.var("a", shape=(2,)), relay.var("b", shape=(2,))
    swapped = relay.Match(pair, [relay.Clause(
        relay.PatternTuple([relay.PatternVar(a), relay.PatternVar(b)]),
        relay.Tuple([relay.subtract(b, a), relay.Tuple([a, relay.add(a, b)])]))])
    mod = kiln.IRModule.from_expr(relay.Function([pair], swapped))
    u, v = rng.standard_normal((2, 2), dtype="float32")
    _, vm = check_against_interpreter(mod, (u, v))
    out = vm.run((u, v))
    np.testing.assert_allclose(out[1][1].numpy(), u + v, rtol=1e-6)


def test_tuple_output_of_a_kernel(rng):
    x = relay.var("x", shape=(6, 4))
    parts = relay.split(x, 3, axis=0)
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.add(parts[0], parts[2])))
    check_against_interpreter(mod, rng.standard_normal((6, 4), dtype="float32"))


def test_global_function_as_a_value(rng):
    mod = kiln.IRModule()
    double = relay.GlobalVar("double")
    x = relay.var("x", shape=(3,))
    mod[double] = relay.Function([x], relay.add(x, x))
    f = relay.var("f")
    mod["main"] = relay.Function([x], relay.Let(f, double, f(f(x))))
    exe, _ = check_against_interpreter(mod, rng.standard_normal(3, dtype="float32"))
    assert Opcode.AllocClosure in _opcodes(exe)


def test_constants_are_loaded_from_the_pool(rng):
    x = relay.var("x", shape=(3,))
    weight = rng.standard_normal(3, dtype="float32")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.multiply(x, relay.const(weight))))
    exe, _ = check_against_interpreter(mod, rng.standard_normal(3, dtype="float32"))
    assert len(exe.constants) == 1 and Opcode.LoadConst in _opcodes(exe)


def test_functions_main_cannot_reach_are_left_out(prelude):
    p = prelude
    mod = p.mod.copy()
    mod["main"] = relay.Function([], p.hd(_int_list(p, [7, 8])))
    exe, vm = compile_vm(mod)
    assert sorted(exe.globals) == ["hd", "main"]
    assert int(vm.run().numpy()) == 7
