"""StorageFlatten: N-D buffer accesses become 1-D, realizations become allocations.

Entry points: :func:`StorageFlatten` (the pass), :func:`flatten_buffers` (on a PrimFunc).

After this pass every ``BufferLoad``/``BufferStore`` has one index, on a 1-D buffer that
shares its ``data`` var with the original buffer (so storage is identified by the data var),
and every ``BufferRealize`` is an ``Allocate`` of the realized region. The function's
``buffer_map`` keeps the N-D buffers (their shapes are checked by MakePackedAPI).

Index of ``B[i0, ..., ik]``: ``elem_offset + sum((i_d - min_d) * stride_d)`` where ``min_d``
is the realize bound (0 for arguments) and strides are the buffer's own or row-major over the
realized extents, padded where an enclosing ``AttrStmt(buffer, "buffer_dim_align",
tvm_tuple(dim, factor, offset, ...))`` (from ``Stage.storage_align``) asks that
``stride[dim] % factor == offset``.
"""

from __future__ import annotations

from kiln.arith.analyzer import Analyzer
from kiln.ir.expr import IntImm, PrimExpr
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir import stmt as _s
from kiln.tir.buffer import Buffer
from kiln.tir.function import PrimFunc
from kiln.tir.stmt_functor import StmtExprMutator
from kiln.tir.transform.base import prim_func_pass

__all__ = ["StorageFlatten", "flatten_buffers", "row_major_strides"]


def row_major_strides(shape: list[PrimExpr]) -> list[PrimExpr]:
    """Strides of a compact row-major layout of ``shape``."""
    strides: list[PrimExpr] = []
    acc: PrimExpr = _op.const(1, "int32")
    for dim in reversed(shape):
        strides.append(acc)
        acc = _op.multiply(acc, dim)
    return list(reversed(strides))


class _Layout:
    def __init__(self, flat: Buffer, mins: list[PrimExpr], strides: list[PrimExpr],
                 offset: PrimExpr) -> None:
        self.flat, self.mins, self.strides, self.offset = flat, mins, strides, offset


class _Flattener(StmtExprMutator):
    def __init__(self, analyzer: Analyzer) -> None:
        super().__init__()
        self.analyzer = analyzer
        self.layouts: dict[int, _Layout] = {}
        self.flat_of_data: dict[int, Buffer] = {}
        self.aligns: dict[int, list[tuple[int, int, int]]] = {}

    def _flat_buffer(self, buf: Buffer, size: PrimExpr) -> Buffer:
        flat = self.flat_of_data.get(id(buf.data))
        if flat is None:
            flat = Buffer(buf.data, buf.dtype, [size], [], 0, buf.name, buf.data_alignment,
                          1, buf.buffer_type)
            self.flat_of_data[id(buf.data)] = flat
        return flat

    def layout(self, buf: Buffer) -> _Layout:
        layout = self.layouts.get(id(buf))
        if layout is None:
            strides = list(buf.strides) or row_major_strides(buf.shape)
            size = _op.const(1, "int32")
            for dim in buf.shape:
                size = _op.multiply(size, dim)
            if buf.strides and buf.shape:
                size = _op.multiply(buf.strides[0], buf.shape[0])
            flat = self._flat_buffer(buf, self.analyzer.simplify(size))
            layout = _Layout(flat, [_op.const(0, "int32")] * len(buf.shape), strides,
                             buf.elem_offset)
            self.layouts[id(buf)] = layout
        return layout

    def flat_index(self, buf: Buffer, indices: list[PrimExpr]) -> PrimExpr:
        layout = self.layout(buf)
        index = layout.offset
        for i, m, st in zip(indices, layout.mins, layout.strides):
            index = _op.add(index, _op.multiply(_op.subtract(i, m), st))
        if not indices:
            index = _op.add(index, 0)
        return self.analyzer.simplify(index)

    def visit_BufferLoad(self, node):
        indices = [self.visit(i) for i in node.indices]
        return _e.BufferLoad(self.layout(node.buffer).flat,
                             [self.flat_index(node.buffer, indices)])

    def visit_BufferStore(self, node):
        indices = [self.visit(i) for i in node.indices]
        return _s.BufferStore(self.layout(node.buffer).flat, self.visit(node.value),
                              [self.flat_index(node.buffer, indices)])

    def visit_Call(self, node):
        args = []
        for a in node.args:
            args.append(a if isinstance(a, Buffer) or not isinstance(a, PrimExpr)
                        else self.visit(a))
        if all(a is b for a, b in zip(args, node.args)):
            return node
        return _e.Call(node.dtype, node.op, args)

    def visit_AttrStmt(self, node):
        if node.attr_key == "buffer_dim_align":
            # value: tvm_tuple(dim, factor, offset, dim, factor, offset, ...)
            values = [int(v.value) for v in node.value.args]
            self.aligns[id(node.node)] = [tuple(values[i:i + 3])
                                          for i in range(0, len(values), 3)]
            return self.visit(node.body)
        return super().generic_visit(node)

    def visit_BufferRealize(self, node):
        buf = node.buffer
        extents = [self.analyzer.simplify(r.extent) for r in node.bounds]
        mins = [r.min for r in node.bounds]
        aligns = self.aligns.get(id(buf), [])
        strides = row_major_strides(extents)
        if aligns:
            strides = _aligned_strides(extents, aligns, self.analyzer)
        size = self.analyzer.simplify(_op.multiply(strides[0], extents[0])) if extents \
            else _op.const(1, "int32")
        flat = Buffer(buf.data, buf.dtype, [size], [], 0, buf.name, buf.data_alignment, 1,
                      buf.buffer_type)
        self.flat_of_data[id(buf.data)] = flat
        self.layouts[id(buf)] = _Layout(flat, mins, strides, IntImm("int32", 0))
        body = self.visit(node.body)
        return _s.Allocate(buf.data, buf.dtype, [size], _op.const(True), body)


def _aligned_strides(extents, aligns, analyzer: Analyzer) -> list[PrimExpr]:
    by_dim = {dim: (factor, offset) for dim, factor, offset in aligns}
    strides: list[PrimExpr] = [None] * len(extents)
    acc: PrimExpr = _op.const(1, "int32")
    for d in reversed(range(len(extents))):
        if d in by_dim and isinstance(acc, IntImm):
            factor, offset = by_dim[d]
            value = acc.value
            value = value + ((offset - value) % factor)
            acc = _op.const(value, "int32")
        strides[d] = acc
        acc = analyzer.simplify(_op.multiply(acc, extents[d]))
    return strides


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    """Flatten every buffer access of ``func`` to 1-D (see module docstring)."""
    analyzer = Analyzer()
    flattener = _Flattener(analyzer)
    body = flattener.visit(func.body)
    return func.with_body(body)


def StorageFlatten(cache_line_size: int = 64, create_bound_attribute: bool = False):  # noqa: N802
    """The StorageFlatten pass: N-D buffers to 1-D, BufferRealize to Allocate."""
    return prim_func_pass(flatten_buffers, "tir.StorageFlatten")
