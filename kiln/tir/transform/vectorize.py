"""VectorizeLoop and UnrollLoop: lower loop kinds into straight-line TIR.

Entry points: :func:`VectorizeLoop`, :func:`UnrollLoop`, :func:`ConvertForLoopsToSerial`
(passes), :func:`vectorize_stmt`, :func:`unroll_stmt` and :func:`any_vector_lanes`.

A ``VECTORIZED`` loop of constant extent ``L`` disappears: its variable becomes
``Ramp(min, 1, L)``, scalars meeting vectors are ``Broadcast``, and ``Ramp`` arithmetic is
folded (``Ramp(b, 1, L) * 4 + c`` is ``Ramp(b * 4 + c, 4, L)``) so a contiguous access keeps a
``Ramp(base, 1, L)`` index — a plain vector load/store for the code generator.
``if_then_else`` with a lane-dependent condition becomes a per-lane choice (a vector of bool
lanes; the code generators evaluate each arm only in the lanes taking it). A loop whose
body cannot be expressed lane-wise (a data-dependent branch, an inner loop, an extern call)
stays a serial loop, as does one whose extent is not a power of two -- C vector types need
one -- unless the caller lowers for LLVM, whose vectors take any lane count
(:func:`any_vector_lanes`). An ``UNROLLED`` loop of constant extent is replaced by copies of
its body.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from kiln.arith.analyzer import Analyzer
from kiln.ir.expr import IntImm, PrimExpr
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, post_order_visit, substitute
from kiln.tir.transform.base import prim_func_pass

__all__ = ["VectorizeLoop", "UnrollLoop", "ConvertForLoopsToSerial", "loops_to_serial",
           "vectorize_stmt", "unroll_stmt", "any_vector_lanes"]

# Whether a vector loop of any constant extent (up to 64) becomes vector code; otherwise only
# powers of two do (C vector types need them). Set by any_vector_lanes while lowering for LLVM.
_ANY_LANES: ContextVar[bool] = ContextVar("kiln_vectorize_any_lanes", default=False)


@contextmanager
def any_vector_lanes(enabled: bool = True) -> Iterator[None]:
    """Within the block, vectorize loops of any constant extent up to 64, not only powers of
    two: for a target whose vectors take any lane count (LLVM legalizes ``<10 x float>``
    itself). Measured on the 64x256 @ 256x10 matmul of an MLP's gradient, whose 10 columns
    are the vector loop: LLVM's O3 took 100 ms on the scalar loop it then vectorizes itself,
    37 ms on 10-lane vector code.

    Example
    -------
    >>> import kiln
    >>> from kiln import te
    >>> A = te.placeholder((10,), name="A")
    >>> B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> s[B].vectorize(B.op.axis[0])
    >>> with any_vector_lanes():
    ...     body = kiln.lower(s, [A, B])["main"].body
    >>> type(body).__name__, body.value.dtype
    ('BufferStore', 'float32x10')
    """
    token = _ANY_LANES.set(enabled)
    try:
        yield
    finally:
        _ANY_LANES.reset(token)


class _CannotVectorize(Exception):
    pass


def _lanes(e: PrimExpr) -> int:
    return DataType(e.dtype).lanes


def _widen(e: PrimExpr, lanes: int) -> PrimExpr:
    return e if _lanes(e) == lanes else _e.Broadcast(e, lanes)


# lane-wise pure intrinsics that may take vector operands
_LANEWISE_CALLS = frozenset(name for name, doc in _op.INTRINSICS.items()
                            if doc.startswith("math")) | {"tir.reinterpret"}


class _Vectorizer(StmtExprMutator):
    def __init__(self, var: _e.Var, lanes: int, begin: PrimExpr) -> None:
        super().__init__()
        self.var, self.lanes = var, lanes
        self.ramp = _e.Ramp(begin, 1, lanes)

    def visit_Var(self, node):
        return self.ramp if node is self.var else node

    def _binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        la, lb = _lanes(a), _lanes(b)
        lanes = max(la, lb)
        if isinstance(node, _e.Add | _e.Sub):
            folded = _fold_ramp_add(a, b, isinstance(node, _e.Sub))
            if folded is not None:
                return folded
        if isinstance(node, _e.Mul):
            folded = _fold_ramp_mul(a, b)
            if folded is not None:
                return folded
        return type(node)(_widen(a, lanes), _widen(b, lanes))

    visit_Add = visit_Sub = visit_Mul = visit_Div = visit_Mod = _binary
    visit_FloorDiv = visit_FloorMod = visit_Min = visit_Max = _binary
    visit_EQ = visit_NE = visit_LT = visit_LE = visit_GT = visit_GE = _binary
    visit_And = visit_Or = _binary

    def visit_Select(self, node):
        c, t, f = (self.visit(x) for x in (node.condition, node.true_value, node.false_value))
        lanes = max(_lanes(c), _lanes(t), _lanes(f))
        if lanes == 1:
            return node
        return _e.Select(_widen(c, lanes), _widen(t, lanes), _widen(f, lanes))

    def visit_Cast(self, node):
        value = self.visit(node.value)
        if _lanes(value) == 1:
            return node
        src, dst = DataType(value.dtype), DataType(node.dtype)
        if isinstance(value, _e.Ramp) and src.is_int and dst.is_int and dst.bits >= src.bits:
            # a widened index ramp (int32 loop, int64 symbolic extent) stays a contiguous ramp
            return _e.Ramp(_op.cast(value.base, node.dtype), _op.cast(value.stride, node.dtype),
                           value.lanes)
        dtype = str(DataType(node.dtype).with_lanes(_lanes(value)))
        return _e.Cast(dtype, value)

    def visit_Not(self, node):
        return _e.Not(self.visit(node.a))

    def visit_BufferLoad(self, node):
        indices = [self.visit(i) for i in node.indices]
        lanes = max(_lanes(i) for i in indices) if indices else 1
        if lanes == 1:
            return node
        return _e.BufferLoad(node.buffer, [_widen(i, lanes) for i in indices])

    def visit_Call(self, node):
        if node.op == "tir.if_then_else":
            return self._if_then_else(node)
        args = [self.visit(a) if isinstance(a, PrimExpr) else a for a in node.args]
        lanes = max((_lanes(a) for a in args if isinstance(a, PrimExpr)), default=1)
        if lanes == 1:
            return node
        if node.op not in _LANEWISE_CALLS:
            raise _CannotVectorize(node.op)
        dtype = str(DataType(node.dtype).with_lanes(lanes))
        return _e.Call(dtype, node.op, [_widen(a, lanes) for a in args])

    def _if_then_else(self, node):
        """A condition that stays scalar keeps choosing one arm for all lanes (only that arm
        runs); a vector condition chooses per lane, and the code generators evaluate an arm
        only in the lanes taking it (a padded border reads nothing outside its buffer).

        An arm that would gather (a load whose lanes are not consecutive) keeps the loop
        serial: measured on topi's depthwise input packing, the vector gather under the
        guard ran slower than the scalar loop on both targets. So does a per-lane choice
        with another choice in an arm: the llvm target evaluates such an inner choice's arms
        without the outer condition's lanes (a read outside the buffer)."""
        cond, then, other = (self.visit(a) for a in node.args)
        if cond is node.args[0] and then is node.args[1] and other is node.args[2]:
            return node
        if _gathers(then) or _gathers(other):
            raise _CannotVectorize("gather under if_then_else")
        if _lanes(cond) > 1 and (_chooses(then) or _chooses(other)):
            raise _CannotVectorize("if_then_else inside a per-lane if_then_else")
        lanes = max(_lanes(cond), _lanes(then), _lanes(other))
        dtype = str(DataType(node.dtype).with_lanes(lanes))
        return _e.Call(dtype, node.op, [cond if _lanes(cond) == 1 else _widen(cond, lanes),
                                        _widen(then, lanes), _widen(other, lanes)])

    def visit_Let(self, node):
        raise _CannotVectorize("let")

    def visit_Ramp(self, node):
        raise _CannotVectorize("nested vector")

    visit_Broadcast = visit_Shuffle = visit_Ramp

    def visit_BufferStore(self, node):
        indices = [self.visit(i) for i in node.indices]
        value = self.visit(node.value)
        lanes = max([_lanes(value)] + [_lanes(i) for i in indices])
        if lanes == 1:
            return node
        if any(_lanes(i) == 1 for i in indices) and _lanes(value) > 1:
            raise _CannotVectorize("vector value stored to one address")
        return _s.BufferStore(node.buffer, _widen(value, lanes),
                              [_widen(i, lanes) for i in indices])

    def visit_IfThenElse(self, node):
        cond = self.visit(node.condition)
        if _lanes(cond) > 1:
            raise _CannotVectorize("data-dependent branch")
        return _s.IfThenElse(cond, self.visit(node.then_case),
                             self.visit(node.else_case) if node.else_case else None)

    def visit_For(self, node):
        raise _CannotVectorize("inner loop")

    def visit_LetStmt(self, node):
        value = self.visit(node.value)
        if _lanes(value) > 1:
            raise _CannotVectorize("let of a vector")
        return _s.LetStmt(node.var, value, self.visit(node.body))

    def visit_Allocate(self, node):
        raise _CannotVectorize("allocation")

    def visit_Evaluate(self, node):
        value = self.visit(node.value)
        if value is not node.value and _lanes(value) > 1:
            raise _CannotVectorize("evaluate")
        return node


def _gathers(expr: PrimExpr) -> bool:
    """Whether ``expr`` loads a vector whose lanes are not consecutive elements: an index
    other than a ``Broadcast`` and a last ``Ramp`` of stride 1."""
    found = []

    def visit(node) -> None:
        if isinstance(node, _e.BufferLoad) and _lanes(node) > 1:
            *leading, last = node.indices
            contiguous = isinstance(last, _e.Ramp) and isinstance(last.stride, IntImm) \
                and last.stride.value == 1
            if not (contiguous or _lanes(last) == 1 or isinstance(last, _e.Broadcast)) or \
                    any(_lanes(i) > 1 and not isinstance(i, _e.Broadcast) for i in leading):
                found.append(node)

    post_order_visit(expr, visit)
    return bool(found)


def _chooses(expr: PrimExpr) -> bool:
    """Whether ``expr`` holds a ``tir.if_then_else``."""
    found = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, _e.Call)
                     and n.op == "tir.if_then_else" else None)
    return bool(found)


def _fold_ramp_add(a: PrimExpr, b: PrimExpr, subtract: bool) -> PrimExpr | None:
    sign = -1 if subtract else 1
    if isinstance(a, _e.Ramp) and _lanes(b) == 1:
        return _e.Ramp(_op.add(a.base, b) if not subtract else _op.subtract(a.base, b),
                       a.stride, a.lanes)
    if isinstance(a, _e.Ramp) and isinstance(b, _e.Broadcast):
        return _fold_ramp_add(a, b.value, subtract)
    if isinstance(b, _e.Ramp) and _lanes(a) == 1 and not subtract:
        return _e.Ramp(_op.add(a, b.base), b.stride, b.lanes)
    if isinstance(a, _e.Ramp) and isinstance(b, _e.Ramp) and a.lanes == b.lanes:
        return _e.Ramp(_op.add(a.base, _op.multiply(b.base, sign)),
                       _op.add(a.stride, _op.multiply(b.stride, sign)), a.lanes)
    return None


def _fold_ramp_mul(a: PrimExpr, b: PrimExpr) -> PrimExpr | None:
    if isinstance(b, _e.Ramp) and _lanes(a) == 1:
        a, b = b, a
    if isinstance(a, _e.Ramp) and isinstance(b, _e.Broadcast):
        b = b.value
    if isinstance(a, _e.Ramp) and _lanes(b) == 1:
        return _e.Ramp(_op.multiply(a.base, b), _op.multiply(a.stride, b), a.lanes)
    return None


class _LoopKindLowering(StmtExprMutator):
    def __init__(self, vectorize: bool, unroll: bool, analyzer: Analyzer) -> None:
        super().__init__()
        self.vectorize, self.unroll, self.analyzer = vectorize, unroll, analyzer
        self.simplify_ramps = True

    def visit(self, node):
        if isinstance(node, PrimExpr):
            return node
        return super().visit(node)

    def visit_For(self, node):
        body = self.visit(node.body)
        extent = self.analyzer.simplify(node.extent)
        if node.kind == _s.ForKind.VECTORIZED and self.vectorize:
            # C vector types need a power-of-two lane count; other extents stay loops
            # unless the target's vectors take any count (any_vector_lanes)
            if isinstance(extent, IntImm) and 1 < extent.value <= 64 and \
                    (extent.value & (extent.value - 1) == 0 or _ANY_LANES.get()):
                try:
                    out = _Vectorizer(node.loop_var, extent.value, node.min).visit(body)
                    return _simplify_ramps(out, self.analyzer) if self.simplify_ramps else out
                except _CannotVectorize:
                    pass
            return _s.For(node.loop_var, node.min, extent, _s.ForKind.SERIAL, body)
        if node.kind == _s.ForKind.UNROLLED and self.unroll:
            if isinstance(extent, IntImm) and extent.value <= 64:
                copies = [substitute(body, {node.loop_var: _op.add(node.min, i)})
                          for i in range(extent.value)]
                if _selects_on(body, node.loop_var):
                    copies = [_DecideSelects().visit(c) for c in copies]
                return _s.stmt_seq(copies)
            return _s.For(node.loop_var, node.min, extent, _s.ForKind.SERIAL, body)
        if body is node.body:
            return node
        return _s.For(node.loop_var, node.min, node.extent, node.kind, body,
                      node.thread_binding, node.annotations)


def _selects_on(body: _s.Stmt, var: _e.Var) -> bool:
    """Whether an ``if_then_else`` in ``body`` tests ``var`` (one walk per unrolled loop, so
    that loops without such a select pay no walk per copy)."""
    found = []

    def visit(node):
        if isinstance(node, _e.Call) and node.op == "tir.if_then_else" and not found:
            post_order_visit(node.args[0], lambda n: found.append(n) if n is var else None)

    post_order_visit(body, visit)
    return bool(found)


class _DecideSelects(StmtExprMutator):
    """An unrolled copy's ``if_then_else`` whose condition became constant replaced by its
    arm (e.g. a Winograd matrix row chosen by the unrolled index): the vectorizer and the
    simplifier after it then see one arm, not the whole chain, in every copy."""

    def visit_Call(self, node):
        if node.op == "tir.if_then_else":
            value = _constant_value(node.args[0])
            if value is not None:
                return self.visit(node.args[1] if value else node.args[2])
        return self.generic_visit(node)


# integer ops a constant condition of an unrolled copy is made of (a cheap evaluator: the
# full simplifier on every guard of every copy would cost more than it saves)
_CONSTANT_OPS = {_e.Add: int.__add__, _e.Sub: int.__sub__, _e.Mul: int.__mul__,
                 _e.FloorDiv: int.__floordiv__, _e.FloorMod: int.__mod__,
                 _e.EQ: int.__eq__, _e.NE: int.__ne__, _e.LT: int.__lt__, _e.LE: int.__le__,
                 _e.And: lambda a, b: bool(a and b), _e.Or: lambda a, b: bool(a or b)}


def _constant_value(expr: PrimExpr) -> int | None:
    """The integer value of ``expr`` when it is made of integer constants only, else None."""
    if isinstance(expr, IntImm):
        return expr.value
    fn = _CONSTANT_OPS.get(type(expr))
    if fn is None:
        return None
    a, b = _constant_value(expr.a), _constant_value(expr.b)
    if a is None or b is None or (b == 0 and type(expr) in (_e.FloorDiv, _e.FloorMod)):
        return None
    return int(fn(a, b))


class _RampSimplifier(StmtExprMutator):
    def __init__(self, analyzer: Analyzer) -> None:
        super().__init__()
        self.analyzer = analyzer

    def visit_Ramp(self, node):
        return _e.Ramp(self.analyzer.simplify(node.base), self.analyzer.simplify(node.stride),
                       node.lanes)

    def visit_IntImm(self, node):
        return node

    visit_FloatImm = visit_IntImm


def _simplify_ramps(stmt: _s.Stmt, analyzer: Analyzer) -> _s.Stmt:
    return _RampSimplifier(analyzer).visit(stmt)


def vectorize_stmt(stmt: _s.Stmt, simplify_ramps: bool = True) -> _s.Stmt:
    """Lower VECTORIZED loops of ``stmt`` to Ramp/Broadcast vector code; each Ramp's base and
    stride simplified unless ``simplify_ramps`` is False (a Simplify follows anyway)."""
    lowering = _LoopKindLowering(True, False, Analyzer())
    lowering.simplify_ramps = simplify_ramps
    return lowering.visit(stmt)


def unroll_stmt(stmt: _s.Stmt) -> _s.Stmt:
    """Replace UNROLLED loops of constant extent by copies of their body."""
    return _LoopKindLowering(False, True, Analyzer()).visit(stmt)


def VectorizeLoop(enable_vectorize: bool = True):  # noqa: N802 - TVM's pass name
    """The VectorizeLoop pass; with ``enable_vectorize=False`` vector loops become serial."""
    def run(func: PrimFunc) -> PrimFunc:
        if enable_vectorize:
            return func.with_body(vectorize_stmt(func.body))
        return func.with_body(loops_to_serial(func.body, (_s.ForKind.VECTORIZED,)))
    return prim_func_pass(run, "tir.VectorizeLoop")


def UnrollLoop():  # noqa: N802 - TVM's pass name
    """The UnrollLoop pass."""
    return prim_func_pass(lambda f: f.with_body(unroll_stmt(f.body)), "tir.UnrollLoop")


class _ToSerial(StmtExprMutator):
    def __init__(self, kinds) -> None:
        super().__init__()
        self.kinds = kinds

    def visit_For(self, node):
        body = self.visit(node.body)
        kind = _s.ForKind.SERIAL if node.kind in self.kinds else node.kind
        return _s.For(node.loop_var, node.min, node.extent, kind, body, None,
                      node.annotations)


def loops_to_serial(stmt: _s.Stmt, kinds) -> _s.Stmt:
    """``stmt`` with every loop whose kind is in ``kinds`` made serial."""
    return _ToSerial(kinds).visit(stmt)


def ConvertForLoopsToSerial():  # noqa: N802 - TVM's pass name
    """Make every parallel, vectorized or unrolled loop a serial loop."""
    kinds = (_s.ForKind.PARALLEL, _s.ForKind.VECTORIZED, _s.ForKind.UNROLLED)
    return prim_func_pass(lambda f: f.with_body(loops_to_serial(f.body, kinds)),
                          "tir.ConvertForLoopsToSerial")


