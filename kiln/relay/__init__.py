"""kiln.relay: the Relay IR, its operators, passes and executors (TVM's ``tvm.relay``).

Names load lazily from ``_LAZY`` (name -> module, or (module, attr)). Any other name is looked
up in :mod:`kiln.relay.op`, so ``relay.add``, ``relay.nn.conv2d`` and ``relay.reshape`` work as
in TVM; a name found in neither raises AttributeError.

Example
-------
>>> from kiln import relay
>>> x = relay.var("x", shape=(1, 10))
>>> relay.Function([x], x).params[0].name_hint
'x'
"""

from __future__ import annotations

import importlib
import sys
from typing import Any as _AnyValue

from kiln._lazy import attach
from kiln.relay.ir_hooks import register_ir_hooks

_LAZY: dict[str, _AnyValue] = {
    # subpackages and modules
    "base": "kiln.relay.base",
    "expr": "kiln.relay.expr",
    "adt": "kiln.relay.adt",
    "ty": "kiln.relay.ty",
    "expr_functor": "kiln.relay.expr_functor",
    "scope_builder": "kiln.relay.scope_builder",
    "type_infer": "kiln.relay.type_infer",
    "transform": "kiln.relay.transform",
    "analysis": "kiln.relay.analysis",
    "op": "kiln.relay.op",
    "nn": "kiln.relay.op.nn",
    "image": "kiln.relay.op.image",
    "dyn": "kiln.relay.op.dyn",
    "annotation": "kiln.relay.op.annotation",
    "qnn": "kiln.relay.qnn",
    "quantize": "kiln.relay.quantize",
    "testing": "kiln.relay.testing",
    "frontend": "kiln.relay.frontend",
    "backend": "kiln.relay.backend",
    "build_module": "kiln.relay.build_module",
    "vm": "kiln.relay.vm",
    "prelude": "kiln.relay.prelude",
    "parser": "kiln.relay.parser",
    "printer": "kiln.relay.printer",
    # builders and execution (other engineers' modules)
    "build": ("kiln.relay.build_module", "build"),
    "create_executor": ("kiln.relay.build_module", "create_executor"),
    "optimize": ("kiln.relay.build_module", "optimize"),
    "fromtext": ("kiln.relay.parser", "fromtext"),
    "parse": ("kiln.relay.parser", "parse"),
    "parse_expr": ("kiln.relay.parser", "parse_expr"),
    "save_param_dict": ("kiln.runtime.params", "save_param_dict"),
    "load_param_dict": ("kiln.runtime.params", "load_param_dict"),
    # expressions
    "Expr": ("kiln.relay.expr", "Expr"),
    "ExprWithOp": ("kiln.relay.expr", "ExprWithOp"),
    "Var": ("kiln.relay.expr", "Var"),
    "Constant": ("kiln.relay.expr", "Constant"),
    "Tuple": ("kiln.relay.expr", "Tuple"),
    "TupleGetItem": ("kiln.relay.expr", "TupleGetItem"),
    "TupleWrapper": ("kiln.relay.expr", "TupleWrapper"),
    "Call": ("kiln.relay.expr", "Call"),
    "Let": ("kiln.relay.expr", "Let"),
    "If": ("kiln.relay.expr", "If"),
    "Function": ("kiln.relay.expr", "Function"),
    "RefCreate": ("kiln.relay.expr", "RefCreate"),
    "RefRead": ("kiln.relay.expr", "RefRead"),
    "RefWrite": ("kiln.relay.expr", "RefWrite"),
    "GlobalVar": ("kiln.ir.expr", "GlobalVar"),
    "var": ("kiln.relay.expr", "var"),
    "const": ("kiln.relay.expr", "const"),
    "bind": ("kiln.relay.expr", "bind"),
    "ScopeBuilder": ("kiln.relay.scope_builder", "ScopeBuilder"),
    "Id": ("kiln.relay.base", "Id"),
    "Span": ("kiln.ir.base", "Span"),
    "SourceName": ("kiln.ir.base", "SourceName"),
    "astext": ("kiln.relay.base", "astext"),
    "pretty_print": ("kiln.relay.base", "pretty_print"),
    "IRModule": ("kiln.ir.module", "IRModule"),
    "Module": ("kiln.ir.module", "IRModule"),
    # ADTs
    "Match": ("kiln.relay.adt", "Match"),
    "Clause": ("kiln.relay.adt", "Clause"),
    "Pattern": ("kiln.relay.adt", "Pattern"),
    "PatternWildcard": ("kiln.relay.adt", "PatternWildcard"),
    "PatternVar": ("kiln.relay.adt", "PatternVar"),
    "PatternConstructor": ("kiln.relay.adt", "PatternConstructor"),
    "PatternTuple": ("kiln.relay.adt", "PatternTuple"),
    "Constructor": ("kiln.ir.adt", "Constructor"),
    "TypeData": ("kiln.ir.adt", "TypeData"),
    # types
    "Type": ("kiln.relay.ty", "Type"),
    "TensorType": ("kiln.relay.ty", "TensorType"),
    "TupleType": ("kiln.relay.ty", "TupleType"),
    "FuncType": ("kiln.relay.ty", "FuncType"),
    "TypeVar": ("kiln.relay.ty", "TypeVar"),
    "TypeParam": ("kiln.relay.ty", "TypeParam"),
    "GlobalTypeVar": ("kiln.relay.ty", "GlobalTypeVar"),
    "IncompleteType": ("kiln.relay.ty", "IncompleteType"),
    "TypeCall": ("kiln.relay.ty", "TypeCall"),
    "RefType": ("kiln.relay.ty", "RefType"),
    "TypeRelation": ("kiln.relay.ty", "TypeRelation"),
    "TypeConstraint": ("kiln.relay.ty", "TypeConstraint"),
    "TypeKind": ("kiln.relay.ty", "TypeKind"),
    "ShapeVar": ("kiln.relay.ty", "ShapeVar"),
    "scalar_type": ("kiln.relay.ty", "scalar_type"),
    "Any": ("kiln.ir.type", "Any"),
    # visitors
    "ExprFunctor": ("kiln.relay.expr_functor", "ExprFunctor"),
    "ExprVisitor": ("kiln.relay.expr_functor", "ExprVisitor"),
    "ExprMutator": ("kiln.relay.expr_functor", "ExprMutator"),
}

_table_getattr, __dir__ = attach(__name__, _LAZY)
register_ir_hooks()  # the IR core's GlobalVar calls, from_expr, printing … are Relay's


def __getattr__(name: str) -> _AnyValue:
    if name in _LAZY:
        return _table_getattr(name)
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    op_module = importlib.import_module("kiln.relay.op")
    if hasattr(op_module, name):
        value = getattr(op_module, name)
        setattr(sys.modules[__name__], name, value)
        return value
    raise AttributeError(
        f"module 'kiln.relay' has no attribute {name!r} (not a Relay name, nor an operator "
        "in kiln.relay.op)")
