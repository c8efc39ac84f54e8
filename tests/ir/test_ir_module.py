"""IRModule: adding, looking up, replacing functions and ADTs."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.ir.adt import Constructor, TypeData
from kiln.ir.module import IRModule
from kiln.ir.type import GlobalTypeVar, TypeCall, TypeVar
from kiln.relay.op.tensor import add
from kiln.runtime.error import TVMError


def _identity(shape=(2,)):
    x = relay.var("x", shape=shape)
    return relay.Function([x], x)


def test_from_expr_wraps_free_vars_in_main():
    a, b = relay.var("a", shape=(1,)), relay.var("b", shape=(1,))
    mod = IRModule.from_expr(add(a, b))
    main = mod["main"]
    assert [p.name_hint for p in main.params] == ["a", "b"]
    assert main.params[0] is a and main.body.args[1] is b
    assert mod.get_global_var("main").name_hint == "main"


def test_from_expr_keeps_a_function():
    func = _identity()
    mod = IRModule.from_expr(func, functions={"helper": _identity((3,))})
    assert mod["main"] is func and "helper" in mod


def test_lookup_by_name_or_global_var():
    mod = IRModule({"f": _identity()})
    gv = mod.get_global_var("f")
    assert mod[gv] is mod["f"]
    assert "f" in mod and gv in mod and "g" not in mod
    assert mod.get_global_vars() == [gv]
    with pytest.raises(KeyError, match="Cannot find global var 'g'"):
        mod["g"]
    with pytest.raises(TVMError):
        mod.get_global_var("g")


def test_setitem_replaces_and_add_refuses_duplicates():
    mod = IRModule()
    first, second = _identity(), _identity((5,))
    mod["f"] = first
    gv = mod.get_global_var("f")
    mod["f"] = second
    assert mod[gv] is second and mod.get_global_var("f") is gv
    with pytest.raises(TVMError, match="Duplicate definition"):
        mod.add(gv, first)
    with pytest.raises(TVMError, match="Duplicate global function name"):
        mod[relay.GlobalVar("f")] = first


def test_only_functions_can_be_added():
    with pytest.raises(TypeError, match="from_expr"):
        IRModule()["f"] = relay.var("x")


def test_type_definitions_and_constructor_tags():
    mod = IRModule()
    lst, opt = GlobalTypeVar("List"), GlobalTypeVar("Option")
    a = TypeVar("a")
    cons = Constructor("Cons", [a, TypeCall(lst, [a])], lst)
    nil = Constructor("Nil", [], lst)
    some, none = Constructor("Some", [a], opt), Constructor("None", [], opt)
    mod[lst] = TypeData(lst, [a], [cons, nil])
    mod[opt] = TypeData(opt, [a], [some, none])
    assert mod[lst].constructors == (cons, nil)
    assert mod.get_global_type_var("List") is lst
    tags = {c.tag for c in (cons, nil, some, none)}
    assert len(tags) == 4
    assert cons.tag & 0xFFFFFF == 0 and nil.tag & 0xFFFFFF == 1
    assert mod.get_constructor(nil.tag) is nil
    assert mod.get_type("List") == [lst, cons, nil]
    with pytest.raises(KeyError):
        mod.get_constructor(12345)


def test_update_copy_and_attrs():
    mod = IRModule({"f": _identity()})
    other = IRModule({"g": _identity((3,))})
    mod.update(other)
    assert set(gv.name_hint for gv in mod.get_global_vars()) == {"f", "g"}
    copy = mod.copy()
    copy["h"] = _identity()
    assert "h" not in mod
    tagged = mod.with_attr("executor", "graph")
    assert tagged.get_attr("executor") == "graph" and mod.get_attr("executor") is None
    gv = mod.get_global_var("f")
    mod.update_func(gv, _identity((7,)))
    assert mod["f"].params[0].type_annotation.concrete_shape == (7,)


def test_text_names_the_functions():
    text = IRModule.from_expr(_identity()).astext()
    assert "@main" in text and "%x" in text
    assert str(IRModule.from_expr(_identity())) == text


def test_top_level_name():
    assert kiln.IRModule is IRModule


def test_json_round_trip_rebuilds_the_name_tables():
    lst, a = GlobalTypeVar("List"), TypeVar("a")
    nil = Constructor("Nil", [], lst)
    x = relay.var("x", shape=(2,))
    mod = IRModule.from_expr(relay.Function([x], add(x, relay.const(1.0))).with_attr("Inline", 1))
    mod[lst] = TypeData(lst, [a], [Constructor("Cons", [a, TypeCall(lst, [a])], lst), nil])
    loaded = kiln.ir.load_json(kiln.ir.save_json(mod))
    kiln.ir.assert_structural_equal(mod, loaded)
    assert loaded["main"].attrs["Inline"] == 1
    assert loaded.get_constructor(nil.tag).name_hint == "Nil"
    assert "main" in loaded and loaded.get_global_type_var("List").name_hint == "List"
