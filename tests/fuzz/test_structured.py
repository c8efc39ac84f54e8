"""Structured fuzzing with hypothesis: inputs that follow a format's shape but not its rules.

Byte mutation (``test_fuzz_smoke.py``) rarely gets past a format's first checks; these build
documents field by field (graph JSON, IR JSON, Relay token streams, NDArray headers) with
hostile values in the fields, so the deeper checks see them. Every input must load or raise
a TVMError (for Relay text, a DiagnosticError).
"""

from __future__ import annotations

import json
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.relay.parser import parse
from kiln.runtime.binary import BinaryReader
from kiln.runtime.error import DiagnosticError, TVMError
from kiln.runtime.graph_executor import parse_graph_json
from kiln.runtime.params import NDARRAY_MAGIC, load_ndarray
from kiln.runtime.serialization import load_json

from .mutate import INTERESTING_INTS

FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

hostile_ints = st.one_of(st.sampled_from(INTERESTING_INTS), st.integers(-3, 12))
hostile_text = st.one_of(st.sampled_from(["", "0", "-1", "x", "\ud800", "null", "1e999",
                                          "float32", "int64x4", "\x00", "9" * 30]),
                         st.text(max_size=8))
scalars = st.one_of(hostile_ints, hostile_text, st.booleans(), st.none(), st.floats())


def _node_ref(count: int):
    return st.one_of(st.integers(-1, count + 1), st.sampled_from(INTERESTING_INTS), hostile_text)


@st.composite
def graph_documents(draw):
    """Graph executor JSON: the right keys and nesting, values drawn from hostile ones."""
    count = draw(st.integers(1, 5))
    ref = _node_ref(count)
    nodes = []
    for i in range(count):
        if draw(st.booleans()) and i:
            attrs = {"func_name": draw(hostile_text), "num_inputs": draw(st.one_of(ref, scalars)),
                     "num_outputs": draw(st.one_of(ref, scalars)), "flatten_data": "0"}
            edges = draw(st.lists(st.lists(ref, min_size=0, max_size=4), max_size=3))
            nodes.append({"op": draw(st.sampled_from(["tvm_op", "null", "x"])),
                          "name": draw(hostile_text), "attrs": attrs, "inputs": edges})
        else:
            nodes.append({"op": "null", "name": draw(hostile_text), "inputs": []})
    entries = draw(st.integers(0, count + 2))

    def attr(tag, item):
        return [draw(st.sampled_from([tag, "list_int", "x"])),
                draw(st.lists(item, min_size=entries, max_size=entries))]

    dims = st.lists(st.one_of(hostile_ints, hostile_text), max_size=4)
    return {"nodes": nodes, "arg_nodes": draw(st.lists(ref, max_size=3)),
            "heads": draw(st.lists(st.lists(ref, max_size=3), max_size=2)),
            "node_row_ptr": draw(st.lists(ref, max_size=count + 2)),
            "attrs": {"dltype": attr("list_str", st.one_of(hostile_text, st.just("float32"))),
                      "shape": attr("list_shape", dims),
                      "storage_id": attr("list_int", ref)}}


@FAST
@given(graph_documents())
def test_structured_graph_json_loads_or_raises_tvm_error(document):
    try:
        parse_graph_json(json.dumps(document))
    except TVMError:
        pass


TYPE_KEYS = ["", "relay.Var", "relay.Id", "relay.Call", "relay.Function", "relay.Let",
             "relay.Constant", "relay.Tuple", "relay.TupleGetItem", "GlobalVar", "IRModule",
             "TensorType", "TupleType", "FuncType", "relay.attrs.Conv2DAttrs", "Op",
             "runtime.Array", "runtime.Map", "runtime.String", "runtime.BoxInt",
             "runtime.NDArray", "runtime.ShapeTuple", "IntImm", "relay.Match", "Array", "x.y"]
FIELDS = ["vid", "name_hint", "type_annotation", "op", "args", "attrs", "params", "body",
          "ret_type", "value", "var", "fields", "index", "data", "shape", "dtype", "functions",
          "tuple_value", "span", "strides", "padding", "channels"]


@st.composite
def ir_documents(draw):
    """save_json layout: real type keys and field names, hostile references and values."""
    count = draw(st.integers(1, 7))
    ref = st.one_of(_node_ref(count).map(str), hostile_text)
    nodes = [{"type_key": ""}]
    for _ in range(count):
        node = {"type_key": draw(st.sampled_from(TYPE_KEYS))}
        if draw(st.booleans()):
            node["attrs"] = draw(st.dictionaries(st.sampled_from(FIELDS), ref, max_size=4))
        if draw(st.booleans()):
            node["data"] = draw(st.lists(_node_ref(count), max_size=4))
        if draw(st.booleans()):
            node["keys"] = draw(st.lists(hostile_text, max_size=3))
        if draw(st.booleans()):
            node["repr_str"] = draw(st.one_of(hostile_text, st.sampled_from(["add", "nn.relu"])))
        nodes.append(node)
    return {"root": draw(_node_ref(count)), "nodes": nodes,
            "b64ndarrays": draw(st.lists(st.sampled_from(["", "AAAA", "P6G0lvBAXt0A"]),
                                         max_size=2))}


@FAST
@given(ir_documents())
def test_structured_ir_json_loads_or_raises_tvm_error(document):
    try:
        load_json(json.dumps(document))
    except TVMError:
        pass


RELAY_TOKENS = ["def", "@main", "@f", "(", ")", "%x", "%0", ":", "Tensor", "[", "]", "float32",
                "int8", "{", "}", "fn", "let", "=", ";", "if", "else", "match", "=>", ",", ".",
                "0", "1.5f", "-1", "2147483648", "meta", "relay.Constant", "add", "nn.conv2d",
                "strides", "?", "_", "->", "type", "List", "Cons", "Nil", "ref", "ref_read",
                "free_var", '"s"', "True", "#[metadata]", "\u0661", "(" * 50]


@FAST
@given(st.lists(st.sampled_from(RELAY_TOKENS), max_size=40))
def test_relay_token_streams_parse_or_raise_a_diagnostic(tokens):
    try:
        parse(" ".join(tokens))
    except DiagnosticError:
        pass


@FAST
@given(ndim=st.integers(-2, 40), code=st.integers(0, 255), bits=st.integers(0, 255),
       lanes=st.sampled_from([0, 1, 2, 4, 65535]), dims=st.lists(hostile_ints, max_size=6),
       size=hostile_ints, data=st.binary(max_size=64))
def test_ndarray_headers_with_hostile_fields_load_or_raise_tvm_error(ndim, code, bits, lanes,
                                                                     dims, size, data):
    blob = (struct.pack("<QQii", NDARRAY_MAGIC, 0, 1, 0) + struct.pack("<i", ndim)
            + struct.pack("<BBH", code, bits, lanes)
            + b"".join(struct.pack("<q", _int64(d)) for d in dims)
            + struct.pack("<q", _int64(size)) + data)
    try:
        load_ndarray(BinaryReader(blob))
    except TVMError:
        return
    # What loads must have found its data_byte_size bytes present.
    assert ndim == len(dims) and 0 <= _int64(size) <= len(data)


def _int64(value: int) -> int:
    """``value`` wrapped into int64 (how the bytes read back)."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)
