"""kiln.ir: the IR core shared by Relay and TIR (TVM's ``tvm.ir``).

Types, IRModule, attributes, ADTs, spans, structural equality/hash, the op registry and the
pass infrastructure (``kiln.ir.transform`` = ``kiln.transform``). Names load lazily.

Example
-------
>>> import kiln
>>> kiln.ir.structural_equal(kiln.ir.TensorType((1, 2)), kiln.ir.TensorType((1, 2)))
True
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "base": "kiln.ir.base",
    "expr": "kiln.ir.expr",
    "type": "kiln.ir.type",
    "adt": "kiln.ir.adt",
    "attrs": "kiln.ir.attrs",
    "module": "kiln.ir.module",
    "function": "kiln.ir.function",
    "structural": "kiln.ir.structural",
    "transform": "kiln.ir.transform",
    "instrument": "kiln.ir.instrument",
    "op": "kiln.ir.op",
    "memory_pools": "kiln.ir.memory_pools",
    "IRModule": ("kiln.ir.module", "IRModule"),
    "Node": ("kiln.ir.base", "Node"),
    "Span": ("kiln.ir.base", "Span"),
    "EnvFunc": ("kiln.ir.base", "EnvFunc"),
    "SourceName": ("kiln.ir.base", "SourceName"),
    "BaseExpr": ("kiln.ir.expr", "BaseExpr"),
    "PrimExpr": ("kiln.ir.expr", "PrimExpr"),
    "RelayExpr": ("kiln.ir.expr", "RelayExpr"),
    "IntImm": ("kiln.ir.expr", "IntImm"),
    "FloatImm": ("kiln.ir.expr", "FloatImm"),
    "GlobalVar": ("kiln.ir.expr", "GlobalVar"),
    "Range": ("kiln.ir.expr", "Range"),
    "BaseFunc": ("kiln.ir.function", "BaseFunc"),
    "CallingConv": ("kiln.ir.function", "CallingConv"),
    "Type": ("kiln.ir.type", "Type"),
    "TypeKind": ("kiln.ir.type", "TypeKind"),
    "PrimType": ("kiln.ir.type", "PrimType"),
    "PointerType": ("kiln.ir.type", "PointerType"),
    "TensorType": ("kiln.ir.type", "TensorType"),
    "TupleType": ("kiln.ir.type", "TupleType"),
    "FuncType": ("kiln.ir.type", "FuncType"),
    "TypeVar": ("kiln.ir.type", "TypeVar"),
    "GlobalTypeVar": ("kiln.ir.type", "GlobalTypeVar"),
    "IncompleteType": ("kiln.ir.type", "IncompleteType"),
    "TypeCall": ("kiln.ir.type", "TypeCall"),
    "RelayRefType": ("kiln.ir.type", "RelayRefType"),
    "TypeConstraint": ("kiln.ir.type", "TypeConstraint"),
    "TypeRelation": ("kiln.ir.type", "TypeRelation"),
    "Any": ("kiln.ir.type", "Any"),
    "TypeData": ("kiln.ir.adt", "TypeData"),
    "Constructor": ("kiln.ir.adt", "Constructor"),
    "Attrs": ("kiln.ir.attrs", "Attrs"),
    "DictAttrs": ("kiln.ir.attrs", "DictAttrs"),
    "make_node": ("kiln.ir.attrs", "make_node"),
    "Op": ("kiln.ir.op", "Op"),
    "register_op_attr": ("kiln.ir.op", "register_op_attr"),
    "structural_equal": ("kiln.ir.structural", "structural_equal"),
    "structural_hash": ("kiln.ir.structural", "structural_hash"),
    "assert_structural_equal": ("kiln.ir.structural", "assert_structural_equal"),
    "save_json": ("kiln.runtime.serialization", "save_json"),
    "load_json": ("kiln.runtime.serialization", "load_json"),
    "PassContext": ("kiln.ir.transform", "PassContext"),
    "Pass": ("kiln.ir.transform", "Pass"),
}

__getattr__, __dir__ = attach(__name__, _LAZY)
