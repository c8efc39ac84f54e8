"""From a schedule to a TIR loop nest: inlining, bound inference, loop nests, attachment.

Entry point: :func:`schedule_to_stmt` (used by :func:`kiln.te.lowering.lower`).

Steps, as in TVM's ``ScheduleOps``:

1. *Inline*: stages marked ``compute_inline`` are substituted into their consumers.
2. *Bound inference* (consumers first): a root stage covers its whole domain; a stage attached
   with ``compute_at(T, iv)`` covers what its consumers read while the loops of ``T`` outside
   (and at) ``iv`` are fixed and every inner loop ranges over its extent — so the region is
   symbolic in the fixed loops (``[io*32, io*32 + 31]``). Splits and fuses then give each loop
   its extent; every loop runs from 0.
3. *Loop nests*: each stage becomes its leaf loops around a ``BufferStore`` on N-D buffers;
   a root axis is ``region.min + (outer * factor + inner)``; a split that does not divide
   evenly adds a ``likely(...)`` guard. A reduction gets its init statement after the loops
   that do not depend on the reduction and its update inside all loops. Attached stages are
   placed, inside a ``BufferRealize`` of their region, at the top of their attach loop.
"""

from __future__ import annotations

from typing import Any

from kiln.arith.analyzer import Analyzer
from kiln.arith.int_set import eval_set
from kiln.ir.expr import IntImm, PrimExpr, Range
from kiln.runtime.error import TVMError
from kiln.te.schedule import Fuse, Schedule, Split, Stage
from kiln.te.tensor import ComputeOp, ExternOp, PlaceholderOp, ScanOp, Tensor, tensors_read
from kiln.tir import expr as _e
from kiln.tir import op as _op
from kiln.tir import stmt as _s
from kiln.tir.buffer import Buffer, decl_buffer
from kiln.tir.stmt_functor import StmtExprMutator, post_order_visit, substitute

__all__ = ["schedule_to_stmt", "replace_buffers"]


class _Inliner(StmtExprMutator):
    def __init__(self, inline: dict[int, tuple[list[_e.Var], list[PrimExpr]]],
                 sch: Schedule) -> None:
        super().__init__()
        self.inline, self.sch = inline, sch

    def visit_ProducerLoad(self, node):
        indices = [self.visit(i) for i in node.indices]
        stage = self.sch[node.producer.op]
        entry = self.inline.get(id(stage))
        if entry is None:
            if all(a is b for a, b in zip(indices, node.indices)):
                return node
            return _e.ProducerLoad(node.producer, indices)
        axis_vars, bodies = entry
        return substitute(bodies[node.producer.value_index], dict(zip(axis_vars, indices)))


class _BufferReplacer(StmtExprMutator):
    """Swap buffers (loads, stores, call arguments) and substitute variables."""

    def __init__(self, buffer_map: dict[int, Buffer], var_map: dict) -> None:
        super().__init__()
        self.buffer_map = buffer_map
        self.var_map = {id(k): v for k, v in var_map.items()}

    def visit_Var(self, node):
        return self.var_map.get(id(node), node)

    def visit_BufferLoad(self, node):
        buf = self.buffer_map.get(id(node.buffer), node.buffer)
        return _e.BufferLoad(buf, [self.visit(i) for i in node.indices])

    def visit_BufferStore(self, node):
        buf = self.buffer_map.get(id(node.buffer), node.buffer)
        return _s.BufferStore(buf, self.visit(node.value), [self.visit(i) for i in node.indices])

    def visit_Call(self, node):
        args = [self.buffer_map.get(id(a), a) if isinstance(a, Buffer) else self.visit(a)
                if isinstance(a, PrimExpr) else a for a in node.args]
        return _e.Call(node.dtype, node.op, args)


def replace_buffers(stmt: Any, buffer_map: dict, var_map: dict | None = None) -> Any:
    """Replace Buffers (keys of ``buffer_map``) and Vars (``var_map``) throughout ``stmt``."""
    return _BufferReplacer({id(k): v for k, v in buffer_map.items()}, var_map or {}).visit(stmt)


class _ToBufferLoads(StmtExprMutator):
    def __init__(self, lowering: _ScheduleLowering) -> None:
        super().__init__()
        self.lowering = lowering

    def visit_ProducerLoad(self, node):
        buf = self.lowering.buffer_of(node.producer)
        return _e.BufferLoad(buf, [self.visit(i) for i in node.indices])


class _ScheduleLowering:
    def __init__(self, sch: Schedule, arg_buffers: dict[int, Buffer]) -> None:
        self.sch = sch
        self.analyzer = Analyzer()
        self.arg_buffers = arg_buffers  # id(tensor) -> Buffer, for args/binds
        self.order = self._topo_order()
        self.bodies: dict[int, list[PrimExpr]] = {}
        self.ranges: dict[int, Range] = {}  # id(IterVar) -> Range (loops start at 0)
        self.root_value: dict[int, dict[int, PrimExpr]] = {}
        self.guards: dict[int, list[tuple[PrimExpr, bool]]] = {}
        self.buffers: dict[tuple[int, int], Buffer] = {}
        self.realize: dict[int, list[Range]] = {}
        self.attached: dict[int, list[Stage]] = {}  # id(attach IterVar) -> stages
        self.scan_member: dict[int, Stage] = {}

    # ---- setup -----------------------------------------------------------------------------
    def _topo_order(self) -> list[Stage]:
        order: list[Stage] = []
        seen: set[int] = set()

        def visit(stage: Stage) -> None:
            if id(stage) in seen:
                return
            seen.add(id(stage))
            for t in stage.op.input_tensors:
                visit(self.sch[t.op])
            order.append(stage)

        for op in self.sch.outputs:
            visit(self.sch[op])
        return order

    def stage_of(self, tensor: Tensor) -> Stage:
        return self.sch[tensor.op]

    def buffer_of(self, tensor: Tensor) -> Buffer:
        stage = self.stage_of(tensor)
        key = (id(stage), tensor.value_index)
        buf = self.buffers.get(key)
        if buf is None:
            raise TVMError(f"tensor {tensor.name} is read but is neither computed by the "
                           f"schedule nor passed in the argument list")
        return buf

    def inline_all(self) -> None:
        inline: dict[int, tuple[list[_e.Var], list[PrimExpr]]] = {}
        inliner = _Inliner(inline, self.sch)
        for stage in self.order:
            op = stage.op
            if isinstance(op, ComputeOp):
                bodies = [inliner.visit(b) for b in op.body]
                self.bodies[id(stage)] = bodies
                if stage.attach_type == "inline":
                    inline[id(stage)] = ([iv.var for iv in op.axis], bodies)

    def assign_buffers(self) -> None:
        for stage in self.order:
            op = stage.op
            if stage.attach_type == "inline":
                continue
            for i in range(op.num_outputs):
                tensor = op.output(i)
                origin = stage.origin_op.output(i) if stage.origin_op.num_outputs > i else tensor
                buf = self.arg_buffers.get(id(tensor)) or self.arg_buffers.get(id(origin))
                if buf is None:
                    if isinstance(op, PlaceholderOp):
                        continue  # reported if read (buffer_of)
                    if stage.is_output:
                        raise TVMError(f"output {op.name} is not in the argument list")
                    name = op.name if op.num_outputs == 1 else f"{op.name}_v{i}"
                    buf = decl_buffer(tensor.shape, tensor.dtype, name=name,
                                      scope=stage.scope or "global")
                self.buffers[(id(stage), i)] = buf
            if isinstance(op, ScanOp):
                for k, state in enumerate(op.state_placeholder):
                    buf = self.buffers[(id(stage), k)]
                    for member in (op.init[k], op.update[k], state):
                        member_stage = self.stage_of(member)
                        self.buffers[(id(member_stage), member.value_index)] = buf
                        if member is not state:
                            self.scan_member[id(member_stage)] = stage

    # ---- bound inference -------------------------------------------------------------------
    def _fixed_vars(self, stage: Stage | None, iv: _e.IterVar | None) -> set[int]:
        fixed: set[int] = set()
        while stage is not None:
            pos = stage._leaf_index(iv)
            fixed.update(id(v.var) for v in stage.leaf_iter_vars[:pos + 1])
            iv = stage.attach_ivar
            stage = stage.attach_stage if stage.attach_type == "scope" else None
        return fixed

    def _accesses(self, consumer: Stage, producer: Stage) -> list[list[PrimExpr]]:
        found: list[list[PrimExpr]] = []
        bodies = self.bodies.get(id(consumer), [])

        def visit(node):
            if isinstance(node, _e.ProducerLoad) and self.sch[node.producer.op] is producer:
                found.append(list(node.indices))

        for b in bodies:
            post_order_visit(b, visit)
        if isinstance(consumer.op, ExternOp):
            for t in consumer.op.inputs:
                if self.stage_of(t) is producer:
                    found.append(None)
        return found

    def infer_bounds(self) -> None:
        for stage in reversed(self.order):
            op = stage.op
            if stage.attach_type == "inline" or isinstance(op, PlaceholderOp | ExternOp |
                                                             ScanOp):
                continue
            member_of = self.scan_member.get(id(stage))
            for iv in op.reduce_axis:
                self.ranges[id(iv)] = iv.dom
            if stage.attach_type == "scope":
                regions = self._demand(stage)
                for iv, rng in zip(op.axis, regions):
                    self.ranges[id(iv)] = rng
            else:
                for iv in op.axis:
                    self.ranges[id(iv)] = iv.dom
            if member_of is not None and op is self.stage_of(member_of.op.update[0]).op:
                scan_iv = member_of.op.scan_axis
                self.ranges[id(op.axis[0])] = Range.from_min_extent(scan_iv.var, 1)
            self.realize[id(stage)] = [self.ranges[id(iv)] for iv in op.axis]
            self._pass_down(stage)

    def _demand(self, stage: Stage) -> list[Range]:
        fixed = self._fixed_vars(stage.attach_stage, stage.attach_ivar)
        dom_map = {}
        for other in self.order:
            for iv in other.leaf_iter_vars:
                if id(iv) in self.ranges and id(iv.var) not in fixed:
                    dom_map[iv.var] = Range.from_min_extent(0, self.ranges[id(iv)].extent)
        ndim = len(stage.op.axis)
        mins: list[list[PrimExpr | None]] = [[] for _ in range(ndim)]
        maxs: list[list[PrimExpr | None]] = [[] for _ in range(ndim)]
        for consumer in self.order:
            if consumer.attach_type == "inline" or id(consumer) not in self.root_value:
                continue
            for indices in self._accesses(consumer, stage):
                if indices is None:
                    for d, iv in enumerate(stage.op.axis):
                        mins[d].append(iv.dom.min)
                        maxs[d].append(iv.dom.min + iv.dom.extent - 1)
                    continue
                vmap = self.root_value[id(consumer)]
                for d, index in enumerate(indices):
                    s = eval_set(substitute(index, vmap), dom_map, self.analyzer)
                    mins[d].append(s.min_value)
                    maxs[d].append(s.max_value)
        regions = []
        for d, iv in enumerate(stage.op.axis):
            lo_dom, hi_dom = iv.dom.min, iv.dom.min + iv.dom.extent - 1
            if not mins[d] or any(v is None for v in mins[d] + maxs[d]):
                regions.append(iv.dom)
                continue
            lo, hi = mins[d][0], maxs[d][0]
            for v in mins[d][1:]:
                lo = _op.min(lo, v)
            for v in maxs[d][1:]:
                hi = _op.max(hi, v)
            lo = self.analyzer.simplify(_op.max(lo, lo_dom))
            hi = self.analyzer.simplify(_op.min(hi, hi_dom))
            regions.append(Range.from_min_extent(lo, self.analyzer.simplify(hi - lo + 1)))
        return regions

    def _pass_down(self, stage: Stage) -> None:
        ana = self.analyzer
        guards: list[tuple[PrimExpr, bool]] = []
        rel_value: dict[int, PrimExpr] = {}
        for rel in stage.relations:
            if isinstance(rel, Split):
                ext = self.ranges[id(rel.parent)].extent
                if rel.factor is not None:
                    inner_ext = rel.factor
                    outer_ext = ana.simplify(_op.floordiv(ext + rel.factor - 1, rel.factor))
                else:
                    outer_ext = rel.nparts
                    inner_ext = ana.simplify(_op.floordiv(ext + rel.nparts - 1, rel.nparts))
                self.ranges[id(rel.outer)] = Range.from_min_extent(0, outer_ext)
                self.ranges[id(rel.inner)] = Range.from_min_extent(0, inner_ext)
            else:
                outer_ext = self.ranges[id(rel.outer)].extent
                inner_ext = self.ranges[id(rel.inner)].extent
                self.ranges[id(rel.fused)] = Range.from_min_extent(
                    0, ana.simplify(outer_ext * inner_ext))
        for iv in stage.leaf_iter_vars:
            ana.bind(iv.var, Range.from_min_extent(0, self.ranges[id(iv)].extent),
                     allow_override=True)
            rel_value[id(iv)] = iv.var
        for rel in reversed(stage.relations):
            if isinstance(rel, Split):
                factor = rel.factor if rel.factor is not None else \
                    self.ranges[id(rel.inner)].extent
                value = rel_value[id(rel.outer)] * factor + rel_value[id(rel.inner)]
                rel_value[id(rel.parent)] = value
                ext = self.ranges[id(rel.parent)].extent
                covered = self.ranges[id(rel.outer)].extent * self.ranges[id(rel.inner)].extent
                if not ana.can_prove_equal(covered, ext):
                    is_reduce = rel.parent.iter_type == _e.IterVarType.CommReduce
                    guards.append((ana.simplify(value < ext), is_reduce))
            else:
                inner_ext = self.ranges[id(rel.inner)].extent
                fused = rel_value[id(rel.fused)]
                rel_value[id(rel.outer)] = _op.floordiv(fused, inner_ext)
                rel_value[id(rel.inner)] = _op.floormod(fused, inner_ext)
        op = stage.op
        values = {}
        for iv in list(op.axis) + list(op.reduce_axis):
            rng = self.ranges[id(iv)]
            values[id(iv.var)] = ana.simplify(rng.min + rel_value[id(iv)])
        self.root_value[id(stage)] = {iv.var: values[id(iv.var)]
                                      for iv in list(op.axis) + list(op.reduce_axis)}
        self.guards[id(stage)] = guards
        for iv in stage.all_iter_vars:
            if id(iv) not in self.ranges:
                raise TVMError(f"internal: no range inferred for {iv.var.name} in {op.name}")

    # ---- statements ------------------------------------------------------------------------
    def collect_attachments(self) -> None:
        for stage in self.order:
            if stage.attach_type == "scope":
                self.attached.setdefault(id(stage.attach_ivar), []).append(stage)

    def _loop(self, stage: Stage, iv: _e.IterVar, body: _s.Stmt, attach: bool) -> _s.Stmt:
        if attach:
            inner = self.attached.get(id(iv))
            if inner:
                body = self._with_attached(inner, body)
        attr = stage.iter_var_attrs.get(id(iv))
        kind = attr.kind if attr is not None else _s.ForKind.SERIAL
        thread = attr.thread if attr is not None else None
        loop = _s.For(iv.var, 0, self.ranges[id(iv)].extent, kind, body, thread_binding=thread)
        if attr is not None:
            for key, value in reversed(attr.pragmas):
                value = _e.StringImm(value) if isinstance(value, str) else \
                    _op.convert_expr(value if value is not None else 1)
                loop = _s.AttrStmt(iv.var, "pragma_" + key, value, loop)
        return loop

    def _with_attached(self, stages: list[Stage], body: _s.Stmt) -> _s.Stmt:
        for stage in reversed(stages):
            stmt = self.build(stage)
            body = _s.stmt_seq(stmt, body)
            for i in reversed(range(stage.op.num_outputs)):
                buf = self.buffers[(id(stage), i)]
                body = self._realize(stage, buf, self.realize[id(stage)], body)
        return body

    @staticmethod
    def _realize(stage: Stage, buf: Buffer, bounds, body: _s.Stmt) -> _s.Stmt:
        body = _s.BufferRealize(buf, bounds, _op.const(True), body)
        if stage.storage_aligns:
            values = [v for align in stage.storage_aligns for v in align]
            body = _s.AttrStmt(buf, "buffer_dim_align",
                               _e.Call("handle", "tir.tvm_tuple", values), body)
        return body

    def _nest(self, stage: Stage, loops, body: _s.Stmt, attach: bool = True) -> _s.Stmt:
        for iv in reversed(list(loops)):
            body = self._loop(stage, iv, body, attach)
        return body

    def _guarded(self, stage: Stage, stmt: _s.Stmt, include_reduce: bool) -> _s.Stmt:
        conds = [c for c, is_reduce in self.guards[id(stage)] if include_reduce or not is_reduce]
        if not conds:
            return stmt
        return _s.IfThenElse(_op.likely(_op.all(*conds)), stmt)

    def _lower_expr(self, stage: Stage, expr: PrimExpr) -> PrimExpr:
        expr = substitute(expr, self.root_value[id(stage)])
        return _ToBufferLoads(self).visit(expr)

    def build(self, stage: Stage) -> _s.Stmt:
        op = stage.op
        if isinstance(op, ExternOp):
            return self.build_extern(stage)
        if isinstance(op, ScanOp):
            return self.build_scan(stage)
        bodies = self.bodies[id(stage)]
        values = self.root_value[id(stage)]
        index = [values[iv.var] for iv in op.axis]
        leaves = stage.leaf_iter_vars
        tensorize_at = next((i for i, iv in enumerate(leaves)
                             if stage.iter_var_attrs.get(id(iv)) is not None
                             and stage.iter_var_attrs[id(iv)].tensor_intrin is not None), None)
        if not isinstance(bodies[0], _e.Reduce):
            if tensorize_at is not None:
                body = self.tensorized(stage, tensorize_at, "body")
                return self._nest(stage, leaves[:tensorize_at], body)
            stores = [_s.BufferStore(self.buffers[(id(stage), i)], self._lower_expr(stage, b),
                                     index) for i, b in enumerate(bodies)]
            body = self._guarded(stage, _s.stmt_seq(stores), True)
            return self._nest(stage, leaves, body)
        reduce_dep = self._reduce_dependent(stage)
        first = next((i for i, iv in enumerate(leaves) if id(iv) in reduce_dep), len(leaves))
        init_loops = [iv for iv in leaves[first:] if id(iv) not in reduce_dep]
        if tensorize_at is not None:
            if first >= tensorize_at:
                body = self.tensorized(stage, tensorize_at, "body")
                return self._nest(stage, leaves[:tensorize_at], body)
            init_loops = [iv for iv in leaves[first:tensorize_at] if id(iv) not in reduce_dep]
            init = self._nest(stage, init_loops, self.tensorized(stage, tensorize_at, "init"),
                              attach=False)
            update = self._nest(stage, leaves[first:tensorize_at],
                                self.tensorized(stage, tensorize_at, "update"))
            return self._nest(stage, leaves[:first], _s.stmt_seq(init, update))
        init_stmt, update_stmt = self._reduction(stage, bodies, index)
        init = self._nest(stage, init_loops, self._guarded(stage, init_stmt, False),
                          attach=False)
        update = self._nest(stage, leaves[first:], self._guarded(stage, update_stmt, True))
        return self._nest(stage, leaves[:first], _s.stmt_seq(init, update))

    def _reduce_dependent(self, stage: Stage) -> set[int]:
        dep = {id(iv) for iv in stage.op.reduce_axis}
        for rel in stage.relations:
            if isinstance(rel, Split) and id(rel.parent) in dep:
                dep.update((id(rel.outer), id(rel.inner)))
            elif isinstance(rel, Fuse) and (id(rel.outer) in dep or id(rel.inner) in dep):
                dep.add(id(rel.fused))
        return dep

    def _reduction(self, stage: Stage, bodies, index):
        red = bodies[0]
        combiner = red.combiner
        bufs = [self.buffers[(id(stage), i)] for i in range(len(bodies))]
        inits = red.init if red.init else combiner.identity_element
        init = _s.stmt_seq([_s.BufferStore(b, self._lower_expr(stage, v), index)
                            for b, v in zip(bufs, inits)])
        lhs = [_e.BufferLoad(b, index) for b in bufs]
        rhs = [self._lower_expr(stage, s) for s in red.source]
        vmap = dict(zip(combiner.lhs, lhs))
        vmap.update(zip(combiner.rhs, rhs))
        results = [substitute(r, vmap) for r in combiner.result]
        if len(bufs) == 1:
            update = _s.BufferStore(bufs[0], results[0], index)
        else:
            temps = [_e.Var(f"{stage.op.name}_v{i}", r.dtype) for i, r in enumerate(results)]
            update = _s.stmt_seq([_s.BufferStore(b, t, index) for b, t in zip(bufs, temps)])
            for t, r in reversed(list(zip(temps, results))):
                update = _s.LetStmt(t, r, update)
        cond = self._lower_expr(stage, red.condition)
        if not (isinstance(cond, IntImm) and cond.value):
            update = _s.IfThenElse(cond, update)
        return init, update

    def tensorized(self, stage: Stage, at: int, part: str) -> _s.Stmt:
        intrin = stage.iter_var_attrs[id(stage.leaf_iter_vars[at])].tensor_intrin
        stmt = {"body": intrin.body, "init": intrin.reduce_init,
                "update": intrin.reduce_update}[part]
        if stmt is None:
            raise TVMError(f"tensorize {intrin.name}: the intrinsic has no '{part}' statement "
                           f"(return (body, reset, update) from intrin_func for reductions "
                           f"whose reduce loops are outside the tensorized axis)")
        inner = stage.leaf_iter_vars[at:]
        dom_map = {iv.var: Range.from_min_extent(0, self.ranges[id(iv)].extent)
                   for iv in inner}
        values = self.root_value[id(stage)]
        bodies = self.bodies[id(stage)]
        actual_inputs = tensors_read(bodies)
        if len(actual_inputs) != len(intrin.inputs):
            raise TVMError(f"tensorize {intrin.name}: the stage reads {len(actual_inputs)} "
                           f"tensors but the intrinsic declares {len(intrin.inputs)}")
        buffer_map: dict = {}
        var_map: dict = {}
        for tensor, ibuf in zip(actual_inputs, intrin.buffers):
            accesses = []

            def visit(node, tensor=tensor, accesses=accesses):
                if isinstance(node, _e.ProducerLoad) and node.producer is tensor:
                    accesses.append(node.indices)

            for b in bodies:
                post_order_visit(b, visit)
            mins = [eval_set(substitute(i, values), dom_map, self.analyzer).min_value
                    for i in accesses[0]]
            self._bind_view(tensor, self.buffer_of(tensor), mins, ibuf, buffer_map, var_map)
        for i in range(stage.op.num_outputs):
            ibuf = intrin.buffers[len(intrin.inputs) + i]
            mins = [eval_set(values[iv.var], dom_map, self.analyzer).min_value
                    for iv in stage.op.axis]
            self._bind_view(stage.op.output(i), self.buffers[(id(stage), i)], mins, ibuf,
                            buffer_map, var_map, stage)
        return replace_buffers(stmt, buffer_map, var_map)

    def _bind_view(self, tensor, buf: Buffer, mins, ibuf: Buffer, buffer_map, var_map,
                   stage: Stage | None = None) -> None:
        stage = stage or self.stage_of(tensor)
        realize = self.realize.get(id(stage))
        if realize is not None and not any(buf is b for b in self.arg_buffers.values()):
            shape = [r.extent for r in realize]
            mins = [m - r.min for m, r in zip(mins, realize)]
        else:
            shape = list(buf.shape)
        strides = list(buf.strides) if buf.strides else _row_major_strides(shape)
        offset = _op.const(0, "int32")
        for m, st in zip(mins, strides):
            offset = offset + m * st
        offset = self.analyzer.simplify(offset)
        keep = len(ibuf.shape)
        view_strides = [self.analyzer.simplify(s) for s in strides[len(strides) - keep:]]
        view = Buffer(buf.data, buf.dtype, list(ibuf.shape), view_strides, offset,
                      ibuf.name)
        buffer_map[ibuf] = view
        var_map[ibuf.data] = buf.data
        if isinstance(ibuf.elem_offset, _e.Var):
            var_map[ibuf.elem_offset] = offset
        for s_intrin, s_actual in zip(ibuf.strides, view_strides):
            if isinstance(s_intrin, _e.Var):
                var_map[s_intrin] = s_actual

    def build_extern(self, stage: Stage) -> _s.Stmt:
        op = stage.op
        buffer_map = {}
        var_map = {}
        for tensor, placeholder in zip(op.inputs, op.input_placeholders):
            actual = self.buffer_of(tensor)
            buffer_map[placeholder] = actual
            var_map[placeholder.data] = actual.data
        for i, placeholder in enumerate(op.output_placeholders):
            actual = self.buffers[(id(stage), i)]
            buffer_map[placeholder] = actual
            var_map[placeholder.data] = actual.data
        return replace_buffers(op.body, buffer_map, var_map)

    def build_scan(self, stage: Stage) -> _s.Stmt:
        op = stage.op
        init = [self.build(self.stage_of(t)) for t in op.init]
        update = [self.build(self.stage_of(t)) for t in op.update]
        axis = op.scan_axis
        loop = _s.For(axis.var, axis.dom.min, axis.dom.extent, _s.ForKind.SERIAL,
                      _s.stmt_seq(update))
        return _s.stmt_seq(init, loop)

    def lower(self) -> _s.Stmt:
        self.inline_all()
        self.assign_buffers()
        self.collect_attachments()
        self.infer_bounds()
        stmts = []
        realizes = []
        for stage in self.order:
            if stage.attach_type in ("inline", "scope") or isinstance(stage.op, PlaceholderOp):
                continue
            if id(stage) in self.scan_member:
                continue
            stmts.append(self.build(stage))
            if not stage.is_output:
                for i in range(stage.op.num_outputs):
                    buf = self.buffers[(id(stage), i)]
                    if not any(buf is b for b in self.arg_buffers.values()):
                        bounds = self.realize.get(id(stage)) or [
                            Range.from_min_extent(0, d) for d in buf.shape]
                        realizes.append((stage, buf, bounds))
        body = _s.stmt_seq(stmts) if stmts else _s.Evaluate(0)
        for stage, buf, bounds in reversed(realizes):
            body = self._realize(stage, buf, bounds, body)
        return body


def _row_major_strides(shape) -> list[PrimExpr]:
    strides: list[PrimExpr] = []
    acc: PrimExpr = _op.const(1, "int32")
    for dim in reversed(shape):
        strides.append(acc)
        acc = acc * dim
    return list(reversed(strides))


def schedule_to_stmt(sch: Schedule, arg_buffers: dict[int, Buffer]) -> _s.Stmt:
    """The loop nest of ``sch`` on N-D buffers (``arg_buffers``: id(tensor) -> Buffer)."""
    return _ScheduleLowering(sch, arg_buffers).lower()


def _io_buffers(sch: Schedule) -> dict[int, Buffer]:
    """A buffer for every placeholder and output tensor of ``sch`` (TVM's defaults)."""
    bufs: dict[int, Buffer] = {}
    for stage in sch.stages:
        if isinstance(stage.op, PlaceholderOp) or stage.is_output:
            for i in range(stage.op.num_outputs):
                t = stage.op.output(i)
                bufs[id(t)] = decl_buffer(t.shape, t.dtype, name=t.op.name)
    return bufs


def infer_bound(sch: Schedule) -> dict[_e.IterVar, Range]:
    """The range of every iteration variable of ``sch`` (TVM's ``te.schedule.InferBound``):
    a stage attached inside another loop covers only the region its consumers read there."""
    if not isinstance(sch, Schedule):
        raise TVMError(f"InferBound: expected a te.Schedule, got {type(sch).__name__}")
    low = _ScheduleLowering(sch, _io_buffers(sch))
    low.inline_all()
    low.assign_buffers()
    low.collect_attachments()
    low.infer_bounds()
    bounds: dict[_e.IterVar, Range] = {}
    for stage in low.order:
        if stage.attach_type == "inline":
            continue
        for iv in list(stage.all_iter_vars) + list(getattr(stage.op, "reduce_axis", [])):
            rng = low.ranges.get(id(iv))
            if rng is not None:
                bounds[iv] = rng
    return bounds


def schedule_ops(sch: Schedule, bounds: dict | None = None,
                 debug_keep_trivial_loop: bool = False) -> _s.Stmt:
    """The loop nest of ``sch`` over its placeholder and output buffers (TVM's
    ``te.schedule.ScheduleOps``). ``bounds`` is :func:`infer_bound`'s result; kiln infers
    the bounds again while lowering, so it is only checked to be such a map."""
    if not isinstance(sch, Schedule):
        raise TVMError(f"ScheduleOps: expected a te.Schedule, got {type(sch).__name__}")
    if bounds is not None and not isinstance(bounds, dict):
        raise TVMError(f"ScheduleOps: bounds must be the map InferBound returns, got "
                       f"{type(bounds).__name__}")
    return schedule_to_stmt(sch, _io_buffers(sch))
