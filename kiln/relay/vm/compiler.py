"""The Relay VM compiler: an IRModule becomes a bytecode :class:`~kiln.runtime.vm.Executable`.

Entry points: :func:`compile`, :class:`VMCompiler` (``lower``, ``codegen``, ``get_exec``,
``set_params``, ``get_params``, ``optimize``).

Pipeline (TVM's VM order, reference §1.6):

1. bind ``params``; the one compile pipeline
   (:func:`~kiln.relay.backend.pipeline.pass_pipeline` for ``"vm"``): InferType, the
   optimization passes, **FuseOps** (primitive functions), **ToANormalForm**, InferType,
   **ManifestLifetimes** (``memory.kill`` after last uses);
3. per Relay function, :class:`_FunctionCompiler` emits bytecode. On the way it does what TVM
   splits into passes: **LambdaLift** (each closure becomes its own VMFunction taking its free
   variables first; ``AllocClosure`` captures them, ``InvokeClosure`` calls), **LowerTE** (every
   primitive function is lowered by one :class:`~kiln.relay.backend.te_compiler.TECompiler`
   per target, dynamic ones with symbolic shapes), **ManifestAlloc** (:mod:`.memory_alloc`: a
   static arena per function plus per-tensor storage for escaping and dynamic tensors, shape
   functions called by :mod:`.shape_func`), and ``if``/``match`` become decision trees of
   ``If``/``Goto``/``GetTag``/``LoadConsti``/``Fatal``;
4. all kernels (and shape functions) compile into one library per target
   (:func:`~kiln.relay.backend.pipeline.build_kernels`), the Executable's ``lib``.

Heterogeneous execution: ``PlanDevices`` runs before FuseOps, and
:func:`~kiln.relay.transform.plan_devices.analyze_devices` gives every expression its virtual
device. The Executable lists those devices (the default device first, then the host ``cpu(0)``
if it differs, then the rest in order of first use); ``LoadConst``, ``AllocStorage`` and
``DeviceCopy`` carry their indexes, each function its ``param_device_indexes`` and each
constant its ``const_device_indexes`` entry. Each kernel is lowered for its device's target.

Tail calls need nothing special: a call whose result flows straight to ``Ret`` (through
``Move``/``Goto``/``KillRegister`` only) is detected by the VM, which reuses the frame.

Example
-------
>>> import numpy as np, kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(3,))
>>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.add(x, x)))
>>> exe = compile(mod, target="c")
>>> vm = kiln.runtime.vm.VirtualMachine(exe, kiln.cpu(0))
>>> vm.run(np.ones(3, "float32")).numpy()
array([2., 2., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.ir.adt import Constructor
from kiln.ir.expr import GlobalVar
from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.adt import (
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from kiln.relay.backend.pipeline import (
    OPTIMIZE_PASSES,
    build_kernels,
    make_compilers,
    pass_pipeline,
)
from kiln.relay.backend.te_compiler import is_reshape_only, reshaped_field
from kiln.relay.build_module import bind_params_by_name, default_device_of, parse_targets
from kiln.relay.vm import shape_func
from kiln.relay.vm.memory_alloc import ManifestAlloc
from kiln.runtime import ndarray as nd
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError
from kiln.runtime.vm import bytecode as bc
from kiln.runtime.vm.executable import Executable, VMFunction

__all__ = ["compile", "VMCompiler", "OPTIMIZE_PASSES"]

def _flat_tensor_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_tensor_types(f)]
    if not isinstance(ty, TensorType):
        raise TVMError(f"a kernel can only produce tensors, got {ty!r}")
    return [ty]


def _static_shape(ty: TensorType) -> tuple[int, ...] | None:
    """The shape as ints, or None when a dimension is dynamic."""
    dims = []
    for d in ty.shape:
        value = getattr(d, "value", None)
        if value is None or not isinstance(value, int):
            return None
        dims.append(int(value))
    return tuple(dims)


def _param_spec(ty: Any) -> tuple[tuple[int, ...], str] | None:
    """What the VM checks an argument against: (shape with -1 for dynamic dims, dtype)."""
    if not isinstance(ty, TensorType):
        return None
    dims = tuple(int(d.value) if isinstance(getattr(d, "value", None), int) else -1
                 for d in ty.shape)
    return dims, str(ty.dtype)


def _is_primitive(func: Any) -> bool:
    return isinstance(func, rx.Function) and bool(func.get_attr("Primitive"))


def _is_view(func: rx.Function) -> bool:
    """Whether a primitive call compiles to a ReshapeTensor view of (a field of) its input."""
    return is_reshape_only(func) or reshaped_field(func) is not None


def _op_as_primitive(call: rx.Call) -> rx.Function:
    """A bare operator call (left unfused) wrapped as a primitive function of its args."""
    params = [rx.var(f"p{i}", a.checked_type) for i, a in enumerate(call.args)]
    body = rx.Call(call.op, params, call.attrs, call.type_args)
    func = rx.Function(params, body, call.checked_type).with_attr("Primitive", 1)
    from kiln.relay.type_infer import infer_expr

    return infer_expr(func)


def _kernel_only_vars(body: Any) -> set[int]:
    """ids of let-bound vars used only as inputs of (non-view) kernels in the same function.

    Those are the tensors that may share arena slots (see :mod:`.memory_alloc`).
    """
    from kiln.relay.expr_functor import children_of

    kernel_uses: dict[int, int] = {}
    other_uses: set[int] = set()
    candidates: set[int] = set()
    stack: list[tuple[Any, int]] = [(body, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, rx.Var):
            other_uses.add(id(node))
            continue
        if isinstance(node, rx.Let):
            if depth == 0 and _is_primitive(node.value.op if isinstance(node.value, rx.Call)
                                            else None):
                candidates.add(id(node.var))
            stack.extend([(node.value, depth), (node.body, depth)])
            continue
        if isinstance(node, rx.Function):
            if not node.get_attr("Primitive"):
                stack.append((node.body, depth + 1))
            continue
        if isinstance(node, rx.Call):
            is_kill = isinstance(node.op, Op) and node.op.name == "memory.kill"
            is_kernel = (_is_primitive(node.op) and not _is_view(node.op)) or (
                isinstance(node.op, Op) and not node.op.name.startswith(("memory.", "vm.")))
            for arg in node.args:
                if isinstance(arg, rx.Var) and (is_kill or (is_kernel and depth == 0)):
                    kernel_uses[id(arg)] = kernel_uses.get(id(arg), 0) + 1
                else:
                    stack.append((arg, depth))
            stack.append((node.op, depth))
            continue
        if isinstance(node, Match):
            stack.append((node.data, depth))
            stack.extend((c.rhs, depth) for c in node.clauses)
            continue
        stack.extend((child, depth) for child in children_of(node))
    return {v for v in candidates if v not in other_uses}


class _ModuleContext:
    """State shared by the functions of one module: indexes, constants, kernels."""

    def __init__(self, mod: IRModule, tec: Any, compilers: dict[int, Any] | None = None,
                 device_map: Any = None) -> None:
        self.mod = mod
        self.tec = tec
        self.compilers = compilers or {1: tec}  # device type -> TECompiler
        self.device_map = device_map
        default = device_map.default_device if device_map is not None else cpu(0)
        self.devices: list[Any] = [default]  # virtual devices; index 0 is the default
        self.host_index = self.device_index(cpu(0))
        self.const_device_indexes: list[int] = []
        self.global_index: dict[str, int] = {}
        self.functions: list[VMFunction | None] = []
        self.constants: list[Any] = []
        self._constant_index: dict[int, int] = {}
        self.primitive_names: list[str] = []
        self._primitive_index: dict[str, int] = {}
        self._constructor_funcs: dict[tuple[str, int], int] = {}
        self.shape_funcs: dict[str, Any] = {}
        self.arena_bytes: dict[str, int] = {}

    def reserve(self, name: str) -> int:
        self.functions.append(None)
        index = len(self.functions) - 1
        self.global_index.setdefault(name, index)
        return index

    def constant(self, data: Any, device_index: int | None = None) -> int:
        key = id(data)
        if key not in self._constant_index:
            self._constant_index[key] = len(self.constants)
            self.constants.append(data)
            self.const_device_indexes.append(
                self.host_index if device_index is None else device_index)
        return self._constant_index[key]

    def device_index(self, device: Any) -> int:
        """The virtual device index of ``device`` (added to the list on first use)."""
        if device not in self.devices:
            self.devices.append(device)
        return self.devices.index(device)

    def device_index_of(self, expr: Any) -> int:
        """The virtual device index where ``expr``'s value lives."""
        if self.device_map is None:
            return 0
        return self.device_index(self.device_map.device_of(expr))

    def compiler_for(self, device_index: int) -> Any:
        """The TE compiler for the target of a virtual device's type."""
        device = self.devices[device_index]
        compiler = self.compilers.get(device.device_type)
        if compiler is None:
            raise TVMError(f"a kernel is planned on {device}, but no target was given for "
                           f"device type {device.device_type} (targets for device types "
                           f"{sorted(self.compilers)})")
        return compiler

    def packed_index(self, name: str) -> int:
        if name not in self._primitive_index:
            self._primitive_index[name] = len(self.primitive_names)
            self.primitive_names.append(name)
        return self._primitive_index[name]

    def constructor_function(self, con: Constructor) -> int:
        """A VMFunction building ``con`` from its arguments (a constructor used as a value)."""
        key = (con.belong_to.name_hint, con.tag)
        if key not in self._constructor_funcs:
            arity = len(con.inputs)
            name = f"constructor_{con.name_hint}_{con.tag}"
            index = self.reserve(name)
            code = [bc.AllocADT(con.tag, tuple(range(arity)), arity), bc.Ret(arity)]
            self.functions[index] = VMFunction(name, [f"arg{i}" for i in range(arity)], code,
                                               arity + 1)
            self._constructor_funcs[key] = index
        return self._constructor_funcs[key]


class _FunctionCompiler:
    """Emits the bytecode of one Relay function (TVM's VMFunctionCompiler)."""

    def __init__(self, ctx: _ModuleContext, name: str, index: int) -> None:
        self.ctx = ctx
        self.name = name
        self.index = index
        self.instructions: list[bc.Instruction] = []
        self.num_registers = 0
        self.var_register: dict[rx.Var, int] = {}
        self.alloc = ManifestAlloc(self)
        self.kernel_only: set[int] = set()
        self._internal_call: Any = None  # the call whose result may live in the arena

    # -- emission -------------------------------------------------------------------------

    def new_register(self) -> int:
        self.num_registers += 1
        return self.num_registers - 1

    def emit(self, instr: bc.Instruction) -> None:
        self.instructions.append(instr)

    def emit_dst(self, make: Any) -> int:
        """Emit ``make(dst)`` for a new register ``dst``; returns ``dst``."""
        dst = self.new_register()
        self.emit(make(dst))
        return dst

    # -- functions ------------------------------------------------------------------------

    def compile(self, func: rx.Function, free_vars: list[rx.Var] = (),
                self_var: rx.Var | None = None) -> VMFunction:
        """Compile ``func``; closures take ``free_vars`` before their own parameters."""
        params = list(free_vars) + list(func.params)
        for param in params:
            self.var_register[param] = self.new_register()
        if self_var is not None:
            self.var_register[self_var] = self.emit_dst(
                lambda d: bc.AllocClosure(self.index, tuple(range(len(free_vars))), d))
        self.kernel_only = _kernel_only_vars(func.body)
        self.alloc.prologue()
        result = self.visit(func.body)
        self.emit(bc.Ret(result))
        self.alloc.finish()
        self.ctx.arena_bytes[self.name] = self.alloc.arena_bytes
        specs = [None] * len(free_vars) + [_param_spec(p.checked_type) for p in func.params]
        devices = [self.ctx.device_index_of(p) for p in params]
        return VMFunction(self.name, [p.name_hint for p in params], self.instructions,
                          max(self.num_registers, 1), param_device_indexes=devices,
                          param_types=specs)

    def lift(self, func: rx.Function, self_var: rx.Var | None = None) -> int:
        """Lambda-lift a closure: compile it as a new function; return an AllocClosure register."""
        from kiln.relay.analysis.variables import free_vars

        captured = [v for v in free_vars(func) if v is not self_var]
        name = f"{self.name}_lifted_{len(self.ctx.functions)}"
        index = self.ctx.reserve(name)
        sub = _FunctionCompiler(self.ctx, name, index)
        self.ctx.functions[index] = sub.compile(func, captured, self_var)
        regs = tuple(self.lookup(v) for v in captured)
        return self.emit_dst(lambda d: bc.AllocClosure(index, regs, d))

    def lookup(self, var: rx.Var) -> int:
        try:
            return self.var_register[var]
        except KeyError:
            raise TVMError(f"@{self.name}: variable %{var.name_hint} is used but not bound "
                           "in scope") from None

    # -- expressions ----------------------------------------------------------------------

    def visit(self, expr: Any) -> int:
        """Emit code computing ``expr``; returns the register holding its value."""
        method = self._VISIT.get(type(expr))
        if method is None:
            hint = (" (references are supported by the interpreter only)"
                    if type(expr).__name__.startswith("Ref") else "")
            raise TVMError(f"@{self.name}: the Relay VM cannot compile "
                           f"{type(expr).__name__}{hint}")
        return method(self, expr)

    def visit_var(self, var: rx.Var) -> int:
        return self.lookup(var)

    def visit_constant(self, const: rx.Constant) -> int:
        device = self.ctx.device_index_of(const)
        index = self.ctx.constant(const.data, device)
        return self.emit_dst(lambda d: bc.LoadConst(index, device, d))

    def visit_global_var(self, gvar: GlobalVar) -> int:
        index = self._global(gvar)
        return self.emit_dst(lambda d: bc.AllocClosure(index, (), d))

    def visit_constructor(self, con: Constructor) -> int:
        if not con.inputs:
            return self.emit_dst(lambda d: bc.AllocADT(con.tag, (), d))
        index = self.ctx.constructor_function(con)
        return self.emit_dst(lambda d: bc.AllocClosure(index, (), d))

    def visit_tuple(self, tup: rx.Tuple) -> int:
        fields = tuple(self.visit(f) for f in tup.fields)
        return self.emit_dst(lambda d: bc.AllocADT(0, fields, d))

    def visit_tuple_get_item(self, item: rx.TupleGetItem) -> int:
        obj = self.visit(item.tuple_value)
        return self.emit_dst(lambda d: bc.GetField(obj, item.index, d))

    def visit_function(self, func: rx.Function) -> int:
        if _is_primitive(func):
            raise TVMError("a primitive function can only be called, not used as a value")
        return self.lift(func)

    def visit_let(self, let: rx.Let) -> int:
        node = let
        while isinstance(node, rx.Let):  # iterate: ANF chains are long
            var, value = node.var, node.value
            if isinstance(value, rx.Function) and not _is_primitive(value):
                register = self.lift(value, self_var=var)
            elif isinstance(value, rx.Var):
                source = self.lookup(value)  # a copy, so killing one name keeps the other
                register = self.emit_dst(lambda d, s=source: bc.Move(s, d))
            else:
                self._internal_call = value if id(var) in self.kernel_only else None
                register = self.visit(value)
            self.var_register[var] = register
            node = node.body
        return self.visit(node)

    def visit_if(self, node: rx.If) -> int:
        cond = self.visit(node.cond)
        true_value = self.emit_dst(lambda d: bc.LoadConsti(1, d))
        result = self.new_register()
        branch_at = len(self.instructions)
        self.emit(bc.If(cond, true_value, 1, 1))
        self.emit(bc.Move(self.visit(node.true_branch), result))
        goto_at = len(self.instructions)
        self.emit(bc.Goto(1))
        else_at = len(self.instructions)
        self.emit(bc.Move(self.visit(node.false_branch), result))
        end = len(self.instructions)
        self.instructions[branch_at] = bc.If(cond, true_value, 1, else_at - branch_at)
        self.instructions[goto_at] = bc.Goto(end - goto_at)
        return result

    def visit_match(self, match: Match) -> int:
        data = self.visit(match.data)
        result = self.new_register()
        gotos: list[int] = []
        for clause in match.clauses:
            fails: list[int] = []
            self._match_pattern(clause.lhs, data, fails)
            self.emit(bc.Move(self.visit(clause.rhs), result))
            gotos.append(len(self.instructions))
            self.emit(bc.Goto(1))
            next_clause = len(self.instructions)
            for at in fails:
                old = self.instructions[at]
                self.instructions[at] = bc.If(old.test, old.target, 1, next_clause - at)
        self.emit(bc.Fatal())  # no clause matched
        end = len(self.instructions)
        for at in gotos:
            self.instructions[at] = bc.Goto(end - at)
        return result

    def _match_pattern(self, pattern: Any, register: int, fails: list[int]) -> None:
        """Emit the tests of ``pattern`` on ``register``; record If pcs that jump on failure."""
        if isinstance(pattern, PatternWildcard):
            return
        if isinstance(pattern, PatternVar):
            self.var_register[pattern.var] = register
            return
        if isinstance(pattern, PatternConstructor):
            tag = self.emit_dst(lambda d: bc.GetTag(register, d))
            want = self.emit_dst(lambda d: bc.LoadConsti(pattern.constructor.tag, d))
            fails.append(len(self.instructions))
            self.emit(bc.If(tag, want, 1, 1))
            subpatterns = pattern.patterns
        elif isinstance(pattern, PatternTuple):
            subpatterns = pattern.patterns
        else:
            raise TVMError(f"unknown pattern {type(pattern).__name__}")
        for i, sub in enumerate(subpatterns):
            if isinstance(sub, PatternWildcard):
                continue
            field = self.emit_dst(lambda d, i=i: bc.GetField(register, i, d))
            self._match_pattern(sub, field, fails)

    def visit_call(self, call: rx.Call) -> int:
        op = call.op
        if isinstance(op, Op):
            handler = self._BUILTIN_OPS.get(op.name)
            if handler is not None:
                return handler(self, call)
            return self.primitive_call(_op_as_primitive(call), call)
        if _is_primitive(op):
            return self.primitive_call(op, call)
        args = tuple(self.visit(a) for a in call.args)
        if isinstance(op, GlobalVar):
            index = self._global(op)
            return self.emit_dst(lambda d: bc.Invoke(index, args, d))
        if isinstance(op, Constructor):
            return self.emit_dst(lambda d: bc.AllocADT(op.tag, args, d))
        closure = self.visit(op)
        return self.emit_dst(lambda d: bc.InvokeClosure(closure, args, d))

    def _global(self, gvar: GlobalVar) -> int:
        index = self.ctx.global_index.get(gvar.name_hint)
        if index is None:
            raise TVMError(f"@{self.name} calls @{gvar.name_hint}, which is not a Relay "
                           "function of the module")
        return index

    # -- builtin (non-kernel) operators ----------------------------------------------------

    def _op_kill(self, call: rx.Call) -> int:
        register = self.lookup(call.args[0])
        self.emit(bc.KillRegister(register))
        self.alloc.release(register)
        return register

    def _op_device_copy(self, call: rx.Call) -> int:
        from kiln.relay.transform.plan_devices import as_device

        src = self.visit(call.args[0])
        src_index = self.ctx.device_index(as_device(call.attrs.src_virtual_device))
        dst_index = self.ctx.device_index(as_device(call.attrs.dst_virtual_device))
        return self.emit_dst(lambda d: bc.DeviceCopy(src, src_index, dst_index, d))

    def _op_shape_of(self, call: rx.Call) -> int:
        src = self.visit(call.args[0])
        return self.emit_dst(lambda d: bc.ShapeOf(src, d))

    _BUILTIN_OPS = {
        "memory.kill": _op_kill,
        "device_copy": _op_device_copy,
        "vm.shape_of": _op_shape_of,
    }

    # -- kernels --------------------------------------------------------------------------

    def primitive_call(self, func: rx.Function, call: rx.Call) -> int:
        """Allocate outputs (ManifestAlloc), then InvokePacked; or a zero-copy reshape."""
        args = [self.visit(a) for a in call.args]
        out_types = _flat_tensor_types(call.checked_type)
        static = [_static_shape(t) for t in out_types]
        dynamic = any(s is None for s in static) or any(
            _static_shape(t) is None for p in func.params
            for t in _flat_tensor_types(p.checked_type))
        device = self.ctx.device_index_of(call)
        if _is_view(func) and len(out_types) == 1:
            if static[0] is not None:
                shape = self.ctx.constant(nd.array(np.array(static[0], dtype="int64")))
                host = self.ctx.host_index
                shape_reg = self.emit_dst(lambda d: bc.LoadConst(shape, host, d))
            else:
                shape_reg = shape_func.emit_shape_function(self, func, args)[0][0]
            source, field = args[0], reshaped_field(func)
            if field is not None:  # a view of the tuple's field, not a copy kernel
                source = self.emit_dst(lambda d: bc.GetField(args[0], field, d))
            return self.emit_dst(lambda d: bc.ReshapeTensor(source, shape_reg, d))
        kernel = self.ctx.compiler_for(device).lower(func, symbolic=dynamic)
        internal = len(out_types) == 1 and self._internal_call is call
        if all(s is not None for s in static):
            if dynamic:  # inputs of run-time shape must agree with the static outputs
                shape_func.emit_shape_function(self, func, args)
            outs = [self.alloc.static_tensor(s, str(t.dtype), internal, device)
                    for s, t in zip(static, out_types)]
        else:
            shapes = shape_func.emit_shape_function(self, func, args)
            outs = [self.alloc.static_tensor(s, str(t.dtype), False, device) if regs is None
                    else self.alloc.dynamic_tensor(regs[0], regs[1], str(t.dtype), device)
                    for s, regs, t in zip(static, shapes, out_types)]
        packed = self.ctx.packed_index(kernel.name)
        self.emit(bc.InvokePacked(packed, len(outs), tuple(args) + tuple(outs)))
        if isinstance(call.checked_type, TupleType):
            return self.emit_dst(lambda d: bc.AllocADT(0, tuple(outs), d))
        return outs[0]

    _VISIT: dict = {}


_FunctionCompiler._VISIT = {
    rx.Var: _FunctionCompiler.visit_var,
    rx.Constant: _FunctionCompiler.visit_constant,
    GlobalVar: _FunctionCompiler.visit_global_var,
    Constructor: _FunctionCompiler.visit_constructor,
    rx.Tuple: _FunctionCompiler.visit_tuple,
    rx.TupleGetItem: _FunctionCompiler.visit_tuple_get_item,
    rx.Function: _FunctionCompiler.visit_function,
    rx.Let: _FunctionCompiler.visit_let,
    rx.If: _FunctionCompiler.visit_if,
    Match: _FunctionCompiler.visit_match,
    rx.Call: _FunctionCompiler.visit_call,
}


class VMCompiler:
    """Compiles a Relay module to a VM Executable (TVM's ``relay.vm.VMCompiler``).

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> compiler = VMCompiler()
    >>> compiler.lower(kiln.IRModule.from_expr(relay.Function([x], relay.exp(x))), "c")
    >>> compiler.codegen()
    >>> compiler.get_exec().globals
    ['main']
    """

    def __init__(self) -> None:
        self._params: dict[str, Any] = {}
        self._exec: Executable | None = None
        self.stats: dict[str, Any] = {}

    def set_params(self, params: dict[str, Any]) -> None:
        """Bind these values to ``main``'s parameters of the same names (as constants)."""
        self._params.update({k: v if isinstance(v, nd.NDArray) else nd.array(np.asarray(v))
                             for k, v in (params or {}).items()})

    def get_params(self) -> dict[str, Any]:
        return dict(self._params)

    def optimize(self, mod: Any, target: Any = None, target_host: Any = None,
                 params: dict | None = None) -> IRModule:
        """The module after the VM pipeline up to code generation (ANF, fused, kills).

        The passes run under the CPU kernels' target (``target_host`` only when no CPU
        target is given), as ``relay.build``'s do: an explicit ``target_host`` changes where
        host code is built, not how the CPU kernels' program is optimized.
        """
        if params:
            self.set_params(params)
        mod = _as_module(mod)
        targets, host = parse_targets(target, target_host)
        if self._params and "main" in [g.name_hint for g in mod.get_global_vars()]:
            mod = mod.copy()
            mod["main"] = bind_params_by_name(mod["main"], self._params)
        with targets.get(1, host):
            return pass_pipeline(mod, default_device_of(targets), "vm")(mod)

    def lower(self, mod: Any, target: Any = None, target_host: Any = None) -> None:
        """Optimize ``mod`` and emit bytecode for every Relay function; kernels are lowered."""
        from kiln.relay.transform.plan_devices import analyze_devices

        targets, host = parse_targets(target, target_host)
        self._target = host
        mod = self.optimize(mod, targets, host)
        # codegen() builds what lower() lowered: start compiling kernels as they come
        compilers = make_compilers(targets, host, "vm_mod", build_as_lowered=True)
        tec = compilers[1]
        device_map = analyze_devices(mod, default_device_of(targets))
        ctx = _ModuleContext(mod, tec, compilers, device_map)
        used = _reachable_from_main(mod)
        funcs = [(gv, f) for gv, f in mod.functions.items() if isinstance(f, rx.Function)
                 and not f.get_attr("Primitive") and gv.name_hint in used]
        for gvar, _ in funcs:
            ctx.reserve(gvar.name_hint)
        with host:
            for gvar, func in funcs:
                index = ctx.global_index[gvar.name_hint]
                compiler = _FunctionCompiler(ctx, gvar.name_hint, index)
                ctx.functions[index] = compiler.compile(func)
        self._ctx = ctx
        self._exec = None

    def codegen(self) -> None:
        """Compile every kernel into one library and assemble the Executable."""
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            raise TVMError("VMCompiler.codegen: call lower(mod, target) first")
        with self._target:
            lib = build_kernels(ctx.compilers, always_host=False)
        exe = Executable(ctx.functions, ctx.constants, ctx.primitive_names, lib, ctx.devices,
                         ctx.host_index, ctx.const_device_indexes)
        self._exec = exe.fuse_segments()  # straight kernel runs become super-instructions
        self.stats = {"kernels": sum(len(c.lowered) for c in ctx.compilers.values()),
                      "arena_bytes": dict(ctx.arena_bytes)}

    def get_exec(self) -> Executable:
        """The Executable built by :meth:`codegen`."""
        if self._exec is None:
            raise TVMError("VMCompiler.get_exec: call lower(...) and codegen() first")
        return self._exec

    get_executable = get_exec


def _reachable_from_main(mod: IRModule) -> set[str]:
    """Names of the global functions ``main`` can reach (all of them without a ``main``).

    TVM's VM pipeline starts with RemoveUnusedFunctions; skipping the rest here keeps, e.g.,
    the unused prelude functions out of the executable and its kernel library.
    """
    from kiln.relay.expr_functor import post_order_visit

    names = {gv.name_hint for gv in mod.get_global_vars()}
    if "main" not in names:
        return names
    seen: set[str] = set()
    stack = ["main"]
    while stack:
        name = stack.pop()
        if name in seen or name not in names:
            continue
        seen.add(name)
        post_order_visit(mod[name], lambda node: stack.append(node.name_hint)
                         if isinstance(node, GlobalVar) else None)
    return seen


def _as_module(mod: Any) -> IRModule:
    if isinstance(mod, rx.Function):
        return IRModule.from_expr(mod)
    if not isinstance(mod, IRModule):
        raise TVMError(f"relay.vm.compile expects an IRModule or a relay.Function, got "
                       f"{type(mod).__name__}")
    return mod


def compile(mod: Any, target: Any = None, target_host: Any = None,  # noqa: A001 (TVM's name)
            params: dict | None = None) -> Executable:
    """Compile a Relay module for the VM (TVM's ``relay.vm.compile``).

    Parameters
    ----------
    mod : IRModule or relay.Function
        The program; ``main`` is the entry point.
    target : str or Target, optional
        Kernel target (``"llvm"`` or ``"c"``; default: llvm when available).
    target_host : str or Target, optional
        Host target (VM-side shape functions and host code; default: the CPU target). The
        optimization passes run under the CPU kernels' target whichever is given.
    params : dict of str to array, optional
        Values bound to ``main``'s parameters of the same names.

    Returns
    -------
    Executable
        Run it with ``kiln.runtime.vm.VirtualMachine(exe, kiln.cpu(0))``.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> exe = compile(kiln.IRModule.from_expr(relay.Function([x], relay.negative(x))), "c")
    >>> exe.get_function_params("main")
    ['x']
    """
    compiler = VMCompiler()
    if params:
        compiler.set_params(params)
    compiler.lower(mod, target, target_host)
    compiler.codegen()
    return compiler.get_exec()

