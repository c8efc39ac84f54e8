"""save_json / load_json: object graphs in TVM's JSON layout, by reflection.

Entry points: :func:`save_json`, :func:`load_json`.

Layout (TVM ``src/node/serialization.cc``)::

    {"root": 1,
     "nodes": [{"type_key": ""},                                   # node 0: the null object
               {"type_key": "relay.Var", "attrs": {"vid": "2", ...}},
               {"type_key": "runtime.String", "repr_str": "x"},
               {"type_key": "runtime.Array", "data": [3, 4]},
               {"type_key": "runtime.Map", "keys": ["a"], "data": [5]}, ...],
     "b64ndarrays": ["P6G0lvBAXt0A..."],
     "attrs": {"tvm_version": "0.16.0"}}

Nodes are numbered in pre-order from the root (root = 1), each object once, so shared
sub-objects stay shared after loading. A reflected object stores every field of
``fields_of(cls)`` in ``attrs`` as a **string**: ints and bools as decimal, floats with 17
significant digits, dtypes as ``"float32"``, ``str`` as is, ``bytes`` as base64, ``"ndarray"``
fields as an index into ``b64ndarrays`` (base64 NDArray blobs), and object / ``"any"`` fields
as a node index (``"0"`` for None). None in a scalar field is ``"null"`` (a ``str`` field that
is None is left out). Python lists/tuples become Array nodes and dicts Map nodes (string keys
in ``keys``, else interleaved key, value indices in ``data``); they load back as
:class:`~kiln.runtime.container.Array` / :class:`~kiln.runtime.container.Map`, which compare
equal to them. Plain scalars inside containers are boxed as ``runtime.BoxInt``,
``runtime.BoxFloat``, ``runtime.BoxBool`` (``attrs.value``) and strings as String nodes; an
NDArray node carries its blob in ``repr_b64``. A class whose value is best kept as a string
(an operator named by its registry name) may define ``_repr_bytes(self) -> str`` and a
classmethod ``_from_repr_bytes(text)``; it is then stored as ``repr_str``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.runtime.binary import BinaryReader
from kiln.runtime.container import Array, Map, ShapeTuple, String
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray
from kiln.runtime.object import Object, fields_of, import_node_type_modules, type_key_to_class
from kiln.runtime.params import load_ndarray, save_ndarray

__all__ = ["save_json", "load_json", "read_json", "TVM_VERSION"]

TVM_VERSION = "0.16.0"  # written to attrs.tvm_version so TVM's loader accepts the file

_BOX_INT, _BOX_FLOAT, _BOX_BOOL = "runtime.BoxInt", "runtime.BoxFloat", "runtime.BoxBool"
_SCALAR_KINDS = (int, float, bool, str, bytes, "dtype", "ndarray")
# TVM's own keys for the containers, accepted on load.
_TYPE_KEY_ALIASES = {"Array": "runtime.Array", "Map": "runtime.Map"}


def _format_float(value: float) -> str:
    return format(float(value), ".17g")


def _is_node_kind(kind: Any) -> bool:
    return not any(kind is k or kind == k for k in _SCALAR_KINDS)


# -- saving ---------------------------------------------------------------------------------


def _value_class(value: Any) -> str:
    """Which node encoding a value gets (order matters: bool is an int, String a str)."""
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, int | np.integer):
        return "int"
    if isinstance(value, float | np.floating):
        return "float"
    if isinstance(value, str | DataType):
        return "str"
    if isinstance(value, NDArray):
        return "ndarray"
    if isinstance(value, ShapeTuple):
        return "shape"
    if isinstance(value, list | tuple | Array):
        return "array"
    if isinstance(value, dict | Map):
        return "map"
    if isinstance(value, Object):
        return "repr" if hasattr(value, "_repr_bytes") else "object"
    raise TVMError(f"save_json cannot serialize a value of type {type(value).__name__}")


def _has_str_keys(mapping: Any) -> bool:
    return all(isinstance(k, str) for k in mapping)


def _children(value: Any, value_class: str) -> list[Any]:
    """The values a node refers to by index, in the order TVM visits them."""
    if value_class in ("array", "shape"):
        return list(value)
    if value_class == "map":
        if _has_str_keys(value):
            return list(value.values())
        return [x for pair in value.items() for x in pair]
    if value_class == "object":
        return [
            getattr(value, name, None)
            for name, kind in fields_of(value).items()
            if _is_node_kind(kind)
        ]
    return []


class _Writer:
    def __init__(self) -> None:
        self.values: list[Any] = [None]
        self.classes: list[str] = ["null"]
        self.index: dict[int, int] = {}
        self.ndarrays: list[str] = []
        self.ndarray_index: dict[int, int] = {}

    def index_graph(self, root: Any) -> int:
        """Number every reachable value in pre-order (iteratively: graphs can be deep)."""
        stack = [root]
        while stack:
            value = stack.pop()
            if value is None or id(value) in self.index:
                continue
            value_class = _value_class(value)
            self.index[id(value)] = len(self.values)
            self.values.append(value)
            self.classes.append(value_class)
            stack.extend(reversed(_children(value, value_class)))
        return 0 if root is None else self.index[id(root)]

    def node_of(self, value: Any) -> str:
        return "0" if value is None else str(self.index[id(value)])

    def ndarray_slot(self, arr: Any) -> str:
        if not isinstance(arr, NDArray):
            raise TVMError(f"an ndarray field holds a {type(arr).__name__}, not an NDArray")
        slot = self.ndarray_index.get(id(arr))
        if slot is None:
            slot = self.ndarray_index[id(arr)] = len(self.ndarrays)
            self.ndarrays.append(base64.b64encode(save_ndarray(arr)).decode())
        return str(slot)

    def field_attr(self, value: Any, kind: Any) -> str | None:
        """The attrs string of one reflected field (None: leave the attribute out)."""
        if _is_node_kind(kind):
            return self.node_of(value)
        if value is None:
            return None if kind is str else "null"
        return _FIELD_ENCODERS[kind](self, value)

    def encode(self, value: Any, value_class: str) -> dict[str, Any]:
        """The JSON node of one indexed value."""
        if value_class == "null":
            return {"type_key": ""}
        node = {"type_key": _NODE_TYPE_KEYS.get(value_class) or value.type_key}
        node.update(_NODE_BODIES[value_class](self, value))
        return node

    def object_body(self, value: Any) -> dict[str, Any]:
        attrs = {}
        for name, kind in fields_of(value).items():
            text = self.field_attr(getattr(value, name, None), kind)
            if text is not None:
                attrs[name] = text
        return {"attrs": dict(sorted(attrs.items()))} if attrs else {}

    def sequence_body(self, value: Any) -> dict[str, Any]:
        return {"data": [int(self.node_of(v)) for v in value]} if len(value) else {}

    def map_body(self, value: Any) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if len(value) and _has_str_keys(value):
            body["keys"] = [str(k) for k in value]
        if len(value):
            body["data"] = [int(self.node_of(v)) for v in _children(value, "map")]
        return body


_NODE_TYPE_KEYS = {
    "bool": _BOX_BOOL,
    "int": _BOX_INT,
    "float": _BOX_FLOAT,
    "str": "runtime.String",
    "ndarray": "runtime.NDArray",
    "array": "runtime.Array",
    "shape": "runtime.ShapeTuple",
    "map": "runtime.Map",
}

_NODE_BODIES: dict[str, Callable[[_Writer, Any], dict[str, Any]]] = {
    "bool": lambda w, v: {"attrs": {"value": str(int(bool(v)))}},
    "int": lambda w, v: {"attrs": {"value": str(int(v))}},
    "float": lambda w, v: {"attrs": {"value": _format_float(v)}},
    "str": lambda w, v: {"repr_str": str(v)},
    "ndarray": lambda w, v: {"repr_b64": base64.b64encode(save_ndarray(v)).decode()},
    "repr": lambda w, v: {"repr_str": v._repr_bytes()},
    "array": _Writer.sequence_body,
    "shape": _Writer.sequence_body,
    "map": _Writer.map_body,
    "object": _Writer.object_body,
}

_FIELD_ENCODERS: dict[Any, Callable[[_Writer, Any], str]] = {
    int: lambda w, v: str(int(v)),
    bool: lambda w, v: str(int(bool(v))),
    float: lambda w, v: _format_float(v),
    str: lambda w, v: str(v),
    bytes: lambda w, v: base64.b64encode(bytes(v)).decode(),
    "dtype": lambda w, v: str(DataType(v)),
    "ndarray": _Writer.ndarray_slot,
}


def save_json(obj: Any) -> str:
    """Serialize an object graph (Objects, containers, NDArrays, scalars) to TVM-layout JSON.

    Example
    -------
    >>> from kiln.runtime.container import Array
    >>> shared = Array([1, 2])
    >>> loaded = load_json(save_json(Array([shared, shared, "x"])))
    >>> loaded == [[1, 2], [1, 2], "x"], loaded[0] is loaded[1]
    (True, True)
    """
    writer = _Writer()
    root = writer.index_graph(obj)
    nodes = [writer.encode(v, c) for v, c in zip(writer.values, writer.classes)]
    return _layout(root, nodes, writer.ndarrays)


def _layout(root: int, nodes: list[dict[str, Any]], ndarrays: list[str]) -> str:
    """The JSON text with one node (and one array blob) per line: readable, still plain JSON."""

    def block(items: list[Any]) -> str:
        if not items:
            return "[]"
        return "[\n" + ",\n".join(f"    {json.dumps(item)}" for item in items) + "\n  ]"

    return (
        "{\n"
        f'  "root": {root},\n'
        f'  "nodes": {block(nodes)},\n'
        f'  "b64ndarrays": {block(ndarrays)},\n'
        f'  "attrs": {json.dumps({"tvm_version": TVM_VERSION})}\n'
        "}"
    )


# -- loading --------------------------------------------------------------------------------

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


_JSON_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _deep_nesting_place(text: str, depth_limit: int = 500) -> str:
    """Where ``text`` first nests ``depth_limit`` arrays/objects deep, as line and column."""
    depth = 0
    for match in _JSON_STRUCTURE.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth >= depth_limit:
                line = text.count("\n", 0, match.start()) + 1
                column = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
                return f"{depth_limit} levels deep at line {line}, column {column}"
        elif char in "]}":
            depth -= 1
    return "deeper than Python's JSON reader follows"


def read_json(text: str | bytes | bytearray, what: str) -> Any:
    """Parse a JSON document read from a file or a peer; every failure a TVMError.

    Besides malformed JSON this refuses nesting deeper than Python's JSON reader follows (it
    raises RecursionError) and strings that are not valid Unicode: a lone surrogate escape
    such as ``"\\ud800"`` is legal JSON, but no file name, symbol or C string can hold it.

    Example
    -------
    >>> read_json('{"a": [1]}', "config")["a"]
    [1]
    >>> read_json('["\\ud800"]', "graph JSON")
    Traceback (most recent call last):
    ...
    kiln.runtime.error.TVMError: graph JSON holds a string that is not valid Unicode (a lone \
surrogate such as \\ud800)
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as err:
            raise TVMError(f"{what} is not UTF-8 text: {err}") from None
    if not isinstance(text, str):
        raise TVMError(f"{what} must be text, got {type(text).__name__}")
    try:
        value = json.loads(text)
    except RecursionError:
        raise TVMError(f"{what} nests arrays or objects too deeply to read "
                       f"({_deep_nesting_place(text)})") from None
    except ValueError as err:
        raise TVMError(f"{what} is not valid JSON: {err}") from None
    if _SURROGATE_ESCAPE.search(text) or not text.isascii():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except RecursionError:
            raise TVMError(f"{what} nests arrays or objects too deeply to read") from None
        except UnicodeEncodeError:
            raise TVMError(f"{what} holds a string that is not valid Unicode (a lone "
                           "surrogate such as \\ud800)") from None
    return value



def _fail(message: str) -> TVMError:
    return TVMError(f"load_json: {message}")


class _Reader:
    def __init__(self, graph: Any) -> None:
        if not isinstance(graph, dict):
            raise _fail(f"expected a JSON object at the top level, got {type(graph).__name__}")
        for key in ("root", "nodes"):
            if key not in graph:
                raise _fail(f"missing top-level key {key!r}")
        self.nodes = graph["nodes"]
        if not isinstance(self.nodes, list) or not self.nodes:
            raise _fail("'nodes' must be a non-empty list")
        self.ndarray_texts = graph.get("b64ndarrays", [])
        if not isinstance(self.ndarray_texts, list):
            raise _fail("'b64ndarrays' must be a list")
        self.root = self.node_index(graph["root"], "root")
        for i, node in enumerate(self.nodes):
            self.check_node(i, node)
        if any(not self.type_key(i).startswith("runtime.") and self.type_key(i) != ""
               for i in range(len(self.nodes))):
            # IR nodes: their classes (and the operators Op nodes name) live above the
            # runtime, in modules a fresh process may not have imported yet.
            import_node_type_modules()
        self.loaded: dict[int, Any] = {0: None}
        self.ndarrays: dict[int, NDArray] = {}

    def node_index(self, value: Any, where: str) -> int:
        if isinstance(value, str):
            if value == "null":
                return 0
            try:
                value = int(value)
            except ValueError:
                raise _fail(f"{where}: {value!r} is not a node index") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _fail(f"{where}: node index must be an int, got {value!r}")
        if not 0 <= value < len(self.nodes):
            raise _fail(f"{where}: node index {value} is out of range [0, {len(self.nodes)})")
        return value

    def check_node(self, i: int, node: Any) -> None:
        if not isinstance(node, dict):
            raise _fail(f"node {i} is not a JSON object")
        if not isinstance(node.get("type_key"), str):
            raise _fail(f"node {i} has no string 'type_key'")
        attrs = node.get("attrs", {})
        if not isinstance(attrs, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()
        ):
            raise _fail(f"node {i} ({node['type_key']}): 'attrs' must map names to strings")
        keys = node.get("keys", [])
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise _fail(f"node {i} ({node['type_key']}): 'keys' must be a list of strings")
        data = node.get("data", [])
        if not isinstance(data, list):
            raise _fail(f"node {i} ({node['type_key']}): 'data' must be a list")
        for j, d in enumerate(data):
            self.node_index(d, f"node {i} data[{j}]")

    def type_key(self, i: int) -> str:
        key = self.nodes[i]["type_key"]
        return _TYPE_KEY_ALIASES.get(key, key)

    def cls_of(self, i: int) -> type | None:
        key = self.type_key(i)
        if key in _NODE_LOADERS:
            return None
        try:
            return type_key_to_class(key)
        except KeyError:
            raise _fail(f"node {i} has unknown type_key {key!r}") from None

    def attr(self, i: int, name: str) -> str | None:
        return self.nodes[i].get("attrs", {}).get(name)

    def child_indices(self, i: int) -> list[int]:
        node = self.nodes[i]
        key = self.type_key(i)
        if key in _NODE_LOADERS:
            return [self.node_index(d, f"node {i} data") for d in node.get("data", [])]
        cls = self.cls_of(i)
        if hasattr(cls, "_from_repr_bytes"):
            return []
        children = []
        for name, kind in fields_of(cls).items():
            text = self.attr(i, name)
            if text is not None and _is_node_kind(kind):
                children.append(self.node_index(text, f"node {i} ({key}) field {name!r}"))
        return children

    def load(self, root: int) -> Any:
        """Build nodes children-first with an explicit stack; a cycle is an error."""
        on_stack: set[int] = set()
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            i, expanded = stack.pop()
            if i in self.loaded:
                continue
            if expanded:
                self.loaded[i] = self.build(i)
                on_stack.discard(i)
                continue
            if i in on_stack:
                raise _fail(f"node {i} ({self.type_key(i)}) refers to itself through a cycle")
            on_stack.add(i)
            stack.append((i, True))
            for child in reversed(self.child_indices(i)):
                if child not in self.loaded:
                    if child in on_stack:
                        raise _fail(f"node {child} ({self.type_key(child)}) is part of a cycle")
                    stack.append((child, False))
        return self.loaded[root]

    def build(self, i: int) -> Any:
        key = self.type_key(i)
        loader = _NODE_LOADERS.get(key)
        try:
            if loader is not None:
                return loader(self, i)
            return self.build_reflected(i, key)
        except TVMError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError,
                binascii.Error, UnicodeError) as err:
            raise _fail(f"node {i} ({key}) is malformed: {err}") from None

    def build_reflected(self, i: int, key: str) -> Any:
        cls = self.cls_of(i)
        if hasattr(cls, "_from_repr_bytes"):
            return cls._from_repr_bytes(self.repr_text(i))
        values = {}
        for name, kind in fields_of(cls).items():
            text = self.attr(i, name)
            if text is None:
                values[name] = None
            elif _is_node_kind(kind):
                value = self.loaded[self.node_index(text, f"node {i} field {name!r}")]
                if not _fits_kind(value, kind):
                    raise _fail(
                        f"node {i} ({key}) field {name!r} must hold {_kind_name(kind)}, but "
                        f"node {text} is a {_value_name(value)}"
                    )
                values[name] = value
            elif text == "null" and kind is not str:
                values[name] = None
            else:
                values[name] = _FIELD_DECODERS[kind](self, text)
        return cls._from_fields(values)

    def repr_text(self, i: int) -> str:
        node = self.nodes[i]
        if isinstance(node.get("repr_str"), str):
            return node["repr_str"]
        if isinstance(node.get("repr_b64"), str):
            return base64.b64decode(node["repr_b64"], validate=True).decode()
        raise _fail(f"node {i} ({node['type_key']}) has no 'repr_str' or 'repr_b64'")

    def children(self, i: int) -> list[Any]:
        return [self.loaded[self.node_index(d, "data")] for d in self.nodes[i].get("data", [])]

    def ndarray_at(self, text: str) -> NDArray:
        slot = int(text)
        if not 0 <= slot < len(self.ndarray_texts):
            raise _fail(f"b64ndarrays index {slot} is out of range")
        if slot not in self.ndarrays:
            self.ndarrays[slot] = _decode_ndarray(self.ndarray_texts[slot], f"b64ndarrays[{slot}]")
        return self.ndarrays[slot]


def _fits_kind(value: Any, kind: Any) -> bool:
    """Whether a loaded value may fill an object field of ``kind``: None, an instance, or
    Arrays / Map values (nested) of instances. Iterative: loaded arrays may nest deeply."""
    if kind == "any":
        return True
    pending = [value]
    while pending:
        item = pending.pop()
        if item is None or isinstance(item, kind):
            continue
        if isinstance(item, Array):
            pending.extend(item)
        elif isinstance(item, Map):
            pending.extend(item.values())
        else:
            return False
    return True


def _kind_name(kind: Any) -> str:
    key = getattr(kind, "type_key", None) or getattr(kind, "__name__", str(kind))
    return f"a {key} (or an Array/Map of them)"


def _value_name(value: Any) -> str:
    return getattr(value, "type_key", None) or type(value).__name__


def _decode_ndarray(text: Any, where: str) -> NDArray:
    if not isinstance(text, str):
        raise _fail(f"{where} is not a base64 string")
    try:
        blob = base64.b64decode(text, validate=True)
    except binascii.Error:
        raise _fail(f"{where} is not valid base64") from None
    reader = BinaryReader(blob, what=f"load_json {where}")
    arr = load_ndarray(reader)
    reader.expect_end()
    return arr


def _parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return bool(int(text))


def _load_map(reader: _Reader, i: int) -> Map:
    values = reader.children(i)
    keys = reader.nodes[i].get("keys")
    if keys:
        if len(keys) != len(values):
            raise _fail(f"node {i} (Map) has {len(keys)} keys but {len(values)} values")
        return Map(zip((String(k) for k in keys), values))
    if len(values) % 2:
        raise _fail(f"node {i} (Map) has an odd number of key/value entries")
    return Map(zip(values[0::2], values[1::2]))


def _load_box(convert: Callable[[str], Any]) -> Callable[[_Reader, int], Any]:
    def load(reader: _Reader, i: int) -> Any:
        text = reader.attr(i, "value")
        if text is None:
            raise _fail(f"node {i} ({reader.type_key(i)}) has no attrs.value")
        return convert(text)

    return load


def _load_ndarray_node(reader: _Reader, i: int) -> NDArray:
    node = reader.nodes[i]
    return _decode_ndarray(node.get("repr_b64"), f"node {i} (runtime.NDArray) repr_b64")


_NODE_LOADERS: dict[str, Callable[[_Reader, int], Any]] = {
    "": lambda r, i: None,
    "runtime.String": lambda r, i: String(r.repr_text(i)),
    "runtime.Array": lambda r, i: Array(r.children(i)),
    "runtime.Map": _load_map,
    "runtime.ShapeTuple": lambda r, i: ShapeTuple(r.children(i)),
    "runtime.NDArray": _load_ndarray_node,
    _BOX_INT: _load_box(int),
    _BOX_FLOAT: _load_box(float),
    _BOX_BOOL: _load_box(lambda t: bool(int(t))),
}

_FIELD_DECODERS: dict[Any, Callable[[_Reader, str], Any]] = {
    int: lambda r, t: int(t),
    bool: lambda r, t: _parse_bool(t),
    float: lambda r, t: float(t),
    str: lambda r, t: t,
    bytes: lambda r, t: base64.b64decode(t, validate=True),
    "dtype": lambda r, t: DataType(t),
    "ndarray": _Reader.ndarray_at,
}


def load_json(text: str | bytes) -> Any:
    """Rebuild the object graph :func:`save_json` wrote (or TVM wrote, for known types).

    Shared nodes come back as one shared Python object. Malformed input raises TVMError.

    Example
    -------
    >>> load_json(save_json({"axis": 1}))["axis"]
    1
    """
    reader = _Reader(read_json(text, "load_json: the document"))
    return reader.load(reader.root)
