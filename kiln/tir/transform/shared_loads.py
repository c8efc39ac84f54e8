"""A vector load repeated across a run of stores is read once, into a ``LetStmt`` variable.

Entry points: :func:`ShareVectorLoads` (the pass) and :func:`share_vector_loads` (one
statement).

An unrolled micro-kernel is a run of stores that read the same vector of B once per row of
its accumulator tile: ``C[0, j] += a0 * B[k, j]; C[1, j] += a1 * B[k, j]; ...``. GCC re-reads
memory at every use of such a load (it cannot prove the stores to C leave B alone), which makes
a GEMM inner loop load-bound. In a ``SeqStmt`` made only of ``BufferStore`` statements, each
contiguous vector load that appears in more than one of them, from a buffer the run does not
store to, is bound once by a ``LetStmt`` just before its first use, and its uses read the
variable. Loads under a ``Let``, an ``if_then_else`` or a ``tir.masked_load`` (read only in
some lanes) are left where they are, as are loads of buffers accessed only by whole aligned
vectors (the C printer keeps those in registers already). The C-family printers pin a
let-bound vector load in a register (``KILN_IN_REGISTER``); LLVM does this itself (GVN over
``noalias`` pointers), so the pass is in the C-family pipeline.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.structural import structural_equal, structural_hash
from kiln.runtime.dtype import DataType
from kiln.tir import expr as _e
from kiln.tir import stmt as _s
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator, post_order_visit
from kiln.tir.transform.base import PrimFuncPass, prim_func_pass
from kiln.tir.transform.vector_access import contiguous_index, uniform_vector_lanes

__all__ = ["ShareVectorLoads", "share_vector_loads"]


def _loads_unless_guarded(expr: Any) -> list[_e.BufferLoad] | None:
    """The BufferLoads of ``expr``, or None when one may sit under a Let or an
    ``if_then_else`` (binding it ahead would read it where TIR does not)."""
    loads: list[_e.BufferLoad] = []
    guarded = []

    def collect(node: Any) -> None:
        if isinstance(node, _e.BufferLoad):
            loads.append(node)
        elif isinstance(node, _e.Let) or (isinstance(node, _e.Call) and str(node.op) in (
                "tir.if_then_else", "tir.masked_load")):
            guarded.append(node)

    post_order_visit(expr, collect)
    return None if guarded else loads


def _flat(seq: _s.SeqStmt) -> list[_s.Stmt]:
    """The statements of ``seq`` with nested SeqStmts spliced in."""
    out: list[_s.Stmt] = []
    for stmt in seq.seq:
        out.extend(_flat(stmt) if isinstance(stmt, _s.SeqStmt) else [stmt])
    return out


class _Replace(StmtExprMutator):
    """Replaces the loads equal to a bound one by its variable."""

    def __init__(self, bound: list[tuple[_e.Var, _e.BufferLoad]]) -> None:
        super().__init__()
        self.bound = bound

    def visit_BufferLoad(self, node: _e.BufferLoad) -> Any:
        for var, load in self.bound:
            if node is load or (node.buffer.data is load.buffer.data
                                and structural_equal(node, load)):
                return var
        return self.generic_visit(node)


class _SharedLoads(StmtExprMutator):
    def __init__(self, whole_vector_buffers: dict[int, int]) -> None:
        super().__init__()
        self.whole_vector_buffers = whole_vector_buffers

    def visit_SeqStmt(self, node: _s.SeqStmt) -> Any:
        seq = _flat(node)  # a wide store split in parts is a SeqStmt inside the run
        if len(seq) < 2 or not all(isinstance(s, _s.BufferStore) for s in seq):
            return self.generic_visit(node)
        stored = {id(s.buffer.data) for s in seq}
        # structural key -> [first statement index, use count, the load]
        seen: dict[tuple[int, int], list[Any]] = {}
        for index, store in enumerate(seq):
            for load in _loads_unless_guarded(store.value) or ():
                if not self._shareable(load, stored):
                    continue
                key = (id(load.buffer.data), structural_hash(load))
                entry = seen.get(key)
                if entry is None:
                    seen[key] = [index, 1, load]
                elif entry[2] is load or structural_equal(entry[2], load):
                    entry[1] += 1
        first_use: dict[int, list[tuple[_e.Var, _e.BufferLoad]]] = {}
        for index, count, load in seen.values():
            if count > 1:
                first_use.setdefault(index, []).append((_e.Var("shared", load.dtype), load))
        if not first_use:
            return node
        replace = _Replace([pair for pairs in first_use.values() for pair in pairs])
        rest: list[_s.Stmt] = []
        for index in reversed(range(len(seq))):
            rest.insert(0, replace.visit(seq[index]))
            lets = first_use.get(index)
            if lets:
                body: _s.Stmt = rest[0] if len(rest) == 1 else _s.SeqStmt(rest)
                for var, load in reversed(lets):
                    body = _s.LetStmt(var, load, body)
                rest = [body]
        return rest[0] if len(rest) == 1 else _s.SeqStmt(rest)

    def _shareable(self, load: _e.BufferLoad, stored: set[int]) -> bool:
        key = id(load.buffer.data)
        return (DataType(load.dtype).lanes > 1 and key not in stored
                and key not in self.whole_vector_buffers
                and contiguous_index(load.buffer, list(load.indices)) is not None)


def share_vector_loads(stmt: _s.Stmt) -> _s.Stmt:
    """``stmt`` with each contiguous vector load repeated across a run of stores bound once
    before its first use."""
    allocated: set[int] = set()
    post_order_visit(stmt, lambda n: allocated.add(id(n.buffer_var))
                     if isinstance(n, _s.Allocate) else None)
    local_vectors = {key: lanes for key, lanes in uniform_vector_lanes(stmt).items()
                     if key in allocated}
    return _SharedLoads(local_vectors).visit(stmt)


def _share_func(func: PrimFunc) -> PrimFunc:
    body = share_vector_loads(func.body)
    return func if body is func.body else func.with_body(body)


def ShareVectorLoads() -> PrimFuncPass:  # noqa: N802 - named like TVM's pass factories
    """The pass: vector loads repeated across a run of stores are bound once, ahead."""
    return prim_func_pass(_share_func, "tir.ShareVectorLoads")
