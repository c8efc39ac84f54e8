"""Which Relay language features a program uses, and what its fused kernels are.

Entry points: :class:`Feature`, :func:`detect_feature`, :func:`check_constant`,
:func:`extract_fused_functions`, :func:`list_op_freqs` (TVM's ``relay.analysis`` names).
"""

from __future__ import annotations

from collections import Counter
from enum import IntEnum
from typing import Any

from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.structural import structural_hash
from kiln.relay.adt import Constructor, Match
from kiln.relay.expr import (
    Call,
    Constant,
    Function,
    GlobalVar,
    If,
    Let,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from kiln.relay.expr_functor import children_of, post_order_visit
from kiln.runtime.error import TVMError

__all__ = ["Feature", "detect_feature", "check_constant", "extract_fused_functions",
           "list_op_freqs"]


class Feature(IntEnum):
    """The features a Relay program might contain (TVM's numbering)."""

    fVar = 0  # noqa: N815 (TVM's names)
    fGlobalVar = 1  # noqa: N815
    fConstant = 2  # noqa: N815
    fTuple = 3  # noqa: N815
    fTupleGetItem = 4  # noqa: N815
    fFunction = 5  # noqa: N815
    fOp = 6  # noqa: N815
    fCall = 7  # noqa: N815
    fLet = 8  # noqa: N815
    fIf = 9  # noqa: N815
    fRefCreate = 10  # noqa: N815
    fRefRead = 11  # noqa: N815
    fRefWrite = 12  # noqa: N815
    fConstructor = 13  # noqa: N815
    fMatch = 14  # noqa: N815
    # A non-atomic sub-expression is shared, so the program is a graph rather than a tree.
    fGraph = 15  # noqa: N815
    # A let binds a variable its own value refers to (a local fixpoint).
    fLetRec = 16  # noqa: N815


_NODE_FEATURE = {Var: Feature.fVar, GlobalVar: Feature.fGlobalVar, Constant: Feature.fConstant,
                 Tuple: Feature.fTuple, TupleGetItem: Feature.fTupleGetItem,
                 Function: Feature.fFunction, Op: Feature.fOp, Call: Feature.fCall,
                 Let: Feature.fLet, If: Feature.fIf, RefCreate: Feature.fRefCreate,
                 RefRead: Feature.fRefRead, RefWrite: Feature.fRefWrite,
                 Constructor: Feature.fConstructor, Match: Feature.fMatch}
_ATOMIC = (Var, GlobalVar, Constant, Op, Constructor)


def _expr_features(expr: Any) -> set[Feature]:
    from kiln.relay.analysis.variables import free_vars

    found: set[Feature] = set()
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            if not isinstance(node, _ATOMIC):
                found.add(Feature.fGraph)
            continue
        seen.add(id(node))
        feature = _NODE_FEATURE.get(type(node))
        if feature is None:
            raise TVMError(f"detect_feature: {type(node).__name__} is not a Relay expression")
        found.add(feature)
        if isinstance(node, Let) and any(v is node.var for v in free_vars(node.value)):
            found.add(Feature.fLetRec)
        if isinstance(node, Function) and node.attrs is not None \
                and int(node.attrs.get("Primitive", 0) or 0):
            continue  # a fused kernel's body is not part of the program's language surface
        stack.extend(reversed(children_of(node)))
    return found


def detect_feature(a: Any, b: Any = None) -> set[Feature]:
    """The :class:`Feature` set of an expression, a module, or an expression and its module.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> sorted(f.name for f in detect_feature(relay.Function([x], x)))
    ['fFunction', 'fVar']
    """
    if isinstance(a, IRModule):
        a, b = b, a
    if isinstance(a, IRModule) or (b is not None and not isinstance(b, IRModule)):
        raise TVMError("detect_feature takes one expression and/or one IRModule, "
                       f"got {type(a).__name__} and {type(b).__name__}")
    found = _expr_features(a) if a is not None else set()
    if b is not None:
        for func in b.functions.values():
            if isinstance(func, Function):
                found |= _expr_features(func)
    return found


def check_constant(expr: Any) -> bool:
    """Whether ``expr`` is a constant or a (nested) tuple of constants."""
    if isinstance(expr, Constant):
        return True
    return isinstance(expr, Tuple) and all(check_constant(f) for f in expr.fields)


def _primitive_functions(mod: IRModule) -> list[Function]:
    found: list[Function] = []

    def visit(node: Any) -> None:
        if isinstance(node, Function) and node.attrs is not None \
                and int(node.attrs.get("Primitive", 0) or 0):
            found.append(node)

    for func in mod.functions.values():
        if isinstance(func, Function):
            post_order_visit(func, visit)
    return found


def extract_fused_functions(mod: IRModule) -> dict[int, Function]:
    """The primitive functions FuseOps makes of ``mod`` (after SimplifyInference), keyed by
    structural hash, as TVM's ``ExtractFusedFunctions``."""
    from kiln.ir.transform import Sequential
    from kiln.relay.transform import FuseOps, InferType, SimplifyInference

    if not isinstance(mod, IRModule):
        raise TVMError(f"extract_fused_functions expects an IRModule, got {type(mod).__name__}")
    fused = Sequential([InferType(), SimplifyInference(), FuseOps(3)])(mod)
    return {structural_hash(f): f for f in _primitive_functions(fused)}


def list_op_freqs(mod: IRModule) -> dict[str, int]:
    """How many calls to each operator ``mod`` makes, fused functions' bodies included."""
    counts: Counter[str] = Counter()

    def visit(node: Any) -> None:
        if isinstance(node, Call) and isinstance(node.op, Op):
            counts[node.op.name] += 1

    for func in mod.functions.values():
        if isinstance(func, Function):
            post_order_visit(func, visit)
    return dict(counts)
