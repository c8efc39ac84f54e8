"""Schedules: how to compute tensors (TVM's ``tvm.te.schedule``).

Entry points: :func:`create_schedule`, :class:`Schedule` (``s[C]``, ``cache_read``,
``cache_write``, ``rfactor``), :class:`Stage` (``split``, ``fuse``, ``reorder``, ``tile``,
``compute_at``, ``compute_inline``, ``compute_root``, ``vectorize``, ``parallel``, ``unroll``,
``pragma``, ``storage_align``, ``tensorize``, ``set_scope``).

A stage keeps its loop structure as TVM does: ``all_iter_vars`` (every IterVar ever made),
``leaf_iter_vars`` (the loops, outermost first) and ``relations`` (:class:`Split`,
:class:`Fuse`) linking leaves back to the op's root axes. Lowering reads these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.ir.expr import PrimExpr
from kiln.runtime.error import TVMError
from kiln.te.tensor import ComputeOp, Operation, Tensor
from kiln.tir import expr as _e
from kiln.tir.op import const, convert_expr
from kiln.tir.stmt import ForKind
from kiln.tir.stmt_functor import StmtExprMutator, substitute

__all__ = ["Schedule", "Stage", "Split", "Fuse", "IterVarAttr", "create_schedule", "InferBound",
           "ScheduleOps"]


@dataclass
class Split:
    """``parent = outer * factor + inner`` (``factor`` or ``nparts`` given)."""

    parent: _e.IterVar
    outer: _e.IterVar
    inner: _e.IterVar
    factor: PrimExpr | None
    nparts: PrimExpr | None


@dataclass
class Fuse:
    """``fused = outer * extent(inner) + inner``."""

    outer: _e.IterVar
    inner: _e.IterVar
    fused: _e.IterVar


@dataclass
class IterVarAttr:
    """Scheduling annotations of one loop."""

    kind: ForKind = ForKind.SERIAL
    pragmas: list[tuple[str, Any]] = field(default_factory=list)
    tensor_intrin: Any = None
    thread: Any = None  # the thread axis (te.thread_axis) a THREAD_BINDING loop is bound to


class Stage:
    """The schedule of one operation.

    Example
    -------
    >>> from kiln import te
    >>> A = te.placeholder((64,), name="A")
    >>> B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    >>> s = te.create_schedule(B.op)
    >>> xo, xi = s[B].split(B.op.axis[0], factor=16)
    >>> [iv.var.name for iv in s[B].leaf_iter_vars]
    ['i.outer', 'i.inner']
    """

    def __init__(self, op: Operation, schedule: Schedule) -> None:
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.relations: list[Split | Fuse] = []
        root = list(getattr(op, "axis", [])) + list(getattr(op, "reduce_axis", []))
        self.all_iter_vars: list[_e.IterVar] = list(root)
        self.leaf_iter_vars: list[_e.IterVar] = list(root)
        self.iter_var_attrs: dict[int, IterVarAttr] = {}
        self.attach_type = "root"  # root | inline | scope
        self.attach_stage: Stage | None = None
        self.attach_ivar: _e.IterVar | None = None
        self.scope = ""
        self.is_output = False
        self.storage_aligns: list[tuple[int, int, int]] = []

    def __repr__(self) -> str:
        return f"stage({self.op.name}, {type(self.op).__name__})"

    # ---- helpers ---------------------------------------------------------------------------
    def _check_leaf(self, iv: Any, what: str) -> _e.IterVar:
        if not isinstance(iv, _e.IterVar):
            raise TVMError(f"{what}: expected an IterVar of stage {self.op.name}, got {iv!r}")
        if not any(iv is leaf for leaf in self.leaf_iter_vars):
            names = ", ".join(v.var.name for v in self.leaf_iter_vars)
            raise TVMError(f"{what}: IterVar {iv.var.name} is not a loop (leaf IterVar) of "
                           f"stage {self.op.name}; its loops are [{names}]")
        return iv

    def _leaf_index(self, iv: _e.IterVar) -> int:
        return next(i for i, leaf in enumerate(self.leaf_iter_vars) if leaf is iv)

    def attr(self, iv: _e.IterVar) -> IterVarAttr:
        return self.iter_var_attrs.setdefault(id(iv), IterVarAttr())

    # ---- loop transformations --------------------------------------------------------------
    def split(self, parent: _e.IterVar, factor: Any = None, nparts: Any = None):
        """Split loop ``parent`` into ``(outer, inner)`` by ``factor`` or into ``nparts``."""
        self._check_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise TVMError("split: give exactly one of factor= or nparts=")
        amount = factor if factor is not None else nparts
        amount = const(amount, parent.var.dtype) if isinstance(amount, int) else \
            convert_expr(amount)
        if isinstance(amount, _e.IntImm) and amount.value <= 0:
            raise TVMError(f"split: the factor must be positive, got {amount.value}")
        name = parent.var.name
        outer = _e.IterVar(None, _e.Var(name + ".outer", parent.var.dtype), parent.iter_type)
        inner = _e.IterVar(None, _e.Var(name + ".inner", parent.var.dtype), parent.iter_type)
        rel = Split(parent, outer, inner, amount if factor is not None else None,
                    amount if nparts is not None else None)
        self.relations.append(rel)
        self.all_iter_vars += [outer, inner]
        pos = self._leaf_index(parent)
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *args: _e.IterVar) -> _e.IterVar:
        """Fuse consecutive loops (outermost first) into one."""
        if len(args) == 1 and isinstance(args[0], list | tuple):
            args = tuple(args[0])
        if not args:
            raise TVMError("fuse: give at least one IterVar")
        for iv in args:
            self._check_leaf(iv, "fuse")
        fused = args[0]
        for inner in args[1:]:
            pos_outer, pos_inner = self._leaf_index(fused), self._leaf_index(inner)
            if pos_inner != pos_outer + 1:
                raise TVMError(f"fuse: {fused.var.name} and {inner.var.name} must be adjacent "
                               f"loops, outer first")
            if fused.iter_type != inner.iter_type:
                raise TVMError("fuse: cannot fuse a reduction axis with a data-parallel axis")
            new = _e.IterVar(None, _e.Var(f"{fused.var.name}.{inner.var.name}.fused",
                                          fused.var.dtype), fused.iter_type)
            self.relations.append(Fuse(fused, inner, new))
            self.all_iter_vars.append(new)
            self.leaf_iter_vars[pos_outer:pos_outer + 2] = [new]
            fused = new
        return fused

    def reorder(self, *args: _e.IterVar) -> None:
        """Put the given loops in this order (the other loops keep their places)."""
        if len(args) == 1 and isinstance(args[0], list | tuple):
            args = tuple(args[0])
        ids = [id(iv) for iv in args]
        if len(set(ids)) != len(ids):
            names = [iv.var.name for iv in args]
            raise TVMError(f"reorder: the same IterVar appears twice in {names}")
        for iv in args:
            self._check_leaf(iv, "reorder")
        positions = sorted(self._leaf_index(iv) for iv in args)
        for pos, iv in zip(positions, args):
            self.leaf_iter_vars[pos] = iv

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two loops and order them ``(x.outer, y.outer, x.inner, y.inner)``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # ---- placement -------------------------------------------------------------------------
    def compute_at(self, parent: Stage, scope: _e.IterVar) -> None:
        """Compute this stage inside loop ``scope`` of ``parent`` (a consumer)."""
        if not isinstance(parent, Stage):
            raise TVMError("compute_at: the first argument must be a Stage (s[C])")
        parent._check_leaf(scope, "compute_at")
        if parent is self or not self.schedule._depends_on(parent, self):
            raise TVMError(f"compute_at: stage {parent.op.name} does not consume "
                           f"{self.op.name}, so {self.op.name} cannot be computed inside it")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, scope

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers."""
        if not isinstance(self.op, ComputeOp):
            raise TVMError(f"compute_inline: {self.op.name} is not a compute op")
        if self.op.reduce_axis:
            raise TVMError(f"compute_inline: cannot inline the reduction {self.op.name}")
        if self.is_output:
            raise TVMError(f"compute_inline: cannot inline the output {self.op.name}")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_root(self) -> None:
        """Compute this stage at the top level (the default)."""
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None

    # ---- loop annotations ------------------------------------------------------------------
    def vectorize(self, var: _e.IterVar) -> None:
        """Run loop ``var`` as SIMD lanes."""
        self.attr(self._check_leaf(var, "vectorize")).kind = ForKind.VECTORIZED

    def parallel(self, var: _e.IterVar) -> None:
        """Run loop ``var``'s iterations on parallel threads."""
        self.attr(self._check_leaf(var, "parallel")).kind = ForKind.PARALLEL

    def unroll(self, var: _e.IterVar) -> None:
        """Unroll loop ``var``."""
        self.attr(self._check_leaf(var, "unroll")).kind = ForKind.UNROLLED

    def pragma(self, var: _e.IterVar, pragma_type: str, pragma_value: Any = None) -> None:
        """Annotate loop ``var``: ``"import_c"`` with C source to emit into the module."""
        self._check_leaf(var, "pragma")
        if pragma_type == "unroll":
            self.unroll(var)
        elif pragma_type == "vectorize":
            self.vectorize(var)
        else:
            self.attr(var).pragmas.append((pragma_type, pragma_value))

    def tensorize(self, var: _e.IterVar, tensor_intrin: Any) -> None:
        """Replace the loop nest from ``var`` inward by ``tensor_intrin``'s body."""
        self.attr(self._check_leaf(var, "tensorize")).tensor_intrin = tensor_intrin

    def storage_align(self, axis: _e.IterVar, factor: int, offset: int) -> None:
        """Pad the stride of dimension ``axis`` so ``stride % factor == offset``."""
        axes = list(getattr(self.op, "axis", []))
        pos = next((i for i, iv in enumerate(axes) if iv is axis), None)
        if pos is None:
            raise TVMError(f"storage_align: {axis!r} is not a root axis of {self.op.name}")
        self.storage_aligns.append((pos, int(factor), int(offset)))

    def set_scope(self, scope: str) -> None:
        """Set the storage scope of this stage's buffer."""
        self.scope = scope

    def bind(self, ivar: _e.IterVar, thread_ivar: _e.IterVar) -> None:
        """Run loop ``ivar`` as the GPU thread axis ``thread_ivar`` (``te.thread_axis(
        "blockIdx.x")``, ``"threadIdx.x"`` …): one work-group / work-item per iteration on a
        GPU target (OpenCL); CPU targets run the loop serially."""
        tag = getattr(thread_ivar, "thread_tag", "")
        if tag not in _THREAD_TAGS:
            raise TVMError(f"bind: {thread_ivar!r} is not a thread axis; use "
                           f"te.thread_axis(tag) with a tag in {sorted(_THREAD_TAGS)}")
        attr = self.attr(self._check_leaf(ivar, "bind"))
        attr.kind, attr.thread = ForKind.THREAD_BINDING, thread_ivar


_THREAD_TAGS = frozenset(f"{kind}.{axis}" for kind in ("blockIdx", "threadIdx")
                         for axis in "xyz")


class Schedule:
    """Stages for every operation reachable from the outputs, producers first."""

    def __init__(self, outputs: list[Operation]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._stage_of: dict[int, Stage] = {}
        for op in _post_order(self.outputs):
            self._add_stage(Stage(op, self))
        for op in self.outputs:
            self[op].is_output = True

    def _add_stage(self, stage: Stage, before: Stage | None = None) -> None:
        if before is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(before), stage)
        self._stage_of[id(stage.op)] = stage

    def __getitem__(self, key: Tensor | Operation) -> Stage:
        op = key.op if isinstance(key, Tensor) else key
        stage = self._stage_of.get(id(op))
        if stage is None:
            raise TVMError(f"{getattr(op, 'name', op)!r} is not part of this schedule")
        return stage

    def __contains__(self, key: Tensor | Operation) -> bool:
        op = key.op if isinstance(key, Tensor) else key
        return id(op) in self._stage_of

    def stage_of_tensor(self, tensor: Tensor) -> Stage:
        return self[tensor.op]

    def _depends_on(self, consumer: Stage, producer: Stage) -> bool:
        seen: set[int] = set()
        work = [consumer.op]
        while work:
            op = work.pop()
            for t in op.input_tensors:
                stage = self._stage_of.get(id(t.op))
                if stage is None or id(stage) in seen:
                    continue
                if stage is producer:
                    return True
                seen.add(id(stage))
                work.append(stage.op)
        return False

    def normalize(self) -> Schedule:
        return self

    # ---- caching ---------------------------------------------------------------------------
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead.

        Example
        -------
        >>> from kiln import te
        >>> A = te.placeholder((16,), name="A")
        >>> B = te.compute((16,), lambda i: A[i] * 2.0, name="B")
        >>> s = te.create_schedule(B.op)
        >>> AL = s.cache_read(A, "local", [B])
        >>> AL.op.name
        'A.local'
        """
        from kiln.te.operation import compute

        readers = readers if isinstance(readers, list | tuple) else [readers]
        cache = compute(tensor.shape, lambda *i: tensor(*i), name=f"{tensor.op.name}.{scope}")
        for reader in readers:
            stage = self[reader]
            op = stage.op
            if not isinstance(op, ComputeOp):
                raise TVMError(f"cache_read: reader {op.name} is not a compute op")
            body = [_replace_tensor(b, tensor, cache) for b in op.body]
            new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, body)
            self._replace_op(stage, new_op)
        producer = self[tensor]
        index = self.stages.index(producer) + 1
        stage = Stage(cache.op, self)
        stage.scope = scope
        self.stages.insert(index, stage)
        self._stage_of[id(cache.op)] = stage
        return cache

    def _replace_op(self, stage: Stage, new_op: Operation) -> None:
        stage.op = new_op
        self._stage_of[id(new_op)] = stage

    def cache_write(self, tensor: Tensor | list[Tensor], scope: str):
        """Compute ``tensor`` into a ``scope`` buffer first, then copy it out.

        The cache stage gets new data axes (``i.c``) and keeps the reduction; the original
        stage becomes a copy with its original axes.
        """
        tensors = list(tensor) if isinstance(tensor, list | tuple) else [tensor]
        stage = self[tensors[0]]
        op = stage.op
        if not isinstance(op, ComputeOp):
            raise TVMError(f"cache_write: {op.name} is not a compute op")
        if stage.relations:
            raise TVMError(f"cache_write: {op.name} is already split or fused; "
                           "call cache_write before scheduling its loops")
        new_axis = [_e.IterVar(iv.dom, _e.Var(iv.var.name + ".c", iv.var.dtype), iv.iter_type)
                    for iv in op.axis]
        vmap = {iv.var: new.var for iv, new in zip(op.axis, new_axis)}
        body = [substitute(b, vmap) for b in op.body]
        cache_op = ComputeOp(f"{op.name}.{scope}", op.tag, op.attrs, new_axis, body)
        caches = [cache_op.output(i) for i in range(cache_op.num_outputs)]
        copy_body = [c(*[iv.var for iv in op.axis]) for c in caches]
        self._replace_op(stage, ComputeOp(op.name, op.tag, op.attrs, op.axis, copy_body))
        stage.all_iter_vars = list(op.axis)
        stage.leaf_iter_vars = list(op.axis)
        cache_stage = Stage(cache_op, self)
        cache_stage.scope = scope
        self._add_stage(cache_stage, before=stage)
        return caches[0] if len(caches) == 1 else caches

    def rfactor(self, tensor: Tensor, axis: _e.IterVar, factor_axis: int = 0) -> Tensor:
        """Factor a reduction: reduce over ``axis``'s complement into a new tensor first.

        ``axis`` must be a loop split off a reduction axis. The new tensor has one more
        dimension (at ``factor_axis``) of ``axis``'s extent; the original stage then reduces
        that dimension.
        """
        from kiln.te.operation import compute, reduce_axis

        stage = self[tensor]
        op = stage.op
        if not isinstance(op, ComputeOp) or not op.reduce_axis:
            raise TVMError(f"rfactor: {op.name} is not a reduction")
        stage._check_leaf(axis, "rfactor")
        split = next((r for r in stage.relations if isinstance(r, Split) and
                      (r.inner is axis or r.outer is axis)), None)
        if split is None or not any(split.parent is k for k in op.reduce_axis):
            raise TVMError("rfactor: the axis must come from splitting a reduction axis")
        red = op.body[0]
        k = split.parent
        extent = k.dom.extent
        factor = split.factor
        if factor is None:
            from kiln.tir.op import floordiv

            factor = floordiv(extent + split.nparts - 1, split.nparts)
        other = split.outer if split.inner is axis else split.inner
        outer_ext = (extent + factor - 1) // factor if split.factor is not None else \
            split.nparts
        is_inner = split.inner is axis
        rf_extent = factor if is_inner else outer_ext
        other_extent = outer_ext if is_inner else factor
        remaining = [r for r in op.reduce_axis if r is not k]
        ndim = len(op.axis)

        def rf_body(*idx):
            data = list(idx[:factor_axis]) + list(idx[factor_axis + 1:])
            f = idx[factor_axis]
            ro = reduce_axis((0, other_extent), name=other.var.name)
            k_value = (ro.var * factor + f) if is_inner else (f * factor + ro.var)
            vmap = {iv.var: v for iv, v in zip(op.axis, data)}
            vmap[k.var] = k_value
            src = [substitute(s, vmap) for s in red.source]
            cond = substitute(red.condition, vmap)
            if not _divides(extent, factor):
                from kiln.tir.op import logical_and

                cond = logical_and(cond, k_value < extent)
            new_red = [_e.Reduce(red.combiner, src, [ro] + remaining, cond, i)
                       for i in range(len(src))]
            return new_red if len(new_red) > 1 else new_red[0]

        shape = [iv.dom.extent for iv in op.axis]
        shape.insert(factor_axis, rf_extent)
        names = [f"ax{i}" for i in range(ndim + 1)]
        rf = compute(shape, _named(rf_body, names), name=f"{op.name}.rf")
        rfs = rf if isinstance(rf, list) else [rf]
        r = reduce_axis((0, rf_extent), name=axis.var.name + ".v")

        def new_body(*idx):
            full = list(idx)
            full.insert(factor_axis, r.var)
            srcs = [t(*full) for t in rfs]
            outs = [_e.Reduce(red.combiner, srcs, [r], convert_expr(True), i)
                    for i in range(len(srcs))]
            return outs
        body = new_body(*[iv.var for iv in op.axis])
        self._replace_op(stage, ComputeOp(op.name, op.tag, op.attrs, op.axis, body))
        stage.relations = []
        stage.all_iter_vars = list(op.axis) + [r]
        stage.leaf_iter_vars = list(op.axis) + [r]
        stage.iter_var_attrs = {}
        rf_stage = Stage(rfs[0].op, self)
        self._add_stage(rf_stage, before=stage)
        return rfs[0] if len(rfs) == 1 else rfs


def _named(fn, names):
    """Give a varargs function fixed parameter names (compute names its loops after them)."""
    import inspect

    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]

    def wrapper(*args):
        return fn(*args)

    wrapper.__signature__ = inspect.Signature(params)
    return wrapper


def _divides(extent: Any, factor: Any) -> bool:
    from kiln.arith.analyzer import Analyzer

    return Analyzer().can_prove_equal(convert_expr(extent) % factor, 0)


class _TensorReplacer(StmtExprMutator):
    def __init__(self, old: Tensor, new: Tensor) -> None:
        super().__init__()
        self.old, self.new = old, new

    def visit_ProducerLoad(self, node):
        indices = [self.visit(i) for i in node.indices]
        producer = self.new if node.producer is self.old else node.producer
        return _e.ProducerLoad(producer, indices)


def _replace_tensor(expr: PrimExpr, old: Tensor, new: Tensor) -> PrimExpr:
    return _TensorReplacer(old, new).visit(expr)


def _post_order(outputs: list[Operation]) -> list[Operation]:
    order: list[Operation] = []
    seen: set[int] = set()

    def visit(op: Operation) -> None:
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(ops: Operation | Tensor | list) -> Schedule:
    """A default schedule (every stage at the root, serial loops) for ``ops``.

    Example
    -------
    >>> from kiln import te
    >>> A = te.placeholder((8,), name="A")
    >>> B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    >>> [st.op.name for st in te.create_schedule(B.op).stages]
    ['A', 'B']
    """
    if not isinstance(ops, list | tuple):
        ops = [ops]
    ops = [op.op if isinstance(op, Tensor) else op for op in ops]
    for op in ops:
        if not isinstance(op, Operation):
            raise TVMError(f"create_schedule expects operations, got {op!r}")
    return Schedule(ops)




def InferBound(sch: Schedule) -> dict:  # noqa: N802 - TVM's name
    """``{IterVar: Range}`` for every loop of ``sch`` (see ``schedule_ops.infer_bound``)."""
    from kiln.te.schedule_ops import infer_bound  # schedule_ops builds on this module

    return infer_bound(sch)


def ScheduleOps(sch: Schedule, bounds: dict | None = None,  # noqa: N802 - TVM's name
                debug_keep_trivial_loop: bool = False) -> Any:
    """The loop nest of ``sch`` as a TIR statement (see ``schedule_ops.schedule_ops``)."""
    from kiln.te.schedule_ops import schedule_ops

    return schedule_ops(sch, bounds, debug_keep_trivial_loop)
