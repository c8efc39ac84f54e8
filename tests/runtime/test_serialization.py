"""save_json / load_json: TVM's layout, sharing, NDArrays, scalars, and malformed input."""

import base64
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln.runtime import ndarray as nd
from kiln.runtime.container import ADT, Array, Map, ShapeTuple, String, tuple_object
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object
from kiln.runtime.serialization import load_json, save_json


@register_object("test.serialization.Leaf")
class Leaf(Object):
    _fields = {"name": str, "scale": float, "count": int, "flag": bool, "dtype": "dtype",
               "weights": "ndarray", "blob": bytes}


@register_object("test.serialization.Pair")
class Pair(Object):
    _fields = {"left": Object, "right": Object, "extra": "any"}


@register_object("test.serialization.Named")
class Named(Object):
    """Stored by name, like an operator looked up in a registry."""

    _fields = {"name": str}

    def _repr_bytes(self):
        return self.name

    @classmethod
    def _from_repr_bytes(cls, text):
        return cls(text)


def _leaf(name="w", weights=None):
    weights = nd.array(np.arange(4, dtype="float32")) if weights is None else weights
    return Leaf(name, 0.1, -3, True, DataType("int8x4"), weights, b"\x00\xff")


def test_layout_follows_tvm():
    leaf = _leaf()
    graph = json.loads(save_json(Pair(leaf, None, "hi")))
    assert graph["root"] == 1 and graph["attrs"] == {"tvm_version": "0.16.0"}
    nodes = graph["nodes"]
    assert nodes[0] == {"type_key": ""}
    assert nodes[1] == {"type_key": "test.serialization.Pair",
                        "attrs": {"extra": "3", "left": "2", "right": "0"}}
    assert nodes[2] == {
        "type_key": "test.serialization.Leaf",
        "attrs": {"blob": "AP8=", "count": "-3", "dtype": "int8x4", "flag": "1",
                  "name": "w", "scale": "0.10000000000000001", "weights": "0"},
    }
    assert nodes[3] == {"type_key": "runtime.String", "repr_str": "hi"}
    blob = base64.b64decode(graph["b64ndarrays"][0])
    assert blob[:8] == struct.pack("<Q", 0xDD5E40F096B4A13F)
    assert blob[-16:] == np.arange(4, dtype="float32").tobytes()


def test_reflected_fields_round_trip_with_their_types():
    loaded = load_json(save_json(_leaf()))
    assert isinstance(loaded, Leaf)
    assert (loaded.name, loaded.scale, loaded.count, loaded.flag) == ("w", 0.1, -3, True)
    assert loaded.dtype == "int8x4" and isinstance(loaded.dtype, DataType)
    assert loaded.blob == b"\x00\xff"
    assert isinstance(loaded.weights, nd.NDArray)
    assert loaded.weights.numpy().tolist() == [0, 1, 2, 3]


def test_doubles_survive_exactly():
    for value in (0.1, 1 / 3, -2.5e-300, 1e308, float("inf"), float("-inf")):
        leaf = Leaf("x", value, 0, False, "float32", nd.array([1.0]), b"")
        assert load_json(save_json(leaf)).scale == value
    nan_leaf = Leaf("x", float("nan"), 0, False, "float32", nd.array([1.0]), b"")
    assert np.isnan(load_json(save_json(nan_leaf)).scale)


def test_shared_nodes_load_as_one_object():
    weights = nd.array(np.ones(2, "float32"))
    a, b = _leaf("a", weights), _leaf("b", weights)
    shared = [a, b]
    root = Pair(Pair(a, b, shared), a, {"x": shared, "y": b})
    text = save_json(root)
    assert len(json.loads(text)["b64ndarrays"]) == 1
    loaded = load_json(text)
    inner = loaded.left
    assert inner.left is loaded.right  # a
    assert inner.extra is loaded.extra["x"]  # the shared list
    assert inner.extra[1] is inner.right is loaded.extra["y"]  # b
    assert inner.left.weights is inner.right.weights  # one NDArray


def test_lists_and_dicts_come_back_as_arrays_and_maps_that_compare_equal():
    value = {"shape": [1, 2, 3], "scale": 0.5, "on": False, "name": "x", "none": None,
             "nested": ({"k": [1.5]},)}
    loaded = load_json(save_json(value))
    assert isinstance(loaded, Map) and isinstance(loaded["shape"], Array)
    assert loaded == value
    assert isinstance(loaded["name"], String) and loaded["none"] is None
    assert loaded["on"] is False and type(loaded["shape"][0]) is int


def test_scalars_are_boxed_inside_containers():
    nodes = json.loads(save_json([7, 2.5, True]))["nodes"]
    assert nodes[2:] == [
        {"type_key": "runtime.BoxInt", "attrs": {"value": "7"}},
        {"type_key": "runtime.BoxFloat", "attrs": {"value": "2.5"}},
        {"type_key": "runtime.BoxBool", "attrs": {"value": "1"}},
    ]


def test_maps_with_string_keys_use_keys_else_interleave():
    nodes = json.loads(save_json({"a": "x"}))["nodes"]
    assert nodes[1] == {"type_key": "runtime.Map", "keys": ["a"], "data": [2]}
    key = Named("k")
    graph = json.loads(save_json({key: "v"}))
    assert graph["nodes"][1] == {"type_key": "runtime.Map", "data": [2, 3]}
    loaded = load_json(json.dumps(graph))
    ((k, v),) = loaded.items()
    assert isinstance(k, Named) and k.name == "k" and v == "v"


def test_runtime_containers_and_ndarray_nodes_round_trip():
    arr = nd.array(np.arange(6, dtype="int16").reshape(2, 3))
    value = [ShapeTuple([2, 3]), tuple_object([arr, 1]), ADT(3, []), arr]
    loaded = load_json(save_json(value))
    assert type(loaded[0]) is ShapeTuple and loaded[0] == (2, 3)
    assert loaded[1].tag == 0 and loaded[1][1] == 1
    assert loaded[1][0] is loaded[3]
    np.testing.assert_array_equal(loaded[3].numpy(), arr.numpy())
    assert loaded[2].tag == 3 and len(loaded[2]) == 0


def test_repr_bytes_hook_stores_a_string():
    graph = json.loads(save_json(Named("nn.conv2d")))
    assert graph["nodes"][1] == {"type_key": "test.serialization.Named", "repr_str": "nn.conv2d"}
    assert load_json(json.dumps(graph)).name == "nn.conv2d"


def test_none_and_the_null_root():
    assert load_json(save_json(None)) is None
    assert json.loads(save_json(None))["root"] == 0
    loaded = load_json(save_json(Leaf(None, None, None, None, None, None, None)))
    assert loaded.name is None and loaded.count is None and loaded.weights is None


def test_deep_graphs_do_not_hit_the_recursion_limit():
    node = None
    for i in range(5000):
        node = Pair(node, None, i)
    loaded = load_json(save_json(node))
    depth = 0
    while loaded is not None:
        depth, loaded = depth + 1, loaded.left
    assert depth == 5000


def test_reads_tvm_written_container_keys():
    text = json.dumps({
        "root": 1,
        "nodes": [{"type_key": ""}, {"type_key": "Array", "data": [2, 3]},
                  {"type_key": "runtime.String", "repr_str": "a"},
                  {"type_key": "Map", "keys": ["k"], "data": [2]}],
        "b64ndarrays": [],
        "attrs": {"tvm_version": "0.16.0"},
    })
    assert load_json(text) == ["a", {"k": "a"}]


def test_top_level_names():
    assert kiln.save_json is save_json and kiln.runtime.load_json is load_json


def _graph(nodes, root=1, **extra):
    return json.dumps({"root": root, "nodes": [{"type_key": ""}, *nodes], **extra})


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"nodes": [{"type_key": ""}]}), "missing top-level key 'root'"),
        (json.dumps({"root": 0}), "missing top-level key 'nodes'"),
        (json.dumps({"root": 0, "nodes": []}), "non-empty list"),
        (_graph([], root=5), "root: node index 5 is out of range"),
        (_graph([], root="x"), "not a node index"),
        (_graph([{"type_key": "no.such.Type"}]), "unknown type_key 'no.such.Type'"),
        (_graph([{"attrs": {}}]), "no string 'type_key'"),
        (_graph(["oops"]), "node 1 is not a JSON object"),
        (_graph([{"type_key": "runtime.Array", "data": [9]}]), "out of range"),
        (_graph([{"type_key": "runtime.Array", "data": "12"}]), "'data' must be a list"),
        (_graph([{"type_key": "runtime.Map", "keys": ["a", "b"], "data": [0]}]),
         "2 keys but 1 values"),
        (_graph([{"type_key": "runtime.Map", "data": [0]}]), "odd number"),
        (_graph([{"type_key": "runtime.String"}]), "no 'repr_str'"),
        (_graph([{"type_key": "runtime.BoxInt", "attrs": {"value": "x1"}}]), "malformed"),
        (_graph([{"type_key": "runtime.BoxInt", "attrs": {"value": 3}}]), "names to strings"),
        (_graph([{"type_key": "runtime.Array", "data": [1]}]), "cycle"),
        (_graph([{"type_key": "test.serialization.Pair", "attrs": {"left": "2"}},
                 {"type_key": "test.serialization.Pair", "attrs": {"left": "1"}}]), "cycle"),
        (_graph([{"type_key": "test.serialization.Leaf", "attrs": {"count": "three"}}]),
         "malformed"),
        (_graph([{"type_key": "test.serialization.Leaf", "attrs": {"dtype": "float31"}}]),
         "unknown data type 'float31'"),
        (_graph([{"type_key": "test.serialization.Leaf", "attrs": {"weights": "0"}}]),
         "b64ndarrays index 0 is out of range"),
        (_graph([{"type_key": "test.serialization.Leaf", "attrs": {"weights": "0"}}],
                b64ndarrays=["!!!"]), "not valid base64"),
        (_graph([{"type_key": "test.serialization.Leaf", "attrs": {"weights": "0"}}],
                b64ndarrays=[base64.b64encode(b"\x00" * 20).decode()]), "bad NDArray magic"),
        (_graph([{"type_key": "runtime.NDArray", "repr_b64": "AAAA"}]), "truncated"),
        (_graph([{"type_key": "test.serialization.Pair", "attrs": {"left": "1.5"}}]),
         "not a node index"),
    ],
)
def test_malformed_input_raises_a_clear_tvmerror(text, message):
    with pytest.raises(TVMError, match=message):
        load_json(text)


def test_unserializable_values_raise():
    with pytest.raises(TVMError, match="cannot serialize a value of type Device"):
        save_json([kiln.cpu(0)])
    with pytest.raises(TVMError, match="not an NDArray"):
        save_json(Leaf("x", 1.0, 1, True, "float32", np.zeros(2), b""))


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8)
    | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(_json_values)
def test_any_nested_plain_value_round_trips(value):
    assert load_json(save_json(value)) == value


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_garbage_text_raises_tvmerror(text):
    try:
        load_json(text)
    except TVMError:
        pass
