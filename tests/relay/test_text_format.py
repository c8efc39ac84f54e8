"""The Relay text format: printing, parsing back, structural equality after the round trip."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.ir.structural import assert_structural_equal
from kiln.relay.parser import parse, parse_expr, parse_type
from kiln.relay.prelude import Prelude
from kiln.relay.printer import astext
from kiln.runtime.error import DiagnosticError


def _roundtrip(mod_or_expr):
    text = astext(mod_or_expr)
    back = parse(text) if isinstance(mod_or_expr, tvm.IRModule) else parse_expr(text)
    assert_structural_equal(mod_or_expr, back)
    return text


def test_add_chain_prints_tvm_text_and_round_trips():
    a, b, c = (relay.var(n, shape=(1, 10)) for n in "abc")
    mod = tvm.IRModule.from_expr(relay.Function([a, b, c], relay.add(relay.add(a, b), c)))
    text = _roundtrip(mod)
    assert text.splitlines()[:4] == [
        '#[version = "0.0.5"]',
        "def @main(%a: Tensor[(1, 10), float32], %b: Tensor[(1, 10), float32], "
        "%c: Tensor[(1, 10), float32]) {",
        "  %0 = add(%a, %b);",
        "  add(%0, %c)",
    ]


def test_conv_bn_relu_attrs_and_constants_round_trip():
    x = relay.var("x", shape=(1, 3, 8, 8))
    w = relay.const(np.random.rand(4, 3, 3, 3).astype("float32"))
    gamma, beta, mean, var = (relay.const(np.random.rand(4).astype("float32")) for _ in range(4))
    y = relay.nn.conv2d(x, w, padding=(1, 1), channels=4, kernel_size=(3, 3))
    y = relay.nn.batch_norm(y, gamma, beta, mean, var, epsilon=1e-3)[0]
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(y)))
    text = _roundtrip(mod)
    assert "nn.conv2d(%x, meta[relay.Constant][0], padding=[1, 1, 1, 1], channels=4, " \
           "kernel_size=[3, 3])" in text
    assert "epsilon=0.001" in text and "#[metadata]" in text


def test_scalars_let_if_tuple_closure_ref_round_trip():
    x = relay.var("x", shape=(), dtype="int64")
    y = relay.var("y")
    f = relay.var("f")
    inner = relay.Function([y], relay.add(y, relay.const(1.5)))
    r = relay.var("r")
    body = relay.Let(f, inner, relay.Let(r, relay.RefCreate(relay.const(2, "int64")),
                     relay.If(relay.less(x, relay.const(3, "int64")),
                              relay.Tuple([relay.RefRead(r), f(relay.const(0.5))]),
                              relay.Tuple([x, relay.const(np.float32(2.0))]))))
    text = _roundtrip(relay.Function([x], body))
    assert "3i64" in text and "1.5f" in text and "ref_read(%r)" in text


def test_prelude_module_round_trips_and_matches_by_constructor():
    p = Prelude()
    text = _roundtrip(p.mod)
    assert "type List[A] {" in text and "def @map[A, B](%f: fn (A) -> B" in text
    List, Cons, Nil = p.mod.get_type("List")
    assert [c.name_hint for c in (Cons, Nil)] == ["Cons", "Nil"]


def test_types_parse():
    assert parse_type("Tensor[(1, ?), float32]").shape[1].__class__.__name__ == "Any"
    text = str(parse_type("(int32, Tensor[(2,), int8])"))
    assert text == "(Tensor[(), int32], Tensor[(2,), int8])"


@pytest.mark.parametrize("text, message", [
    ("def @main(%x: Tensor[(2,), float32]) { add(%x, %y) }", "unbound local variable %y"),
    ("def @main() { no_such_op(1) }", "unknown operator or constructor 'no_such_op'"),
    ("def @main(%x) { %x", "expected '}'"),
    ("def @main(%x: Tensor[(2), float32]) { %x } $", r"unexpected character '\$'"),
    ("def @main() { @nowhere() }", "unknown global function @nowhere"),
    ("def @main() { meta[relay.Constant][0] }", "is not in the metadata section"),
    ("def @main(%x: Tensor[(2,), float32]) { nn.relu(%x, axis=1) }", "takes no attributes"),
])
def test_malformed_text_raises_diagnostic_with_location(text, message):
    with pytest.raises(DiagnosticError, match=message) as err:
        parse(text)
    assert "line 1, column" in str(err.value)


def test_garbage_metadata_is_a_clear_error():
    with pytest.raises(DiagnosticError, match="malformed metadata"):
        parse("def @main() { 1 }\n#[metadata]\n{not json")


def test_deep_chain_prints_and_parses():
    x = relay.var("x", shape=(2,))
    y = x
    for _ in range(3000):
        y = relay.nn.relu(y)
    func = relay.Function([x], y)
    assert len(astext(func).splitlines()) == 3003
    _roundtrip(func)
