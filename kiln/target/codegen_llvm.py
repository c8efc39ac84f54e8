"""TIR -> LLVM IR through llvmlite.

Entry points: :class:`CodeGenLLVM`, :func:`emit_llvm`, :func:`host_target_machine`. The
``llvm`` target's build function (``target.build.llvm``) is :mod:`.llvm_library`'s.

Each PrimFunc ``f`` becomes the LLVM function ``i32 @f_unpacked(T* noalias A, ..., i32 n)``
(the same signature as the C target's unpacked twin). The packed-ABI wrapper ``f`` that
checks a call's arguments is printed by :mod:`.llvm_packed` from the description the C
target prints too (:mod:`.packed_checks`): argument checking is written once. The module is
optimized at O3 for ``-mcpu`` (else the host CPU with its feature string); parallel loops are
outlined into ``TVMBackendParallelLaunch`` lambdas (as TVM's ``codegen_cpu`` does) whose
threads claim contiguous chunks of the loop from an atomic counter in the closure, vector
dtypes become LLVM vectors (an ``if_then_else`` with a per-lane condition is a ``select``
whose arms run under lane masks: :mod:`.codegen_llvm_masked`), small constant-extent unrolled
loops are unrolled while emitting, serial loops carry the option LLVM's unroller follows
(``llvm.loop.unroll.full`` / ``disable``, or none: LLVM's heuristics; see
``CodeGenLLVM._unroll_option``), float32 ``exp`` is the same vectorizable polynomial as the
C target's ``kiln_expf``. ``call_extern`` goes through an exported trampoline in the glue (C
beside ``pragma import_c`` sources, so their ``static`` functions link), ``tvm_call_packed``
looks the function up once through ``__tvm_module_ctx``, and PrimFuncs already in packed form
(MakePackedAPI output, ``tvm_struct_get``) are emitted as the packed function itself.

llvmlite is the optional ``llvm`` extra: without it, ``target="llvm"`` raises a TVMError
saying ``pip install kiln[llvm]``. Loading it, target machines, optimization and the object
cache are :mod:`kiln.target.llvm_toolchain`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.target import c_abi
from kiln.target.c_parallel import CHUNKS_PER_THREAD
from kiln.target.codegen_llvm_masked import LLVMLaneMasks
from kiln.target.llvm_intrinsics import LLVMIntrinsics
from kiln.target.llvm_toolchain import (
    host_target_machine,
    llvm_available,
    llvmlite_modules,
    parse_and_optimize,
)
from kiln.tir.stmt_functor import child_nodes

__all__ = ["CodeGenLLVM", "emit_llvm", "host_target_machine", "llvm_available"]


# -- tables -----------------------------------------------------------------------------------

_INT_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul"}
_SIGNED_BINARY = {"Div": "sdiv", "Mod": "srem"}
_UNSIGNED_BINARY = {"Div": "udiv", "Mod": "urem"}
_FLOAT_BINARY = {"Add": "fadd", "Sub": "fsub", "Mul": "fmul", "Div": "fdiv", "Mod": "frem"}
_COMPARISONS = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def _used_var_ids(stmt: Any, wanted: set[int]) -> set[int]:
    """The ids in ``wanted`` of the Vars ``stmt`` reads, buffers' data and shape variables
    included (what an outlined parallel body must capture; nothing else dominates the
    lambda's code). The walk stops once every wanted variable is found: a kernel's parallel
    body reads its few outer variables within its first statements."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [stmt]

    def add_buffer(buffer: Any) -> None:
        found.add(id(buffer.data))
        stack.extend(e for e in [*buffer.shape, *buffer.strides, buffer.elem_offset]
                     if e is not None)

    while stack and not wanted <= found:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        kind = _node_name(node)
        if kind in ("Var", "SizeVar"):
            found.add(id(node))
        elif kind in ("BufferLoad", "BufferStore"):
            add_buffer(node.buffer)
        elif kind == "Call":
            for arg in node.args:
                if _node_name(arg) == "Buffer":
                    add_buffer(arg)
        stack.extend(child_nodes(node))
    return found & wanted


def _unrolled_size(stmt: Any, limit: int) -> int | None:
    """About how many LLVM instructions ``stmt`` becomes with every loop in it unrolled, or
    None when that is over ``limit`` or a loop in it has no constant extent: one per IR node,
    and a vector access that is not contiguous (a gather or scatter) six per lane (it is
    emitted lane by lane: extract the index, widen, scale, address, load or store, insert or
    extract the value). The walk stops once the size passes ``limit``."""
    stack, size = [stmt], 0
    while stack:
        node = stack.pop()
        kind = _node_name(node)
        if kind == "While":
            return None
        if kind == "For":
            if _node_name(node.extent) != "IntImm":
                return None
            count = int(node.extent.value)
            inner = _unrolled_size(node.body, (limit - size) // count) if count > 0 else 0
            if inner is None:
                return None
            size += 1 + count * inner
        else:
            size += 1
            if kind in ("BufferLoad", "BufferStore"):
                lanes = DataType((node if kind == "BufferLoad" else node.value).dtype).lanes
                if lanes > 1 and not _contiguous_access(node.buffer, node.indices, lanes):
                    size += 6 * lanes
            stack.extend(child_nodes(node))
        if size > limit:
            return None
    return size


def _contiguous_access(buffer: Any, indices: Sequence[Any], lanes: int) -> bool:
    """Whether a ``lanes``-wide access of ``buffer`` at ``indices`` reads or writes adjacent
    elements (one vector load or store), as opposed to one address per lane."""
    ramps = [i for i in indices if _node_name(i) == "Ramp"]
    others_scalar = all(DataType(i.dtype).lanes == 1 or _node_name(i) in ("Ramp", "Broadcast")
                        for i in indices)
    return (lanes > 1 and len(ramps) == 1 and others_scalar
            and indices[-1] is ramps[0] and not buffer.strides
            and _node_name(ramps[0].stride) == "IntImm" and ramps[0].stride.value == 1)


def _condition_var_ids(stmt: Any) -> set[int]:
    """The ids of the Vars that a branch condition in ``stmt`` reads (IfThenElse, Select,
    ``if_then_else``)."""
    conditions, stack, seen = [], [stmt], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        name = _node_name(node)
        if name in ("IfThenElse", "Select"):
            conditions.append(node.condition)
        elif name == "Call" and node.op == "tir.if_then_else":
            conditions.append(node.args[0])
        stack.extend(child_nodes(node))
    found: set[int] = set()
    while conditions:
        node = conditions.pop()
        if _node_name(node) in ("Var", "SizeVar"):
            found.add(id(node))
        conditions.extend(child_nodes(node))
    return found


def _node_name(node: Any) -> str:
    return type(node).__name__


class CodeGenLLVM(LLVMIntrinsics, LLVMLaneMasks):
    """TIR PrimFuncs -> one LLVM module of ``<name>_unpacked`` functions.

    Example
    -------
    >>> from kiln import tir
    >>> A = tir.decl_buffer((8,), "float32", name="A")
    >>> i = tir.Var("i", "int32")
    >>> body = tir.For(i, 0, 8, tir.ForKind.SERIAL, tir.BufferStore(A, A[i] + 1.0, [i]))
    >>> cg = CodeGenLLVM()
    >>> cg.add_function(tir.PrimFunc([A], body), "inc")
    >>> "define i32 @\\"inc_unpacked\\"" in str(cg.module)
    True
    """

    workspace_threshold = 16384
    unroll_limit = 64
    llvm_unroll_budget = 768  # serial loop nests LLVM unrolls fully (_unroll_option)
    # False leaves every loop to LLVM's unroller: stock -O3, which
    # benchmarks/llvm_pipeline.py compares with
    mark_loops = True

    def __init__(self, name: str = "kiln") -> None:
        ir, _ = llvmlite_modules()
        self.ir = ir
        self.module = ir.Module(name=name)
        self.i1, self.i8, self.i32, self.i64 = (ir.IntType(b) for b in (1, 8, 32, 64))
        self.void_ptr = self.i8.as_pointer()
        self.imported_c: list[str] = []
        # call_extern trampoline -> C return and argument types, callee, constant arguments
        self.externs: dict[str, tuple[str, list[str], str, dict[int, int]]] = {}
        self.extern_types: dict[str, tuple[Any, list]] = {}  # ... -> LLVM types
        self.signatures: list[tuple[str, c_abi.FunctionSignature, list[str]]] = []
        self.packed_names: list[str] = []  # functions that arrived in packed form
        self.uses_module_ctx = False  # tvm_call_packed needs __tvm_module_ctx
        self._strings: dict[str, Any] = {}
        self._lambda_count = 0
        self.vars: dict[int, Any] = {}
        self.builder = None
        self.function = None
        self.alloca_builder = None
        self._in_parallel = False
        self._tested_vars: set[int] = set()  # loop variables some branch condition reads
        self.func_name = ""

    # -- types -----------------------------------------------------------------------------
    def ltype(self, dtype: Any, storage: bool = False):
        """The LLVM type of a dtype (``storage``: bool as i8, as it sits in memory)."""
        ir = self.ir
        t = DataType(dtype)
        if t.type_code == DataTypeCode.HANDLE:
            return self.void_ptr
        if t.type_code == DataTypeCode.FLOAT:
            scalar = {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}[t.bits]
        elif t.type_code == DataTypeCode.BFLOAT:
            scalar = ir.IntType(16)  # narrow types are bit patterns (LegalizeNarrowTypes)
        elif t.is_float8 or t.bits in (2, 4):
            scalar = self.i8
        elif t.bits == 1:
            scalar = self.i8 if storage else self.i1
        else:
            scalar = ir.IntType(t.bits)
        return ir.VectorType(scalar, t.lanes) if t.lanes > 1 else scalar

    def const(self, dtype: Any, value: Any):
        """An LLVM constant of TIR dtype ``dtype``."""
        return self.ir.Constant(self.ltype(dtype), value)

    # -- functions -------------------------------------------------------------------------
    def add_function(self, func: Any, name: str) -> None:
        """Emit ``i32 @<name>_unpacked(...)`` for one PrimFunc."""
        ir = self.ir
        self.func_name = name
        if func.attrs.get("calling_conv") == c_abi.PACKED_CALLING_CONV:
            self._add_packed_form(func, name)
            return
        signature = c_abi.function_signature(func)
        arg_types = [self.ltype(b.dtype, storage=True).as_pointer() for b in signature.buffers]
        arg_types += [self.ltype(v.dtype) for v in signature.scalars]
        fn = ir.Function(self.module, ir.FunctionType(self.i32, arg_types), f"{name}_unpacked")
        self.vars = {}
        params = [b.data for b in signature.buffers] + list(signature.scalars)
        for arg, var, index in zip(fn.args, params, range(len(params))):
            arg.name = getattr(var, "name", f"arg{index}")
            if index < len(signature.buffers):
                arg.add_attribute("noalias")
            self.vars[id(var)] = arg
        # types only: tensor names may repeat or be C keywords
        c_params = [f"{c_abi.c_type(b.dtype)}*" for b in signature.buffers]
        c_params += [c_abi.c_type(v.dtype) for v in signature.scalars]
        self.signatures.append((name, signature, c_params))
        self._enter_function(fn)
        self._tested_vars = _condition_var_ids(func.body)
        self.emit_stmt(func.body)
        if not self.builder.block.is_terminated:
            self.builder.ret(self.const("int32", 0))

    def _add_packed_form(self, func: Any, name: str) -> None:
        """A PrimFunc already in packed form (after MakePackedAPI): emit it as it is."""
        ir = self.ir
        types = [self.void_ptr, self.void_ptr, self.i32, self.void_ptr, self.void_ptr,
                 self.void_ptr]
        if len(func.params) != len(types):
            raise TVMError(f"LLVM codegen: packed function {name} must take the 6 packed params")
        fn = ir.Function(self.module, ir.FunctionType(self.i32, types), name)
        self.vars = {}
        for arg, var in zip(fn.args, func.params):
            arg.name = var.name
            self.vars[id(var)] = arg
        self.packed_names.append(name)
        self._enter_function(fn)
        self._tested_vars = _condition_var_ids(func.body)
        self.emit_stmt(func.body)
        if not self.builder.block.is_terminated:
            self.builder.ret(self.const("int32", 0))

    def _enter_function(self, fn) -> None:
        ir = self.ir
        self.function = fn
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        self.alloca_builder = ir.IRBuilder(entry)
        self.alloca_builder.branch(body)
        self.alloca_builder.position_at_start(entry)
        self.builder = ir.IRBuilder(body)

    def declare(self, name: str, ret, args: Sequence[Any]):
        """The module's function ``name`` (``ret(args)``), declared on first use."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return self.ir.Function(self.module, self.ir.FunctionType(ret, list(args)), name)

    def string_constant(self, text: str, builder: Any = None):
        """An i8* to a private constant C string (``builder``: where to put the cast; default
        the function being emitted)."""
        ir = self.ir
        if text not in self._strings:
            data = bytearray(text.encode() + b"\0")
            ty = ir.ArrayType(self.i8, len(data))
            glob = ir.GlobalVariable(self.module, ty, f".str{len(self._strings)}")
            glob.global_constant = True
            glob.linkage = "private"
            glob.initializer = ir.Constant(ty, data)
            self._strings[text] = glob
        return (builder or self.builder).bitcast(self._strings[text], self.void_ptr)

    def _return_error(self, message: str) -> None:
        set_error = self.declare("TVMAPISetLastError", self.ir.VoidType(), [self.void_ptr])
        self.builder.call(set_error, [self.string_constant(message)])
        self.builder.ret(self.const("int32", -1))

    # -- expressions -----------------------------------------------------------------------
    def expr(self, node: Any):
        """The LLVM value of a PrimExpr."""
        return self._dispatch(node)

    def _dispatch(self, node: Any):
        kind = _node_name(node)
        method = getattr(self, f"expr_{kind}", None)
        if method is None:
            if kind in _FLOAT_BINARY or kind in _COMPARISONS or kind in ("And", "Or"):
                return self._binary(node, kind)
            raise TVMError(f"LLVM codegen: no rule for TIR expression node {kind}")
        return method(node)

    def _binary(self, node: Any, kind: str):
        b = self.builder
        t = DataType(node.a.dtype)
        lhs, rhs = self.expr(node.a), self.expr(node.b)
        if kind in _COMPARISONS:
            op = _COMPARISONS[kind]
            if t.is_float:
                return (b.fcmp_unordered(op, lhs, rhs) if op == "!="
                        else b.fcmp_ordered(op, lhs, rhs))
            return (b.icmp_unsigned if t.is_uint else b.icmp_signed)(op, lhs, rhs)
        if kind in ("And", "Or"):
            return b.and_(lhs, rhs) if kind == "And" else b.or_(lhs, rhs)
        if t.is_float:
            # "contract" lets a*b+c become one FMA, as gcc does for the C target (GNU C's
            # default -ffp-contract=fast); nothing else is relaxed.
            return getattr(b, _FLOAT_BINARY[kind])(lhs, rhs, flags=("contract",))
        table = _INT_BINARY if kind in _INT_BINARY else (
            _UNSIGNED_BINARY if t.is_uint else _SIGNED_BINARY)
        return getattr(b, table[kind])(lhs, rhs)

    def _cmp(self, dtype: Any, op: str, lhs, rhs):
        t = DataType(dtype)
        if t.is_float:
            return self.builder.fcmp_ordered(op, lhs, rhs)
        return (self.builder.icmp_unsigned if t.is_uint else self.builder.icmp_signed)(
            op, lhs, rhs)

    def expr_Min(self, node: Any):
        """LLVM value of a TIR ``Min`` node."""
        a, b = self.expr(node.a), self.expr(node.b)
        return self.builder.select(self._cmp(node.a.dtype, "<", a, b), a, b)

    def expr_Max(self, node: Any):
        """LLVM value of a TIR ``Max`` node."""
        a, b = self.expr(node.a), self.expr(node.b)
        return self.builder.select(self._cmp(node.a.dtype, ">", a, b), a, b)

    def _floor_parts(self, node: Any):
        """Truncated quotient/remainder and whether flooring must adjust them."""
        b = self.builder
        a_val, b_val = self.expr(node.a), self.expr(node.b)
        t = DataType(node.a.dtype)
        if t.is_uint:
            return b.udiv(a_val, b_val), b.urem(a_val, b_val), None, b_val
        q, r = b.sdiv(a_val, b_val), b.srem(a_val, b_val)
        zero = self.ir.Constant(a_val.type, None)
        adjust = b.and_(b.icmp_signed("!=", r, zero),
                        b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", b_val, zero)))
        return q, r, adjust, b_val

    def expr_FloorDiv(self, node: Any):
        """LLVM value of a TIR ``FloorDiv`` node."""
        if DataType(node.dtype).is_float:
            quotient = self.builder.fdiv(self.expr(node.a), self.expr(node.b))
            return self._call_intrinsic("llvm.floor", [quotient])
        q, _, adjust, _ = self._floor_parts(node)
        if adjust is None:
            return q
        return self.builder.sub(q, self.builder.zext(adjust, q.type))

    def expr_FloorMod(self, node: Any):
        """LLVM value of a TIR ``FloorMod`` node."""
        b = self.builder
        if DataType(node.dtype).is_float:
            a_val, b_val = self.expr(node.a), self.expr(node.b)
            floor = self._call_intrinsic("llvm.floor", [b.fdiv(a_val, b_val)])
            return b.fsub(a_val, b.fmul(floor, b_val))
        _, r, adjust, divisor = self._floor_parts(node)
        if adjust is None:
            return r
        return b.add(r, b.select(adjust, divisor, self.ir.Constant(r.type, None)))

    def expr_IntImm(self, node: Any):
        """LLVM value of a TIR ``IntImm`` node."""
        return self.const(node.dtype, int(node.value))

    def expr_FloatImm(self, node: Any):
        """LLVM value of a TIR ``FloatImm`` node."""
        return self.const(node.dtype, float(node.value))

    def expr_StringImm(self, node: Any):
        """LLVM value of a TIR ``StringImm`` node."""
        return self.string_constant(node.value)

    def expr_Var(self, node: Any):
        """LLVM value of a TIR ``Var`` node."""
        try:
            return self.vars[id(node)]
        except KeyError:
            raise TVMError(f"LLVM codegen ({self.func_name}): variable {node.name!r} is used "
                           "but never defined") from None

    expr_SizeVar = expr_Var

    def expr_Cast(self, node: Any):
        """LLVM value of a TIR ``Cast`` node."""
        return self.convert(self.expr(node.value), DataType(node.value.dtype),
                             DataType(node.dtype))

    def convert(self, value, src: DataType, dst: DataType):
        """``value`` of dtype ``src`` converted to ``dst`` (TIR's Cast semantics)."""
        b = self.builder
        to = self.ltype(dst)
        if src.element_of == dst.element_of:
            return value
        if dst.is_bool:
            zero = self.ir.Constant(value.type, None)
            return (b.fcmp_unordered("!=", value, zero) if src.is_float
                    else b.icmp_unsigned("!=", value, zero))
        if src.is_float and dst.is_float:
            return b.fpext(value, to) if dst.bits > src.bits else b.fptrunc(value, to)
        if src.is_float:
            return b.fptoui(value, to) if dst.is_uint else b.fptosi(value, to)
        if dst.is_float:
            return (b.uitofp(value, to) if src.is_uint or src.is_bool
                    else b.sitofp(value, to))
        if dst.bits > src.bits:
            return b.zext(value, to) if src.is_uint or src.is_bool else b.sext(value, to)
        if dst.bits < src.bits:
            return b.trunc(value, to)
        return value

    def expr_Not(self, node: Any):
        """LLVM value of a TIR ``Not`` node."""
        return self.builder.not_(self.expr(node.a))

    def expr_Select(self, node: Any):
        """LLVM value of a TIR ``Select`` node."""
        cond = self.expr(node.condition)
        then, other = self.expr(node.true_value), self.expr(node.false_value)
        lanes = DataType(node.dtype).lanes
        if lanes > 1 and not isinstance(cond.type, self.ir.VectorType):
            cond = self._splat(cond, lanes)
        return self.builder.select(cond, then, other)

    def _splat(self, value, lanes: int):
        ir, b = self.ir, self.builder
        vec = b.insert_element(ir.Constant(ir.VectorType(value.type, lanes), None), value,
                               self.const("int32", 0))
        mask = ir.Constant(ir.VectorType(self.i32, lanes), [0] * lanes)
        return b.shuffle_vector(vec, ir.Constant(vec.type, None), mask)

    def expr_Broadcast(self, node: Any):
        """LLVM value of a TIR ``Broadcast`` node."""
        return self._splat(self.expr(node.value), node.lanes)

    def expr_Ramp(self, node: Any):
        """LLVM value of a TIR ``Ramp`` node."""
        ir, b = self.ir, self.builder
        base, stride = self.expr(node.base), self.expr(node.stride)
        steps = ir.Constant(ir.VectorType(base.type, node.lanes), list(range(node.lanes)))
        return b.add(self._splat(base, node.lanes), b.mul(steps, self._splat(stride, node.lanes)))

    def expr_Let(self, node: Any):
        """LLVM value of a TIR ``Let`` node."""
        self.vars[id(node.var)] = self.expr(node.value)
        return self.expr(node.body)

    def expr_Shuffle(self, node: Any):
        """LLVM value of a TIR ``Shuffle`` node."""
        b = self.builder
        lanes = []
        for vec in node.vectors:
            value = self.expr(vec)
            count = DataType(vec.dtype).lanes
            lanes.extend([b.extract_element(value, self.const("int32", i)) for i in range(count)]
                         if count > 1 else [value])
        picked = [lanes[int(i.value)] for i in node.indices]
        if len(picked) == 1:
            return picked[0]
        out = self.ir.Constant(self.ltype(node.dtype), None)
        for index, value in enumerate(picked):
            out = b.insert_element(out, value, self.const("int32", index))
        return out

    # -- memory ----------------------------------------------------------------------------
    def element_pointer(self, buffer: Any):
        """A pointer to the first element of ``buffer``, typed as its elements."""
        ptr = self.expr_Var(buffer.data)
        want = self.ltype(buffer.dtype, storage=True).as_pointer()
        return ptr if ptr.type == want else self.builder.bitcast(ptr, want)

    def _strides(self, buffer: Any) -> list:
        if buffer.strides:
            return [self.as_i64(self.expr(s), s.dtype) for s in buffer.strides]
        strides, running = [], self.ir.Constant(self.i64, 1)
        for dim in reversed(list(buffer.shape)):
            strides.append(running)
            running = self.builder.mul(running, self.as_i64(self.expr(dim), dim.dtype))
        return strides[::-1]

    def as_i64(self, value, dtype: Any):
        """An integer ``value`` of ``dtype`` widened (or kept) to i64, for addressing."""
        t = DataType(dtype)
        if t.bits == 64:
            return value
        return self.builder.zext(value, self.i64) if t.is_uint else \
            self.builder.sext(value, self.i64)

    def lane_offsets(self, buffer: Any, indices: Sequence[Any], lanes: int):
        """(scalar base offset, contiguous?) or per-lane offsets for a buffer access."""
        b = self.builder
        indices = list(indices)
        strides = self._strides(buffer) if len(indices) > 1 or buffer.strides else \
            [self.ir.Constant(self.i64, 1)]
        offset_expr = buffer.elem_offset
        extra = None
        if offset_expr is not None and not (_node_name(offset_expr) == "IntImm"
                                            and offset_expr.value == 0):
            extra = self.as_i64(self.expr(offset_expr), offset_expr.dtype)
        contiguous = _contiguous_access(buffer, indices, lanes)
        if lanes == 1 or contiguous:
            total = extra
            for index, stride in zip(indices, strides):
                kind = _node_name(index)
                scalar = index.base if kind == "Ramp" else (
                    index.value if kind == "Broadcast" else index)
                term = b.mul(self.as_i64(self.expr(scalar), scalar.dtype), stride)
                total = term if total is None else b.add(total, term)
            return total if total is not None else self.ir.Constant(self.i64, 0), True
        values = [(self.expr(i), DataType(i.dtype)) for i in indices]
        per_lane = []
        for lane in range(lanes):
            total = extra
            for (value, t), stride in zip(values, strides):
                elem = (b.extract_element(value, self.const("int32", lane)) if t.lanes > 1
                        else value)
                term = b.mul(self.as_i64(elem, t.element_of), stride)
                total = term if total is None else b.add(total, term)
            per_lane.append(total)
        return per_lane, False

    def expr_BufferLoad(self, node: Any):
        """LLVM value of a TIR ``BufferLoad`` node."""
        b = self.builder
        ptr = self.element_pointer(node.buffer)
        t = DataType(node.dtype)
        offsets, contiguous = self.lane_offsets(node.buffer, node.indices, t.lanes)
        align = max(DataType(node.buffer.dtype).itemsize, 1)
        if contiguous:
            address = b.gep(ptr, [offsets], inbounds=True)
            if t.lanes > 1:
                vec_ptr = b.bitcast(address, self.ltype(t, storage=True).as_pointer())
                return self.from_storage(b.load(vec_ptr, align=align), t)
            return self.from_storage(b.load(address, align=align), t)
        out = self.ir.Constant(self.ltype(t, storage=True), None)
        for lane, offset in enumerate(offsets):
            elem = b.load(b.gep(ptr, [offset], inbounds=True), align=align)
            out = b.insert_element(out, elem, self.const("int32", lane))
        return self.from_storage(out, t)

    def from_storage(self, value, t: DataType):
        """A loaded value as dtype ``t`` (bools are stored as bytes)."""
        if not t.is_bool:
            return value
        return self.builder.icmp_unsigned("!=", value, self.ir.Constant(value.type, None))

    def _to_storage(self, value, t: DataType):
        if not t.is_bool:
            return value
        return self.builder.zext(value, self.ltype(t, storage=True))

    def stmt_BufferStore(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``BufferStore`` statement."""
        b = self.builder
        ptr = self.element_pointer(node.buffer)
        t = DataType(node.value.dtype)
        value = self._to_storage(self.expr(node.value), t)
        offsets, contiguous = self.lane_offsets(node.buffer, node.indices, t.lanes)
        align = max(DataType(node.buffer.dtype).itemsize, 1)
        if contiguous:
            address = b.gep(ptr, [offsets], inbounds=True)
            if t.lanes > 1:
                address = b.bitcast(address, self.ltype(t, storage=True).as_pointer())
            b.store(value, address, align=align)
            return
        for lane, offset in enumerate(offsets):
            elem = b.extract_element(value, self.const("int32", lane))
            b.store(elem, b.gep(ptr, [offset], inbounds=True), align=align)

    # -- calls -----------------------------------------------------------------------------


    # -- statements ------------------------------------------------------------------------
    def emit_stmt(self, node: Any) -> None:
        """Emit a TIR statement at the builder's position."""
        if self.builder.block.is_terminated:
            # Code after a return (e.g. after a failed assert) needs a fresh block to live in.
            self.builder.position_at_end(self.function.append_basic_block("dead"))
        kind = _node_name(node)
        method = getattr(self, f"stmt_{kind}", None)
        if method is None:
            raise TVMError(f"LLVM codegen: no rule for TIR statement node {kind}")
        method(node)

    def stmt_SeqStmt(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``SeqStmt`` statement."""
        for stmt in node.seq:
            self.emit_stmt(stmt)

    def stmt_Evaluate(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``Evaluate`` statement."""
        if _node_name(node.value) in ("IntImm", "FloatImm"):
            return
        if _node_name(node.value) == "Call" and node.value.op == "tir.ret":
            if self._in_parallel:
                raise TVMError("LLVM codegen: tir.ret inside a parallel loop (a task cannot "
                               "return from the kernel)")
            self.builder.ret(self.expr(node.value.args[0]))
            # what follows the return is unreachable, but emitted into a block of its own
            self.builder.position_at_end(self.function.append_basic_block("after_ret"))
            return
        value = self.expr(node.value)
        if _node_name(node.value) == "Call" and node.value.op == "tir.tvm_call_packed":
            fail = self.function.append_basic_block("packed_fail")
            ok = self.function.append_basic_block("packed_ok")
            self.builder.cbranch(self.builder.icmp_signed("!=", value, self.const("int32", 0)),
                                 fail, ok)
            self.builder.position_at_end(fail)
            self.builder.ret(self.const("int32", -1))
            self.builder.position_at_end(ok)

    def stmt_LetStmt(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``LetStmt`` statement."""
        self.vars[id(node.var)] = self.expr(node.value)
        self.emit_stmt(node.body)

    def stmt_DeclBuffer(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``DeclBuffer`` statement."""
        self.emit_stmt(node.body)

    def stmt_AttrStmt(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``AttrStmt`` statement."""
        if node.attr_key == "pragma_import_c" and node.value.value not in self.imported_c:
            self.imported_c.append(node.value.value)
        self.emit_stmt(node.body)

    def stmt_AssertStmt(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``AssertStmt`` statement."""
        b = self.builder
        fail = self.function.append_basic_block("assert_fail")
        ok = self.function.append_basic_block("assert_ok")
        b.cbranch(self.expr(node.condition), ok, fail)
        b.position_at_end(fail)
        self._return_error(c_abi.assert_message(node, self.func_name))
        b.position_at_end(ok)
        self.emit_stmt(node.body)

    def stmt_IfThenElse(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``IfThenElse`` statement."""
        b = self.builder
        then_block = self.function.append_basic_block("then")
        else_block = self.function.append_basic_block("else") if node.else_case else None
        done = self.function.append_basic_block("endif")
        b.cbranch(self.expr(node.condition), then_block, else_block or done)
        b.position_at_end(then_block)
        self.emit_stmt(node.then_case)
        if not b.block.is_terminated:
            b.branch(done)
        if else_block is not None:
            b.position_at_end(else_block)
            self.emit_stmt(node.else_case)
            if not b.block.is_terminated:
                b.branch(done)
        b.position_at_end(done)

    def stmt_While(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``While`` statement."""
        b = self.builder
        head = self.function.append_basic_block("while_head")
        body = self.function.append_basic_block("while_body")
        done = self.function.append_basic_block("while_done")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(self.expr(node.condition), body, done)
        b.position_at_end(body)
        self.emit_stmt(node.body)
        if not b.block.is_terminated:
            b.branch(head)
        b.position_at_end(done)

    def stmt_For(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``For`` statement."""
        kind = int(node.kind)
        extent = node.extent
        if kind == 1 and not self._in_parallel:
            self._parallel_for(node)
            return
        if kind == 3 and _node_name(extent) == "IntImm" and extent.value <= self.unroll_limit:
            begin = self._loop_bound(node, node.min)
            for step in range(int(extent.value)):
                self.vars[id(node.loop_var)] = self.builder.add(
                    begin, self.ir.Constant(begin.type, step))
                self.emit_stmt(node.body)
            return
        self._serial_loop(node.loop_var, self._loop_bound(node, node.min),
                          self._loop_bound(node, extent), node.body,
                          unroll=self._unroll_option(node) if self.mark_loops else None)

    def _unroll_option(self, node: Any) -> str | None:
        """What LLVM's loop unroller may do with a serial loop. TIR's schedules already
        unrolled and vectorized what they meant to, and LLVM's heuristics on the rest
        multiplied code size and compile time for no run time (ResNet-18 LLVM CPU -25%,
        MobileNet -35% without them), so: an innermost loop of a few constant iterations
        is unrolled fully (its accumulators then live in registers), and so is a small nest
        of constant loops: a pool's 3x3 window left rolled kept the output loop around it
        from being vectorized (LLVM vectorizes innermost loops only; a uint8 max pool ran
        scalar, its max as unpredictable branches: 19x the ``c`` target's time); a loop
        whose variable a branch tests (padding borders) keeps LLVM's heuristics, whose
        peeling takes the border iterations out of the loop (3x on a padded copy); any other
        is left alone. The size counts a gather lane by lane (:func:`_unrolled_size`): a
        dense's 10-row strided weight pack, 10 copies of a 16-lane gather, cost LLVM 150 ms
        unrolled and 47 ms not, at the same run time."""
        extent = node.extent
        if _node_name(extent) == "IntImm" and 0 < extent.value <= 64:
            size = _unrolled_size(node.body, self.llvm_unroll_budget // int(extent.value))
            if size is not None:
                return "llvm.loop.unroll.full"
        if id(node.loop_var) in self._tested_vars:
            return None
        return "llvm.loop.unroll.disable"

    def _loop_bound(self, node: Any, expr: Any):
        """A loop bound in the loop variable's type (min/extent may be narrower or wider)."""
        return self.convert(self.expr(expr), DataType(expr.dtype), DataType(node.loop_var.dtype))

    def _serial_loop(self, loop_var: Any, begin, extent, body: Any, offset=None,
                     unroll: str | None = None) -> None:
        """``for (v = begin; v < begin + extent; ++v)`` with a phi induction variable;
        ``unroll`` is the loop's unroll option for LLVM (``llvm.loop.unroll.full``...)."""
        b = self.builder
        end = b.add(begin, extent)
        pre = b.block
        head = self.function.append_basic_block(f"for_{loop_var.name}")
        body_block = self.function.append_basic_block(f"for_{loop_var.name}_body")
        done = self.function.append_basic_block(f"for_{loop_var.name}_end")
        b.branch(head)
        b.position_at_end(head)
        index = b.phi(begin.type, name=loop_var.name)
        index.add_incoming(begin, pre)
        b.cbranch(b.icmp_signed("<", index, end), body_block, done)
        b.position_at_end(body_block)
        self.vars[id(loop_var)] = index if offset is None else b.add(index, offset)
        self.emit_stmt(body)
        if not b.block.is_terminated:
            index.add_incoming(b.add(index, self.ir.Constant(index.type, 1)), b.block)
            back_edge = b.branch(head)
            if unroll:
                back_edge.set_metadata("llvm.loop", self._loop_id(unroll))
        b.position_at_end(done)

    def _loop_id(self, *options: str):
        """A loop's ``!llvm.loop`` node: LLVM reads options only from a node whose first
        operand is the node itself, so each loop gets its own (add_metadata would share)."""
        ir, module = self.ir, self.module
        values = [module.add_metadata([ir.MetaDataString(module, option)]) for option in options]
        loop_id = ir.values.MDValue(module, [], name=str(len(module.metadata)))
        loop_id.operands = (loop_id, *values)
        return loop_id

    def _parallel_for(self, node: Any) -> None:
        """Outline the loop body into ``int lambda(task_id, penv, cdata)`` and launch it.

        The closure holds the captured values, the loop's min and extent and a shared counter:
        every thread of the team (the caller included) claims the next contiguous chunk of
        ``ceil(extent / (CHUNKS_PER_THREAD * num_task))`` iterations with an atomic add until
        none is left, so a descheduled thread holds back only its current chunk (the C
        codegen's lambdas use the same scheme). A chunk runs in a function of its own whose buffer
        parameters keep the enclosing function's ``noalias``: loaded from the closure they
        would lose it, and LLVM could then neither vectorize nor hoist loads past the
        output's stores (a conv's scalar bias epilogue ran 3x slower in the lambda)."""
        ir, b = self.ir, self.builder
        outer = {key for key, value in self.vars.items() if not isinstance(value, ir.Constant)}
        used = _used_var_ids(node, outer)
        captured = [(key, value) for key, value in self.vars.items() if key in used]
        begin, extent = self._loop_bound(node, node.min), self._loop_bound(node, node.extent)
        counter_start = ir.Constant(extent.type, 0)
        closure_t = ir.LiteralStructType([v.type for _, v in captured] + [begin.type,
                                                                          extent.type,
                                                                          extent.type])
        closure = self.alloca_builder.alloca(closure_t, name="closure")
        for index, value in enumerate([v for _, v in captured] + [begin, extent,
                                                                  counter_start]):
            b.store(value, b.gep(closure, [self.const("int32", 0), self.const("int32", index)],
                                 inbounds=True))
        self._lambda_count += 1
        name = f"{self.func_name}_compute_{self._lambda_count}"
        saved = (self.builder, self.function, self.alloca_builder, dict(self.vars))
        chunk_fn = self._chunk_function(node, captured, begin.type, f"{name}_chunk")
        penv_t = ir.LiteralStructType([self.void_ptr, self.i32])
        lambda_t = ir.FunctionType(self.i32, [self.i32, penv_t.as_pointer(), self.void_ptr])
        fn = ir.Function(self.module, lambda_t, name)
        fn.linkage = "internal"
        self._enter_function(fn)
        lb = self.builder
        _, penv, cdata = fn.args
        frame = lb.bitcast(cdata, closure_t.as_pointer())
        slots = [lb.gep(frame, [self.const("int32", 0), self.const("int32", i)], inbounds=True)
                 for i in range(len(captured) + 3)]
        fields = [lb.load(slot) for slot in slots[:-1]]
        lo, count, counter = fields[-2], fields[-1], slots[-1]
        num_task = lb.load(lb.gep(penv, [self.const("int32", 0), self.const("int32", 1)],
                                  inbounds=True))
        if count.type.width != 32:
            widen = count.type.width > 32
            num_task = (lb.sext if widen else lb.trunc)(num_task, count.type)
        one = ir.Constant(count.type, 1)
        parts = lb.mul(num_task, ir.Constant(count.type, CHUNKS_PER_THREAD))
        chunk = lb.sdiv(lb.sub(lb.add(count, parts), one), parts)
        chunk = lb.select(lb.icmp_signed("<", chunk, one), one, chunk)
        claim = fn.append_basic_block("claim_chunk")
        run = fn.append_basic_block("run_chunk")
        finished = fn.append_basic_block("chunks_done")
        failed = fn.append_basic_block("chunk_failed")
        lb.branch(claim)
        lb.position_at_end(claim)
        start = lb.atomic_rmw("add", counter, chunk, "monotonic")
        lb.cbranch(lb.icmp_signed("<", start, count), run, finished)
        lb.position_at_end(run)
        left = lb.sub(count, start)
        length = lb.select(lb.icmp_signed("<", left, chunk), left, chunk)
        rc = lb.call(chunk_fn, [*fields[:-2], lo, start, length])
        lb.cbranch(lb.icmp_signed("!=", rc, self.const("int32", 0)), failed, claim)
        lb.position_at_end(failed)
        lb.ret(rc)
        lb.position_at_end(finished)
        lb.ret(self.const("int32", 0))
        self.builder, self.function, self.alloca_builder, self.vars = saved
        b = self.builder
        launch = self.declare("TVMBackendParallelLaunch", self.i32,
                               [lambda_t.as_pointer(), self.void_ptr, self.i32])
        rc = b.call(launch, [fn, b.bitcast(closure, self.void_ptr), self.const("int32", 0)])
        fail = self.function.append_basic_block("launch_fail")
        ok = self.function.append_basic_block("launch_ok")
        b.cbranch(b.icmp_signed("!=", rc, self.const("int32", 0)), fail, ok)
        b.position_at_end(fail)
        b.ret(self.const("int32", -1))
        b.position_at_end(ok)

    def _chunk_function(self, node: Any, captured: list, index_type: Any, name: str):
        """``i32 name(captured..., lo, start, length)``: iterations ``[start, start + length)``
        of ``node`` (offset by ``lo``). A captured pointer that is ``noalias`` where it comes
        from stays ``noalias`` here."""
        ir = self.ir
        fn_t = ir.FunctionType(self.i32, [v.type for _, v in captured] + [index_type] * 3)
        fn = ir.Function(self.module, fn_t, name)
        fn.linkage = "internal"
        for arg, (_, value) in zip(fn.args, captured):
            if isinstance(value, ir.Argument) and "noalias" in value.attributes:
                arg.add_attribute("noalias")
        self.vars = {key: arg for (key, _), arg in zip(captured, fn.args)}
        self._enter_function(fn)
        self._in_parallel = True
        lo, start, length = fn.args[-3:]
        self._serial_loop(node.loop_var, start, length, node.body, offset=lo)
        if not self.builder.block.is_terminated:
            self.builder.ret(self.const("int32", 0))
        self._in_parallel = False
        return fn

    def stmt_Allocate(self, node: Any) -> None:
        """Emit the LLVM instructions of a TIR ``Allocate`` statement."""
        ir, b = self.ir, self.builder
        t = DataType(node.dtype)
        elem = self.ltype(t.element_of, storage=True)
        constant = all(_node_name(e) == "IntImm" for e in node.extents)
        count = math.prod(int(e.value) for e in node.extents) * t.lanes if constant else None
        if constant and count * t.element_of.itemsize <= self.workspace_threshold:
            array = self.alloca_builder.alloca(ir.ArrayType(elem, max(count, 1)),
                                                name=node.buffer_var.name)
            array.align = 64
            self.vars[id(node.buffer_var)] = b.bitcast(array, elem.as_pointer())
            self.emit_stmt(node.body)
            return
        if constant:
            nbytes = ir.Constant(self.i64, count * t.element_of.itemsize)
        else:
            nbytes = ir.Constant(self.i64, t.element_of.itemsize * t.lanes)
            for extent in node.extents:
                nbytes = b.mul(nbytes, self.as_i64(self.expr(extent), extent.dtype))
        alloc = self.declare("TVMBackendAllocWorkspace", self.void_ptr,
                              [self.i32, self.i32, self.i64, self.i32, self.i32])
        free = self.declare("TVMBackendFreeWorkspace", self.i32,
                             [self.i32, self.i32, self.void_ptr])
        raw = b.call(alloc, [self.const("int32", 1), self.const("int32", 0), nbytes,
                             self.const("int32", int(t.type_code)),
                             self.const("int32", t.bits)])
        fail = self.function.append_basic_block("alloc_fail")
        ok = self.function.append_basic_block("alloc_ok")
        b.cbranch(b.icmp_unsigned("==", raw, ir.Constant(self.void_ptr, None)), fail, ok)
        b.position_at_end(fail)
        b.ret(self.const("int32", -1))
        b.position_at_end(ok)
        self.vars[id(node.buffer_var)] = b.bitcast(raw, elem.as_pointer())
        self.emit_stmt(node.body)
        if not self.builder.block.is_terminated:
            self.builder.call(free, [self.const("int32", 1), self.const("int32", 0), raw])

    def stmt_BufferRealize(self, node: Any) -> None:
        """Reject: a BufferRealize must be flattened before codegen."""
        raise TVMError("LLVM codegen: BufferRealize must be flattened before code generation")

    def expr_ProducerLoad(self, node: Any):
        """Reject: a te.Tensor read must be lowered before codegen."""
        raise TVMError("LLVM codegen: ProducerLoad (a te.Tensor read) must be lowered first")

    def expr_Reduce(self, node: Any):
        """Reject: a Reduce must be lowered to loops before codegen."""
        raise TVMError("LLVM codegen: Reduce must be lowered to loops before code generation")


def emit_llvm(mod: Any, target: Any = None):
    """Generate, verify and optimize (O3) LLVM for every PrimFunc of ``mod``.

    Returns ``(codegen, optimized llvmlite ModuleRef, TargetMachine)``.
    """
    cg, tm = _generate(mod, target)
    return cg, parse_and_optimize(cg.module, tm, target), tm


def _generate(mod: Any, target: Any):
    """``(codegen holding the unoptimized module, TargetMachine)`` for ``mod``."""
    cg = CodeGenLLVM()
    for symbol, func in c_abi.functions_of(mod):
        cg.add_function(func, symbol)
    tm = host_target_machine(target)
    cg.module.triple = tm.triple
    cg.module.data_layout = str(tm.target_data)
    return cg, tm
