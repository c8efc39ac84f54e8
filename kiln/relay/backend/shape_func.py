"""Shape functions: kernels that compute the output shapes of dynamic (``Any``) primitives.

Entry points: :func:`build_shape_kernel` (called by
:meth:`~kiln.relay.backend.te_compiler.TECompiler.lower_shape_func`), :func:`inner_dims`
(extents of a symbolic lowering's inner calls), :func:`needs_input_data`,
:func:`shape_func_inputs`, and the symbolic-type helpers :func:`symbolic_shape`,
:func:`symbolic_type`, :func:`typed_like`.

The per-op rules are the op registry's ``FShapeFunc`` (registered beside each op by its
family module, ``relay.op.register_shape_func``); elementwise and broadcast ops need none
(their rule follows from the pattern kind). For a fused primitive function the rules compose
along its body into one expression per output dimension; the expressions become a small TE kernel:

- inputs: one int64 ``[ndim]`` shape tensor per dynamic input (``ShapeOf`` at run time), or,
  when a rule reads values, the input tensors themselves;
- outputs, per dynamic output tensor: its int64 ``[ndim]`` shape and an int64 ``[1]`` byte
  size (what ``AllocStorage`` / ``AllocTensorReg`` read).

The kernel is lowered and compiled with the model's other kernels (one library), so shape
computation runs as native code called by ``InvokePacked``, like TVM's shape functions. Static
dimensions known from the types are folded in as constants.

Example
-------
>>> from kiln import relay
>>> import kiln
>>> s = relay.var("s", shape=(), dtype="float32")
>>> f = relay.Function([s], relay.arange(s, relay.const(4.0), relay.const(1.0)))
>>> needs_input_data(relay.transform.InferType()(kiln.IRModule.from_expr(f))["main"])
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.expr_functor import post_order_visit
from kiln.relay.op.op import OpPattern
from kiln.relay.op.rule_util import broadcast_dims, i64, product
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError

__all__ = ["ShapeKernel", "build_shape_kernel", "inner_dims", "needs_input_data",
           "shape_func_inputs", "symbolic_shape", "symbolic_type", "typed_like"]


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    return [ty]


def _is_static(dim: Any) -> bool:
    return isinstance(getattr(dim, "value", None), int)


def _with_static(dims: list[Any], ty: TensorType) -> list[Any]:
    """Known dimensions of ``ty`` replace computed ones (constants fold away)."""
    return [i64(d.value) if _is_static(d) else dims[k] for k, d in enumerate(ty.shape)]


def symbolic_shape(ty: TensorType, prefix: str) -> tuple:
    """``ty``'s shape with each ``Any`` dimension an int64 variable named ``<prefix>_n<k>``."""
    from kiln import te

    return tuple(int(d.value) if _is_static(d) else te.var(f"{prefix}_n{k}", "int64")
                 for k, d in enumerate(ty.shape))


def symbolic_type(ty: Any, prefix: str) -> Any:
    """``ty`` (a tensor or tuple type) with its ``Any`` dimensions as shape variables."""
    if isinstance(ty, TupleType):
        return TupleType([symbolic_type(f, f"{prefix}_{k}") for k, f in enumerate(ty.fields)])
    return TensorType(symbolic_shape(ty, prefix), ty.dtype)


def typed_like(ty: Any, dims: Iterator[list[Any]]) -> Any:
    """``ty`` with its flat tensors' shapes taken in order from the iterator ``dims``."""
    if isinstance(ty, TupleType):
        return TupleType([typed_like(f, dims) for f in ty.fields])
    return TensorType(tuple(next(dims)), ty.dtype)


class _ShapeBuilder:
    """Walks a primitive function body; each node maps to dims lists of its flat outputs.

    ``value_builder`` makes the symbolic compute builder that evaluates intermediate values
    a data-dependent rule reads (see :meth:`data_of`).
    """

    def __init__(self, value_builder: Callable[[], Any] | None = None) -> None:
        self.memo: dict[int, list[list[Any]]] = {}
        self.data: dict[int, list[Any]] = {}  # param id -> its input data tensors
        self._value_builder = value_builder
        self._values: Any = None
        # computed extents that the types fix statically: they must agree at run time
        self.checks: list[Any] = []

    def data_of(self, node: Any) -> list[Any]:
        """The data tensors of ``node``: a parameter's input, or (when FuseOps put, e.g., the
        normalization of a begin tensor in the same group) the TE compute of an intermediate
        expression, evaluated inside the shape kernel by the ops' strategies."""
        if id(node) in self.data:
            return self.data[id(node)]
        if not self.data or self._value_builder is None:
            raise TVMError("a data-dependent shape function needs its inputs' values")
        if self._values is None:
            self._values = self._value_builder()
            self._values.memo.update(self.data)
        return self._values.visit(node)

    def visit(self, node: Any) -> list[list[Any]]:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._visit(node)
        return self.memo[key]

    def _visit(self, node: Any) -> list[list[Any]]:
        if isinstance(node, rx.Constant):
            return [[i64(d) for d in node.data.shape]]
        if isinstance(node, rx.Tuple):
            return [d for f in node.fields for d in self.visit(f)]
        if isinstance(node, rx.TupleGetItem):
            fields = self.visit(node.tuple_value)
            sizes = [len(_flat_types(t)) for t in node.tuple_value.checked_type.fields]
            start = sum(sizes[: node.index])
            return fields[start: start + sizes[node.index]]
        if isinstance(node, rx.Let):
            self.memo[id(node.var)] = self.visit(node.value)
            return self.visit(node.body)
        if isinstance(node, rx.Call) and isinstance(node.op, Op):
            return self._call(node)
        raise TVMError(f"no shape function for {type(node).__name__} in a primitive function")

    def _call(self, call: rx.Call) -> list[list[Any]]:
        ins = [d for a in call.args for d in self.visit(a)]
        out_types = _flat_types(call.checked_type)
        rule = call.op.get_attr("FShapeFunc")
        if rule is not None and call.op.get_attr("TShapeDataDependent"):
            data = [t for a in call.args for t in self.data_of(a)]
            outs = rule(call.attrs, ins, out_types, data)
        elif rule is not None:
            outs = rule(call.attrs, ins, out_types)
        else:
            pattern = call.op.get_attr("TOpPattern")
            pattern = int(OpPattern.OPAQUE if pattern is None else pattern)
            if (pattern > OpPattern.BROADCAST or call.op.name.startswith("dyn.")) and any(
                    not _is_static(d) for t in out_types for d in t.shape):
                raise TVMError(f"operator {call.op.name} has no shape function, so it cannot "
                               "produce a dynamic (Any) shape in the VM")
            outs = [broadcast_dims(ins) if ins else [] for _ in out_types]
            if pattern > OpPattern.BROADCAST:  # no rule: nothing to check the types against
                return [_with_static(d, t) for d, t in zip(outs, out_types)]
            if len(ins) > 1 and outs:
                self._check_broadcast(ins, outs[0])
        for dims, ty in zip(outs, out_types):
            self._check_static(dims, ty)
        return [_with_static(d, t) for d, t in zip(outs, out_types)]

    def _check_broadcast(self, ins: list[list[Any]], out: list[Any]) -> None:
        """Record that each input extent is 1 or the broadcast extent (TVM's shape function
        asserts "Incompatible broadcast type"; without it 2 rows plus 3 rows gave 2 rows)."""
        from kiln import tir
        from kiln.arith import Analyzer

        analyzer = Analyzer()
        for dims in ins:
            for offset, dim in enumerate(dims):
                fits = tir.any(dim == i64(1), dim == out[offset + len(out) - len(dims)])
                same = analyzer.simplify(fits)
                if getattr(same, "value", None) != 1:
                    self.checks.append(same)

    def _check_static(self, dims: list[Any], ty: TensorType) -> None:
        """Record ``computed == declared`` for each static extent the rule does not prove
        (a reshape of an ``Any`` input to a static shape, topk's k on an ``Any`` axis …)."""
        from kiln.arith import Analyzer

        analyzer = Analyzer()
        for computed, declared in zip(dims, ty.shape):
            value = getattr(declared, "value", None)
            if computed is None or not isinstance(value, int):
                continue
            same = analyzer.simplify(computed == i64(value))
            if getattr(same, "value", None) != 1:
                self.checks.append(same)


def needs_input_data(func: rx.Function) -> bool:
    """Whether an op of ``func`` has a data-dependent shape function."""
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, rx.Call) and
                     isinstance(n.op, Op) and n.op.get_attr("TShapeDataDependent") else None)
    return bool(found)


def shape_func_inputs(func: rx.Function) -> list[tuple[int, TensorType]]:
    """(flat input index, type) of each input the shape function takes.

    Normally the inputs with a dynamic dimension (their shapes are passed); for a
    data-dependent function every input (its values are passed).
    """
    flat = [t for p in func.params for t in _flat_types(p.checked_type)]
    if needs_input_data(func):
        return list(enumerate(flat))
    return [(i, t) for i, t in enumerate(flat) if any(not _is_static(d) for d in t.shape)]


def _selector(dims: list[Any]) -> Any:
    """fcompute of a shape tensor: element i is dims[i]."""
    from kiln import tir

    def pick(i):
        value = dims[-1]
        for j in range(len(dims) - 2, -1, -1):
            value = tir.Select(i == j, dims[j], value)
        return value

    return pick


def _constant(value: Any) -> Any:
    return lambda _: value


@dataclass
class ShapeKernel:
    """A lowered shape function: its PrimFunc (None when there is nothing to compute), per
    flat output whether its shape is dynamic, whether it ends with the run-time extent check,
    and its numbers of tensor arguments."""

    prim_func: Any
    dynamic: list[bool]
    checked: bool
    num_inputs: int = 0
    num_outputs: int = 0


def _shape_inputs(func: rx.Function, builder: _ShapeBuilder) -> list:
    """The kernel's input placeholders; fills ``builder`` with each parameter's dims."""
    from kiln import te, tir

    dynamic_inputs = dict(shape_func_inputs(func))
    by_value = needs_input_data(func)
    shape_inputs = []
    flat_index = 0
    for param in func.params:
        dims_list, data = [], []
        for ty in _flat_types(param.checked_type):
            if by_value:
                ph = te.placeholder(symbolic_shape(ty, f"in{flat_index}"), str(ty.dtype),
                                    name=f"data_{flat_index}")
                shape_inputs.append(ph)
                data.append(ph)
                dims_list.append(_with_static([tir.Cast("int64", d) for d in ph.shape], ty))
            elif flat_index in dynamic_inputs:
                ph = te.placeholder((len(ty.shape),), "int64", name=f"shape_{flat_index}")
                shape_inputs.append(ph)
                dims_list.append(_with_static([ph[k] for k in range(len(ty.shape))], ty))
            else:
                dims_list.append([i64(int(d.value)) for d in ty.shape])
            flat_index += 1
        builder.memo[id(param)] = dims_list
        if data:
            builder.data[id(param)] = data
    return shape_inputs


def build_shape_kernel(func: rx.Function, name: str,
                       value_builder: Callable[[], Any] | None = None) -> ShapeKernel:
    """Lower the shape function of the primitive ``func`` to a PrimFunc named ``name``.

    ``value_builder`` makes a symbolic compute builder (the TE compiler's) for intermediate
    values that a data-dependent rule reads; without one, such a function is refused.
    """
    from kiln import te, tir
    from kiln.te.lowering import lower

    builder = _ShapeBuilder(value_builder)
    shape_inputs = _shape_inputs(func, builder)
    out_dims = builder.visit(func.body)
    out_types = _flat_types(func.body.checked_type)
    outputs, dynamic = [], []
    for k, (dims, ty) in enumerate(zip(out_dims, out_types)):
        is_dynamic = any(not _is_static(d) for d in ty.shape)
        dynamic.append(is_dynamic)
        if not is_dynamic:
            continue
        dt = DataType(str(ty.dtype))
        itemsize = (dt.bits * dt.lanes + 7) // 8
        outputs.append(te.compute((len(dims),), _selector(dims), name=f"out_shape_{k}"))
        outputs.append(te.compute((1,), _constant(product(dims) * i64(itemsize)),
                                  name=f"out_bytes_{k}"))
    checked = bool(builder.checks)
    if checked:  # -1 when a static extent disagrees, like the rules' own bad-value extents
        agree = tir.all(*builder.checks) if len(builder.checks) > 1 else builder.checks[0]
        outputs.append(te.compute((1,), _constant(tir.Select(agree, i64(0),
                                                             i64(-1))),
                                  name="static_extents_agree"))
    if not outputs:
        return ShapeKernel(None, dynamic, False)
    sch = te.create_schedule([o.op for o in outputs])
    lowered = lower(sch, shape_inputs + outputs, name=name)
    prim = lowered[name] if isinstance(lowered, IRModule) else lowered
    checked_outputs = list(range(0, sum(dynamic) * 2, 2)) + ([len(outputs) - 1] if checked
                                                             else [])
    shape_buffers = [prim.buffer_map[prim.params[len(shape_inputs) + k]]
                     for k in checked_outputs]
    return ShapeKernel(_with_extent_check(prim, shape_buffers, func), dynamic, checked,
                       len(shape_inputs), len(outputs))


def _with_extent_check(prim: Any, shape_buffers: list, func: rx.Function) -> Any:
    """Append a check that every computed extent is non-negative. The rules give -1 for bad
    run-time values, so the kernel fails with a message naming the ops instead of the VM
    meeting a negative allocation."""
    from kiln import tir

    if not shape_buffers:
        return prim
    ops: list[Op] = []
    post_order_visit(func.body, lambda n: ops.append(n.op) if isinstance(n, rx.Call)
                     and isinstance(n.op, Op) and n.op not in ops else None)
    names = [op.name for op in ops]
    extents = [tir.BufferLoad(b, [tir.const(j, "int64")]) >= tir.const(0, "int64")
               for b in shape_buffers for j in range(int(b.shape[0].value))]
    reasons = [f"{op.name}: {op.get_attr('TShapeValueRequirement')}" for op in ops
               if op.get_attr("TShapeValueRequirement")]
    message = ("invalid run-time shape values (a negative extent, or extents that do not "
               "broadcast or disagree with the static type); ") + (
        "; ".join(reasons) or f"in {', '.join(names)}")
    check = tir.AssertStmt(tir.all(*extents) if len(extents) > 1 else extents[0],
                           tir.StringImm(message), tir.Evaluate(tir.const(0, "int32")))
    return prim.with_body(tir.SeqStmt([prim.body, check]))


def inner_dims(func: rx.Function, inputs: list) -> dict[int, list[list[Any]]]:
    """Extents of the calls inside ``func`` that are not its outputs, as expressions of the
    extents of the placeholders ``inputs`` (the shape rules composed as for the shape
    function). A rule that reads input values cannot give them here; those calls keep shape
    variables."""
    from kiln.tir import op as tir_op

    if needs_input_data(func):
        return {}
    builder = _ShapeBuilder()
    flat = iter(inputs)
    for param in func.params:
        builder.memo[id(param)] = [
            _with_static([tir_op.cast(d, "int64") for d in next(flat).shape], ty)
            for ty in _flat_types(param.checked_type)]
    builder.visit(func.body)
    outputs = set(map(id, func.body.fields if isinstance(func.body, rx.Tuple) else [func.body]))
    calls: list[rx.Call] = []
    post_order_visit(func.body, lambda n: calls.append(n) if isinstance(n, rx.Call) else None)
    return {id(c): builder.memo[id(c)] for c in calls
            if id(c) not in outputs and id(c) in builder.memo}
