"""The Relay text parser on hostile text: a DiagnosticError with line:column, in linear time."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.parser import MAX_NESTING, parse, parse_type
from kiln.runtime.error import DiagnosticError

MB = 1 << 20
DEEP = MAX_NESTING + 50


@pytest.mark.parametrize("text, nesting", [
    ("def @main() { " + "(" * DEEP + "1" + ")" * DEEP + " }", "expressions"),
    ("def @main(%x: float32) { " + "negative(" * DEEP + "%x" + ")" * DEEP + " }",
     "expressions"),
    ("def @main() { " + "fn () { " * DEEP + "1" + " }" * DEEP + " }", "expressions"),
    ("def @main(%x: " + "(" * DEEP + "float32" + ",)" * DEEP + ") { %x }", "types"),
    ("def @main() { nn.relu(1f, x=" + "[" * DEEP + "]" * DEEP + ") }", "attribute lists"),
])
def test_nesting_past_the_limit_is_a_diagnostic_not_a_stack_overflow(text, nesting) -> None:
    with pytest.raises(DiagnosticError, match=f"{nesting} nested more than {MAX_NESTING} "
                                              r"levels deep at line 1, column \d+"):
        parse(text)


def test_nesting_within_the_limit_parses() -> None:
    depth = MAX_NESTING // 4
    mod = parse("def @main(%x: float32) { " + "negative(" * depth + "%x" + ")" * depth + " }")
    body, calls = mod["main"].body, 0
    while isinstance(body, relay.Call):
        body, calls = body.args[0], calls + 1
    assert calls == depth


@pytest.mark.parametrize("literal, message", [
    ("2147483648", "integer literal 2147483648 does not fit int32"),
    ("-2147483649", "does not fit int32"),
    ("256u8", "does not fit uint8"),
    ("-1u32", "does not fit uint32"),
    ("9223372036854775808i64", "does not fit int64"),
    ("1" * 5000, "numeric literal of 5000 characters is too long"),
])
def test_integer_literals_outside_their_dtype_are_parse_errors(literal, message) -> None:
    with pytest.raises(DiagnosticError, match=message + ".* at line 1, column 15"):
        parse(f"def @main() {{ {literal} }}")


def test_integer_literals_at_their_dtype_limits_parse() -> None:
    for literal, value, dtype in [("2147483647", 2147483647, "int32"),
                                  ("-9223372036854775808i64", -(1 << 63), "int64"),
                                  ("255u8", 255, "uint8")]:
        data = parse(f"def @main() {{ {literal} }}")["main"].body.data.numpy()
        assert data.dtype == dtype and int(data) == value


@pytest.mark.parametrize("text, message", [
    ("def @main() { \u0661 }", "unexpected character '\u0661' at line 1, column 15"),
    ("def @main(%x: Tensor[(\u0662,), float32]) { %x }", "unexpected character '\u0662'"),
    ("def @main(%x: Tensor[(1.5,), float32]) { %x }", "expected a dimension .an integer."),
    ("def @main(%x: Tensor[(-3,), float32]) { %x }", r"a dimension -3 is out of range"),
    ("def @main() { meta[relay.Constant][0.5] }", "expected a metadata index"),
])
def test_malformed_numbers_are_parse_errors(text, message) -> None:
    with pytest.raises(DiagnosticError, match=message):
        parse(text)


def _with_metadata(constant_node: dict) -> str:
    nodes = [{"type_key": ""}, {"type_key": "runtime.Map", "keys": ["relay.Constant"],
                                "data": [2]},
             {"type_key": "runtime.Array", "data": [3]}, constant_node]
    graph = json.dumps({"root": 1, "nodes": nodes})
    return "def @main() { meta[relay.Constant][0] }\n#[metadata]\n" + graph


def test_metadata_constant_without_data_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticError, match=r"meta\[relay.Constant\]\[0\] is a constant "
                                              "without data at line 1"):
        parse(_with_metadata({"type_key": "relay.Constant"}))
    with pytest.raises(DiagnosticError, match="is a String, not a relay.Constant"):
        parse(_with_metadata({"type_key": "runtime.String", "repr_str": "add"}))
    with pytest.raises(DiagnosticError, match="metadata section must map kinds to lists"):
        parse("def @main() { 1 }\n#[metadata]\n" + kiln.save_json(5))


def test_metadata_constants_still_round_trip() -> None:
    value = np.arange(6, dtype="float32").reshape(2, 3)
    mod = kiln.IRModule.from_expr(relay.Function([], relay.const(value)))
    loaded = parse(mod.astext(show_meta_data=True))
    np.testing.assert_array_equal(loaded["main"].body.data.numpy(), value)


def test_all_digit_and_odd_variable_names_print_and_read_back() -> None:
    names = ["0", "1", "12", "a:b/c", "x.1", "\u0661"]
    params = [relay.var(n, shape=(2,)) for n in names]
    body = params[0]
    for p in params[1:]:
        body = relay.add(body, p)
    mod = kiln.IRModule.from_expr(relay.Function(params, body))
    text = mod.astext()  # used to loop forever on all-digit names
    loaded = parse(text)
    assert kiln.ir.structural_equal(loaded["main"], mod["main"], map_free_vars=True)
    assert len({p.name_hint for p in loaded["main"].params}) == len(names)


ADVERSARIAL_TEXT = {
    "deep parentheses": "def @main() { " + "(" * MB,
    "a wide tuple under deep scopes": (  # a quarter megabyte: this one parses completely
        "def @main(%x: float32) { " + "fn (%x: float32) { " * 300 + "(" + "%x, " * (MB // 16)
        + ")" + " }" * 300 + " }"),
    "unterminated strings": 'def @main() { f(a="' + '\\"' * (MB // 2),
}


@pytest.mark.parametrize("case", sorted(ADVERSARIAL_TEXT))
def test_adversarial_text_up_to_a_megabyte_takes_seconds(case) -> None:
    start = time.process_time()
    try:
        parse(ADVERSARIAL_TEXT[case])
    except DiagnosticError:
        pass
    assert time.process_time() - start < 20  # linear: ~2 s here; quadratic would be hours


def test_parse_type_refuses_non_text_and_trailing_text() -> None:
    with pytest.raises(DiagnosticError, match="expected text, got bytes"):
        parse_type(b"float32")
    with pytest.raises(DiagnosticError, match="unexpected text after the type"):
        parse_type("float32 float32")
