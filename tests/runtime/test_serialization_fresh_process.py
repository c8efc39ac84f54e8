"""Saved IR loads in a fresh process (every node type registers there), and load_json checks
what it builds: node field types, nesting, Unicode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# tests/ is on sys.path under pytest (it holds conftest.py), so tests/fuzz imports as `fuzz`.
from fuzz.targets import RICH_RELAY_TEXT  # every kind of Relay node in one module

import kiln
from kiln import relay
from kiln.ir import structural_equal
from kiln.runtime.error import TVMError
from kiln.runtime.object import (
    Object,
    import_node_type_modules,
    node_type_modules,
    type_key_to_class,
)
from kiln.runtime.serialization import load_json, save_json

ROOT = Path(kiln.__file__).parent


def _in_fresh_process(code: str, stdin: str) -> str:
    """Run ``code`` in a new interpreter that imported nothing but what it says."""
    done = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True,
                          text=True, cwd=ROOT.parent, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_saved_module_with_every_relay_node_kind_loads_in_a_fresh_process() -> None:
    mod = relay.transform.InferType()(kiln.parser.parse(RICH_RELAY_TEXT))
    text = save_json(mod)
    assert structural_equal(load_json(text), mod)
    # Only `import kiln`: node types and operators must be found without other imports.
    resaved = _in_fresh_process(
        "import sys, kiln; sys.stdout.write(kiln.save_json(kiln.load_json(sys.stdin.read())))",
        text)
    assert resaved == text


def test_relay_text_with_metadata_parses_in_a_fresh_process() -> None:
    weight = np.arange(12, dtype="float32").reshape(3, 4)
    x = relay.var("x", shape=(2, 3))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, relay.const(weight.T))))
    text = mod.astext(show_meta_data=True)
    assert "meta[relay.Constant][0]" in text
    reprinted = _in_fresh_process(
        "import sys, kiln; sys.stdout.write(kiln.parser.parse(sys.stdin.read())"
        ".astext(show_meta_data=True))", text)
    assert reprinted == text


def _modules_registering_objects() -> set[str]:
    """Modules outside the runtime's own core whose source registers object types."""
    found = set()
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        calls = "register_object(" in path.read_text().replace("def register_object(", "")
        in_core = path.parent == ROOT / "runtime"  # imported by load_json itself
        if calls and not in_core:
            found.add(module)
    return found


def test_every_module_registering_node_types_is_listed() -> None:
    missing = _modules_registering_objects() - set(node_type_modules())
    assert not missing, f"add to register_node_type_modules in kiln/__init__.py: {missing}"


def _defined_at_top(cls: type) -> bool:
    """Whether ``cls`` is its module's own attribute (not a class a doctest defined while
    running with that module's globals)."""
    return getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is cls


def _kiln_node_classes() -> dict[str, type]:
    import_node_type_modules()
    classes, pending = {}, [Object]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        key = cls.__dict__.get("type_key")
        registered = "_type_index" in cls.__dict__  # Module kinds set a type_key only
        if (registered and cls.__module__.startswith("kiln.") and _defined_at_top(cls)
                and type_key_to_class(key) is cls):
            classes[key] = cls
    return classes


def test_every_node_type_resolves_in_a_fresh_process() -> None:
    classes = _kiln_node_classes()
    assert len(classes) > 100
    code = ("import json, sys, kiln\n"
            "from kiln.runtime.object import type_key_to_class\n"
            "keys = json.load(sys.stdin)\n"
            "print(json.dumps({k: type_key_to_class(k).__module__ for k in keys}))\n")
    resolved = json.loads(_in_fresh_process(code, json.dumps(sorted(classes))))
    assert resolved == {key: cls.__module__ for key, cls in classes.items()}


def _document(*nodes: dict, root: int = 1) -> str:
    return json.dumps({"root": root, "nodes": [{"type_key": ""}, *nodes]})


@pytest.mark.parametrize("nodes, message", [
    # a variable whose type annotation is a Let expression
    (({"type_key": "relay.Var", "attrs": {"vid": "2", "type_annotation": "3"}},
      {"type_key": "relay.Id", "attrs": {"name_hint": "x"}},
      {"type_key": "relay.Let", "attrs": {}}),
     r"node 1 \(relay.Var\) field 'type_annotation' must hold a Type .*node 3 is a relay.Let"),
    # a call whose arguments array holds a type
    (({"type_key": "relay.Call", "attrs": {"op": "0", "args": "2"}},
      {"type_key": "runtime.Array", "data": [3]},
      {"type_key": "TupleType", "attrs": {}}),
     r"field 'args' must hold a .*node 2 is a runtime.Array"),
    # a function whose parameter list holds a string
    (({"type_key": "relay.Function", "attrs": {"params": "2"}},
      {"type_key": "runtime.Array", "data": [3]},
      {"type_key": "runtime.String", "repr_str": "x"}),
     "field 'params' must hold a relay.Var"),
])
def test_load_json_checks_node_field_types(nodes, message) -> None:
    with pytest.raises(TVMError, match=message):
        load_json(_document(*nodes))


def test_load_json_refuses_deep_nesting_and_lone_surrogates() -> None:
    with pytest.raises(TVMError, match="nests arrays or objects too deeply to read "
                                       r"\(500 levels deep at line 2, column 509\)"):
        load_json('{"root": 1,\n "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(TVMError, match="not valid Unicode"):
        load_json(_document({"type_key": "runtime.String", "repr_str": "\ud800"}))
    # a deep chain of Arrays (not JSON nesting) still loads, without recursion
    depth = 20_000
    nodes = [{"type_key": "runtime.Array", "data": [i + 2]} for i in range(depth)]
    nodes.append({"type_key": "runtime.String", "repr_str": "leaf"})
    value = load_json(_document(*nodes))
    for _ in range(depth):
        value = value[0]
    assert value == "leaf"
