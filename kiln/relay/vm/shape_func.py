"""Shape functions: kernels that compute output shapes of dynamic (``Any``) primitives.

Entry points: :func:`emit_shape_function` (used by the VM compiler), :func:`lower_dynamic`
(a primitive function lowered with symbolic shapes), :func:`needs_input_data`.

The per-op rules live in :mod:`kiln.relay.vm.shape_rules` (the op registry's
``FShapeFunc``); elementwise and broadcast ops need none (their rule follows from the pattern
kind). For a fused primitive function the rules compose along its body into one expression per
output dimension; the expressions become a small TE kernel:

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

from typing import Any

from kiln.ir.op import Op
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.op.op import OpPattern
from kiln.relay.vm.shape_rules import VALUE_REQUIREMENTS
from kiln.relay.vm.shape_rules import broadcast_dims as _broadcast
from kiln.relay.vm.shape_rules import i64 as _i64
from kiln.relay.vm.shape_rules import product as _prod
from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc

__all__ = ["emit_shape_function", "lower_dynamic", "needs_input_data"]


# -- composing the rules over a primitive function ----------------------------------------


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    return [ty]


def _with_static(dims: list[Any], ty: TensorType) -> list[Any]:
    """Known dimensions of ``ty`` replace computed ones (constants fold away)."""
    out = []
    for k, d in enumerate(ty.shape):
        value = getattr(d, "value", None)
        out.append(_i64(value) if isinstance(value, int) else dims[k])
    return out


class _ShapeBuilder:
    """Walks a primitive function body; each node maps to dims lists of its flat outputs."""

    def __init__(self, target: Any = None) -> None:
        self.memo: dict[int, list[list[Any]]] = {}
        self.data: dict[int, list[Any]] = {}  # param id -> its input data tensors
        self.target = target
        self._values: Any = None  # computes the data of intermediate expressions
        # computed extents that the types fix statically: they must agree at run time
        self.checks: list[Any] = []

    def data_of(self, node: Any) -> list[Any]:
        """The data tensors of ``node``: a parameter's input, or (when FuseOps put, e.g., the
        normalization of a begin tensor in the same group) the TE compute of an intermediate
        expression, evaluated inside the shape kernel by the ops' strategies."""
        if id(node) in self.data:
            return self.data[id(node)]
        if not self.data:
            raise TVMError("a data-dependent shape function needs its inputs' values")
        if self._values is None:
            from kiln.relay.backend.te_compiler import _ComputeBuilder

            self._values = type("ShapeDataBuilder", (_SymbolicOutputs, _ComputeBuilder),
                                {})(self.target)
            self._values.memo.update(self.data)
        return self._values.visit(node)

    def visit(self, node: Any) -> list[list[Any]]:
        key = id(node)
        if key not in self.memo:
            self.memo[key] = self._visit(node)
        return self.memo[key]

    def _visit(self, node: Any) -> list[list[Any]]:
        if isinstance(node, rx.Constant):
            return [[_i64(d) for d in node.data.shape]]
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
                    not isinstance(getattr(d, "value", None), int)
                    for t in out_types for d in t.shape):
                raise TVMError(f"operator {call.op.name} has no shape function, so it cannot "
                               "produce a dynamic (Any) shape in the VM")
            outs = [_broadcast(ins) if ins else [] for _ in out_types]
            if pattern > OpPattern.BROADCAST:  # no rule: nothing to check the types against
                return [_with_static(d, t) for d, t in zip(outs, out_types)]
        for dims, ty in zip(outs, out_types):
            self._check_static(dims, ty)
        return [_with_static(d, t) for d, t in zip(outs, out_types)]

    def _check_static(self, dims: list[Any], ty: TensorType) -> None:
        """Record ``computed == declared`` for each static extent the rule does not prove
        (a reshape of an ``Any`` input to a static shape, topk's k on an ``Any`` axis …)."""
        from kiln.arith import Analyzer

        analyzer = Analyzer()
        for computed, declared in zip(dims, ty.shape):
            value = getattr(declared, "value", None)
            if computed is None or not isinstance(value, int):
                continue
            same = analyzer.simplify(computed == _i64(value))
            if getattr(same, "value", None) != 1:
                self.checks.append(same)


def needs_input_data(func: rx.Function) -> bool:
    """Whether an op of ``func`` has a data-dependent shape function."""
    from kiln.relay.expr_functor import post_order_visit

    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, rx.Call) and
                     isinstance(n.op, Op) and n.op.get_attr("TShapeDataDependent") else None)
    return bool(found)


def _dynamic_params(func: rx.Function) -> list[tuple[int, TensorType]]:
    """(flat input index, type) of each input the shape function takes.

    Normally the inputs with a dynamic dimension (their shapes are passed); for a
    data-dependent function every input (its values are passed).
    """
    flat = [t for p in func.params for t in _flat_types(p.checked_type)]
    if needs_input_data(func):
        return list(enumerate(flat))
    return [(i, t) for i, t in enumerate(flat)
            if any(not isinstance(getattr(d, "value", None), int) for d in t.shape)]


def _symbolic_shape(ty: TensorType, prefix: str) -> tuple:
    from kiln import te

    return tuple(int(d.value) if isinstance(getattr(d, "value", None), int)
                 else te.var(f"{prefix}_n{k}", "int64") for k, d in enumerate(ty.shape))


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


def _build_shape_kernel(func: rx.Function, name: str,
                        target: Any = None) -> tuple[Any, list[bool], bool]:
    """The PrimFunc computing output shapes and sizes (None when there is nothing to compute),
    per output whether it is dynamic, and whether it ends with a run-time extent check (one
    more int64 ``[1]`` output after the shapes and sizes)."""
    from kiln import te, tir
    from kiln.runtime.ndarray import DataType
    from kiln.te.lowering import lower

    builder = _ShapeBuilder(target)
    dynamic_inputs = dict(_dynamic_params(func))
    by_value = needs_input_data(func)
    shape_inputs = []
    flat_index = 0
    for param in func.params:
        dims_list, data = [], []
        for ty in _flat_types(param.checked_type):
            if by_value:
                ph = te.placeholder(_symbolic_shape(ty, f"in{flat_index}"), str(ty.dtype),
                                    name=f"data_{flat_index}")
                shape_inputs.append(ph)
                data.append(ph)
                dims_list.append(_with_static([tir.Cast("int64", d) for d in ph.shape], ty))
            elif flat_index in dynamic_inputs:
                ph = te.placeholder((len(ty.shape),), "int64", name=f"shape_{flat_index}")
                shape_inputs.append(ph)
                dims_list.append(_with_static([ph[k] for k in range(len(ty.shape))], ty))
            else:
                dims_list.append([_i64(int(d.value)) for d in ty.shape])
            flat_index += 1
        builder.memo[id(param)] = dims_list
        if data:
            builder.data[id(param)] = data
    out_dims = builder.visit(func.body)
    out_types = _flat_types(func.body.checked_type)
    outputs, dynamic = [], []
    for k, (dims, ty) in enumerate(zip(out_dims, out_types)):
        is_dynamic = any(not isinstance(getattr(d, "value", None), int) for d in ty.shape)
        dynamic.append(is_dynamic)
        if not is_dynamic:
            continue

        dt = DataType(str(ty.dtype))
        itemsize = (dt.bits * dt.lanes + 7) // 8
        outputs.append(te.compute((len(dims),), _selector(dims), name=f"out_shape_{k}"))
        outputs.append(te.compute((1,), _constant(_prod(dims) * _i64(itemsize)),
                                  name=f"out_bytes_{k}"))
    checked = bool(builder.checks)
    if checked:  # -1 when a static extent disagrees, like the rules' own bad-value extents
        agree = tir.all(*builder.checks) if len(builder.checks) > 1 else builder.checks[0]
        outputs.append(te.compute((1,), _constant(tir.Select(agree, _i64(0), _i64(-1))),
                                  name="static_extents_agree"))
    if not outputs:
        return None, dynamic, False
    sch = te.create_schedule([o.op for o in outputs])
    lowered = lower(sch, shape_inputs + outputs, name=name)
    from kiln.ir.module import IRModule

    prim = lowered[name] if isinstance(lowered, IRModule) else lowered
    checked_outputs = list(range(0, sum(dynamic) * 2, 2)) + ([len(outputs) - 1] if checked
                                                             else [])
    shape_buffers = [prim.buffer_map[prim.params[len(shape_inputs) + k]]
                     for k in checked_outputs]
    return _with_extent_check(prim, shape_buffers, func), dynamic, checked


def _with_extent_check(prim: Any, shape_buffers: list, func: rx.Function) -> Any:
    """Append a check that every computed extent is non-negative. The rules give -1 for bad
    run-time values (:func:`kiln.relay.vm.shape_rules._checked`), so the kernel fails with a
    message naming the ops instead of the VM meeting a negative allocation."""
    from kiln import tir
    from kiln.relay.expr_functor import post_order_visit

    if not shape_buffers:
        return prim
    names: list[str] = []
    post_order_visit(func.body, lambda n: names.append(n.op.name) if isinstance(n, rx.Call)
                     and isinstance(n.op, Op) and n.op.name not in names else None)
    extents = [tir.BufferLoad(b, [tir.const(j, "int64")]) >= tir.const(0, "int64")
               for b in shape_buffers for j in range(int(b.shape[0].value))]
    reasons = [f"{n}: {VALUE_REQUIREMENTS[n]}" for n in names if n in VALUE_REQUIREMENTS]
    message = "invalid run-time shape values (a negative extent); " + (
        "; ".join(reasons) or f"in {', '.join(names)}")
    check = tir.AssertStmt(tir.all(*extents) if len(extents) > 1 else extents[0],
                           tir.StringImm(message), tir.Evaluate(tir.const(0, "int32")))
    return prim.with_body(tir.SeqStmt([prim.body, check]))


def _cached(tec: Any, table: str, func: rx.Function, make: Any) -> Any:
    cache = tec.__dict__.setdefault(table, {})
    key = structural_hash(func)
    for seen, value in cache.get(key, ()):
        if structural_equal(seen, func):
            return value
    value = make(f"{key & (2**64 - 1):016x}")
    cache.setdefault(key, []).append((func, value))
    return value


class _SymbolicOutputs:
    """Mixin for the TE compiler's compute builder: ``Any`` output dimensions become shape
    variables (as TVM's lowering does), so each op's strategy sizes its compute from the
    output type; the variables are bound from the output buffers the VM allocates."""

    # node id -> dims of its flat outputs from the shape rules, for calls inside the function
    # (their extents are bound by nothing else): filled by :func:`lower_dynamic`
    inner_dims: dict[int, list[list[Any]]] = {}

    def visit_Call(self, node: rx.Call) -> list:  # noqa: N802 (the builder's method name)
        dims = self.inner_dims.get(id(node))
        out_type = (_symbolic_type(node.checked_type, f"out{len(self.memo)}") if dims is None
                    else _typed_like(node.checked_type, iter(dims)))
        symbolic = rx.Call(node.op, node.args, node.attrs, node.type_args)
        symbolic.checked_type_ = out_type
        return super().visit_Call(symbolic)


def _bindable(tensor: Any, ty: TensorType, index: int, inputs: list) -> Any:
    """An output whose buffer the kernel's arguments can bind: a copy when the tensor is an
    input, or when its extents are expressions (of inner extents): then the copy has fresh
    variables, bound from the buffer the VM allocated with the shape function's extents."""
    from kiln import te, tir

    if any(tensor is i for i in inputs):
        return te.compute(tensor.shape, lambda *i: tensor(*i), name="copy")
    if all(isinstance(d, int | tir.IntImm | tir.Var) for d in tensor.shape):
        return tensor
    return te.compute(_symbolic_shape(ty, f"result{index}"), lambda *i: tensor(*i),
                      name="T_output", tag="injective")


def _typed_like(ty: Any, dims: Any) -> Any:
    """``ty`` with its flat tensors' shapes taken in order from the iterator ``dims``."""
    if isinstance(ty, TupleType):
        return TupleType([_typed_like(f, dims) for f in ty.fields])
    return TensorType(tuple(next(dims)), ty.dtype)


def _inner_dims(func: rx.Function, inputs: list) -> dict[int, list[list[Any]]]:
    """Extents of the calls inside ``func`` that are not its outputs, as expressions of the
    input extents (the shape rules composed as for the shape function). A rule that reads
    input values cannot give them here; those calls keep shape variables."""
    from kiln.relay.expr_functor import post_order_visit
    from kiln.tir import op as _op

    if needs_input_data(func):
        return {}
    builder = _ShapeBuilder()
    flat = iter(inputs)
    for param in func.params:
        builder.memo[id(param)] = [
            _with_static([_op.cast(d, "int64") for d in next(flat).shape], ty)
            for ty in _flat_types(param.checked_type)]
    builder.visit(func.body)
    outputs = set(map(id, func.body.fields if isinstance(func.body, rx.Tuple) else [func.body]))
    calls: list[rx.Call] = []
    post_order_visit(func.body, lambda n: calls.append(n) if isinstance(n, rx.Call) else None)
    return {id(c): builder.memo[id(c)] for c in calls
            if id(c) not in outputs and id(c) in builder.memo}


def _symbolic_type(ty: Any, prefix: str) -> Any:
    if isinstance(ty, TupleType):
        return TupleType([_symbolic_type(f, f"{prefix}_{k}") for k, f in enumerate(ty.fields)])
    return TensorType(_symbolic_shape(ty, prefix), ty.dtype)


def _dynamic_schedule(anchor: Any, outputs: list, target: Any) -> Any:
    """The anchor op's schedule, or the injective one; a schedule tuned for constant shapes
    (packed GEMM tiles …) may reject symbolic ones (a TVMError, or the ValueError of a
    symbolic extent used as a Python bool), and then the plain loop nest is used."""
    from kiln import te
    from kiln.relay.op.strategy import target_schedule

    try:
        if anchor is not None and anchor[0] >= OpPattern.COMM_REDUCE:
            return anchor[1].schedule(anchor[2], outputs, target)
        return target_schedule("injective", outputs, target)
    except (TVMError, ValueError):
        return te.create_schedule([o.op for o in outputs])


def lower_dynamic(tec: Any, func: rx.Function) -> Any:
    """Lower a primitive function with dynamic dims (symbolic shape variables) into ``tec``."""
    from kiln import te
    from kiln.ir.module import IRModule
    from kiln.relay.backend.te_compiler import LoweredFunc, _ComputeBuilder
    from kiln.relay.transform.fuse_ops import fused_function_name
    from kiln.te.lowering import lower

    def make(hash_text: str) -> Any:
        name = tec._unique(tec.prefix + fused_function_name(func) + "_dyn")
        builder = type("DynamicComputeBuilder", (_SymbolicOutputs, _ComputeBuilder), {})(
            tec.target)
        inputs = []
        for param in func.params:
            tensors = []
            for ty in _flat_types(param.checked_type):
                shape = tuple(
                    int(d.value) if isinstance(getattr(d, "value", None), int)
                    else te.var(f"{param.name_hint}_n{k}_{len(inputs)}", "int64")
                    for k, d in enumerate(ty.shape))
                tensors.append(te.placeholder(shape, str(ty.dtype), name=param.name_hint))
            builder.memo[id(param)] = tensors
            inputs.extend(tensors)
        builder.inner_dims = _inner_dims(func, inputs)
        outputs = [_bindable(o, ty, k, inputs) for k, (o, ty) in enumerate(
            zip(builder.visit(func.body), _flat_types(func.body.checked_type)))]
        sch = _dynamic_schedule(builder.anchor, outputs, tec.target)
        lowered = lower(sch, inputs + outputs, name=name)
        prim = lowered[name] if isinstance(lowered, IRModule) else lowered
        kernel = LoweredFunc(name, prim, hash_text, len(inputs), len(outputs))
        tec.lowered.append(kernel)
        return kernel

    return _cached(tec, "_kiln_vm_dynamic", func, make)


def _shape_kernel(tec: Any, func: rx.Function) -> tuple[str | None, list[bool], bool]:
    from kiln.relay.backend.te_compiler import LoweredFunc
    from kiln.relay.transform.fuse_ops import fused_function_name

    def make(hash_text: str) -> Any:
        name = tec._unique(tec.prefix + fused_function_name(func) + "_shape_func")
        prim, dynamic, checked = _build_shape_kernel(func, name, tec.target)
        if prim is not None:
            tec.lowered.append(LoweredFunc(name, prim, hash_text, 0, 0))
        return (name if prim is not None else None), dynamic, checked

    return _cached(tec, "_kiln_vm_shape_funcs", func, make)


def emit_shape_function(compiler: Any, func: rx.Function,
                        args: list[int]) -> list[tuple[int, int] | None]:
    """Emit ShapeOf + InvokePacked of ``func``'s shape function.

    Returns, per flat output, ``(shape register, byte-size register)``, or None for an output
    whose shape is static. With only static outputs, the kernel is called when it checks
    that the run-time inputs agree with them, and nothing is emitted otherwise.
    """
    name, dynamic, checked = _shape_kernel(compiler.ctx.tec, func)
    if name is None:
        return [None] * len(dynamic)
    flat_args: list[int] = []
    for param, register in zip(func.params, args):
        if isinstance(param.checked_type, TupleType):
            for k in range(len(_flat_types(param.checked_type))):
                flat_args.append(compiler._emit_dst(
                    lambda d, k=k, r=register: bc.GetField(r, k, d)))
        else:
            flat_args.append(register)
    if needs_input_data(func):
        inputs = [flat_args[i] for i, _ in _dynamic_params(func)]
    else:
        inputs = [compiler._emit_dst(lambda d, r=flat_args[i]: bc.ShapeOf(r, d))
                  for i, _ in _dynamic_params(func)]
    out_types = _flat_types(func.body.checked_type)
    results: list[tuple[int, int] | None] = []
    out_registers: list[int] = []
    for ty, is_dynamic in zip(out_types, dynamic):
        if not is_dynamic:
            results.append(None)
            continue
        shape_reg = compiler.alloc.static_tensor((len(ty.shape),), "int64", True)
        size_reg = compiler.alloc.static_tensor((1,), "int64", True)
        out_registers += [shape_reg, size_reg]
        results.append((shape_reg, size_reg))
    if checked:
        out_registers.append(compiler.alloc.static_tensor((1,), "int64", True))
    packed = compiler.ctx.packed_index(name)
    compiler.emit(bc.InvokePacked(packed, len(out_registers), tuple(inputs + out_registers)))
    return results
