"""TIR -> C source, and the ``c`` target's build function.

Entry points: :class:`CodeGenC` (the emitter: one base class with dialect settings and
op -> format tables), :func:`emit_c` (PrimFuncs -> one translation unit), :func:`build_c`
(``target.build.c``). The bare-metal dialect (no OpenMP, no heap) is the subclass
:class:`~kiln.target.codegen_c_baremetal.CodeGenCBareMetal`; buffer indexing is
:mod:`kiln.target.c_access`.

Every PrimFunc ``f`` becomes two C functions:

* ``int32_t f_unpacked(float* restrict A, ..., int32_t n)`` -- the loop nest, taking the data
  pointers of its buffers (inputs then outputs) and then its symbolic shape variables; AOT and
  bare-metal callers use it directly;
* ``int32_t f(TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value,
  int* out_ret_tcode, void* resource_handle)`` -- TVM's packed kernel ABI, written by
  :mod:`kiln.target.c_abi`: it checks every argument (naming it in the error) and calls the
  unpacked twin. A PrimFunc already in packed form (MakePackedAPI output) is emitted as is.

The emitter dispatches on the TIR node's class name through :data:`BINARY_FORMATS` and one
``expr_<Node>`` / ``stmt_<Node>`` method per structural node; calls go through
:mod:`kiln.target.c_intrinsics` (:data:`UNARY_MATH`, :data:`INTRINSIC_FORMATS`,
``call_<intrinsic>``). A node with no rule raises a TVMError naming it.

Speed comes from what gcc can see: ``restrict`` buffer pointers; vector dtypes as GCC vector
types (unaligned-load typedefs for buffers); small local buffers accessed only by whole
vectors become arrays of vectors, which gcc keeps in registers (a GEMM accumulator tile);
lane-wise operations C vectors lack go through plain arrays, which gcc re-vectorizes (vector
min/max/select are mask blends); float32 ``exp`` is ``kiln_expf``, an inlinable polynomial
(1 ulp) instead of libm's opaque call.

The printer decides nothing about safety or vector widths: it prints what the C-family TIR
pipeline (:func:`kiln.tir.transform.codegen_prep.c_codegen_pipeline` for the target's vector
width, applied by :func:`emit_c`) leaves.
A per-lane ``if_then_else`` arrives as a ``Select`` whose loads that may fault are
``tir.masked_load`` calls (``tir.MaskFaultingLanes``), printed as masked loads or a guarded
lane loop (:mod:`kiln.target.codegen_c_masked`); vectors wider than a register of the target
(AVX2, or AVX-512 where the target has it: :func:`native_vector_bits`) arrive as native-width
parts (``tir.SplitWideVectors``: GCC lowers wider generic vectors through the
stack); a vector load shared by a run of stores arrives bound to a ``LetStmt``
(``tir.ShareVectorLoads``), which the printer pins in a register; loading arms of a scalar
choice that cannot fault arrive bound before the ``?:`` (``tir.HoistSafeArmLoads``: GCC 12.2
miscompiles the masked loads it would otherwise make). A bool vector is its bytes (``int8xN``
holding 0/1; GCC vector lanes must be whole integers); a select blends on a mask as wide as
the value's lanes (:meth:`CodeGenC.lane_mask` widens or narrows comparison masks).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime.cc import compiler_accepts
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.registry import register_func
from kiln.target.c_abi import (
    C_RESERVED,
    MODULE_CTX,
    PACKED_CALLING_CONV,
    PACKED_PARAM_TYPES,
    PRELUDE_HELPERS,
    assert_message,
    c_function_identifier,
    c_string,
    c_type,
    entry_symbol,
    float_suffix,
    function_signature,
    functions_of,
    is_const_int,
    node_name,
    packed_declaration,
    packed_glue,
    packed_wrapper,
    preamble,
    system_lib_registration,
)
from kiln.target.c_access import flat_access, uniform_vector_lanes
from kiln.target.c_intrinsics import INTRINSIC_FORMATS, UNARY_MATH, CIntrinsics
from kiln.target.c_parallel import CParallelLaunch
from kiln.target.codegen_c_masked import CLaneMasks
from kiln.target.codegen_c_vectors import (
    COMPARISONS,
    VECTOR_MASK_BINARY,
    VECTOR_MIN_MAX,
    fits_vector_register,
)
from kiln.target.x86 import gcc_arch_options
from kiln.tir.transform.codegen_prep import c_codegen_pipeline

__all__ = [
    "CodeGenC",
    "BINARY_FORMATS",
    "UNARY_MATH",
    "INTRINSIC_FORMATS",
    "emit_c",
    "build_c",
    "c_type",
    "function_signature",
    "packed_glue",
]

# -- tables -----------------------------------------------------------------------------------


# Two-operand nodes. "int"/"float" entries are picked by the operands' type code.
BINARY_FORMATS: dict[str, str | dict[str, str]] = {
    "Add": "({a} + {b})",
    "Sub": "({a} - {b})",
    "Mul": "({a} * {b})",
    "Div": "({a} / {b})",
    "Mod": {"int": "({a} % {b})", "float": "fmod{f}({a}, {b})"},
    "FloorDiv": {"int": "kiln_floordiv_{bits}({a}, {b})", "float": "floor{f}({a} / {b})"},
    "FloorMod": {"int": "kiln_floormod_{bits}({a}, {b})",
                 "float": "({a} - floor{f}({a} / {b}) * {b})"},
    "Min": "({a} < {b} ? {a} : {b})",
    "Max": "({a} > {b} ? {a} : {b})",
    "EQ": "({a} == {b})",
    "NE": "({a} != {b})",
    "LT": "({a} < {b})",
    "LE": "({a} <= {b})",
    "GT": "({a} > {b})",
    "GE": "({a} >= {b})",
    "And": "({a} && {b})",
    "Or": "({a} || {b})",
}
# Binary nodes that GCC's vector extensions do directly on whole vectors (C semantics per lane).
_NATIVE_VECTOR_BINARY = {"Add", "Sub", "Mul", "Div", "EQ", "NE", "LT", "LE", "GT", "GE"}

# -- the emitter -------------------------------------------------------------------------------


class CodeGenC(CLaneMasks, CIntrinsics, CParallelLaunch):
    """TIR PrimFuncs -> one C translation unit with packed and unpacked entry points.

    Dialect settings (class attributes) are what subclasses change:

    ``use_thread_pool``
        run parallel loops on the runtime's thread pool: outlined into lambdas launched with
        ``TVMBackendParallelLaunch`` (:mod:`kiln.target.c_parallel`), else serially;
    ``workspace_threshold``
        constant-size allocations up to this many bytes live on the stack (64-byte aligned),
        bigger or symbolic ones come from ``TVMBackendAllocWorkspace``;
    ``emit_packed``
        also emit the packed-ABI wrapper of every function.

    Example
    -------
    >>> from kiln import tir
    >>> A = tir.decl_buffer((16,), "float32", name="A")
    >>> B = tir.decl_buffer((16,), "float32", name="B")
    >>> i = tir.Var("i", "int32")
    >>> body = tir.For(i, 0, 16, tir.ForKind.SERIAL, tir.BufferStore(B, A[i] * 2.0, [i]))
    >>> cg = CodeGenC()
    >>> cg.add_function(tir.PrimFunc([A, B], body), "double_it")
    >>> "int32_t double_it_unpacked(float* restrict A, float* restrict B)" in cg.finish()
    True
    """

    use_thread_pool = True
    workspace_threshold = 16384
    emit_packed = True
    restrict = "restrict"

    def __init__(self, system_lib: bool = False, vector_bits: int = 256) -> None:
        self.system_lib = system_lib
        # bits of the target's vector registers: wider vectors arrive split in parts this
        # wide (tir.SplitWideVectors), and a vector this wide can be pinned in a register
        self.vector_bits = vector_bits
        self._functions: list[str] = []
        self._imported_c: list[str] = []
        self.declarations: dict[str, str] = {}
        self._lines: list[str] = []
        self._indent = 0
        self._names: dict[int, str] = {}
        self._used_names: set[str] = set()
        self._parallel_depth = 0
        self._region_failure: tuple[str, str] | None = None  # (message slot, end label)
        self.func_name = ""
        self.vector_locals: dict[int, int] = {}  # id(buffer var) -> lanes of its vector array
        self._pointer_types: dict[int, str] = {}  # id(handle var) -> its declared C type
        self.uses_module_ctx = False  # tvm_call_packed needs __tvm_module_ctx
        self._vector_lanes_of: dict[int, int] = {}  # id(buffer var) -> lanes (see Allocate)
        self.function_names: list[str] = []

    # -- public ----------------------------------------------------------------------------
    def add_function(self, func: Any, name: str | None = None, comment: str = "") -> None:
        """Emit ``name_unpacked`` (and the packed ``name``) for one PrimFunc."""
        name = name or func.attrs.get("global_symbol") or "default_function"
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise TVMError(f"C codegen: {name!r} is not a valid C function name (use letters, "
                           "digits and '_')")
        self.func_name = name
        self._names, self._used_names, self._pointer_types = {}, set(), {}
        self._lines, self._indent = [], 0
        self._vector_lanes_of = uniform_vector_lanes(func.body)
        if comment:
            self._lines.append("/* " + comment.replace("*/", "* /") + " */")
        if func.attrs.get("calling_conv") == PACKED_CALLING_CONV:
            self._add_packed_form(func, name)
            return
        signature = function_signature(func)
        for buf in signature.buffers:
            self._pointer_types[id(buf.data)] = f"{c_type(buf.dtype)}*"
        params = [
            f"{c_type(buf.dtype)}* {self.restrict} {self._bind(buf.data, buf.name)}"
            for buf in signature.buffers
        ] + [f"{c_type(var.dtype)} {self._bind(var)}" for var in signature.scalars]
        self._functions.append(self._unpacked_definition(func, name, f"{name}_unpacked",
                                                         params))
        if self.emit_packed:
            self._functions.append(packed_wrapper(name, signature))
        self.function_names.append(name)

    def _unpacked_definition(self, func: Any, name: str, symbol: str, params: list[str]) -> str:
        """The C text of ``symbol`` (``<name>_unpacked``): the loop nest over the buffers'
        pointers."""
        self._lines.append(f"int32_t {symbol}({', '.join(params) or 'void'}) {{")
        self._indent = 1
        self.emit_stmt(func.body)
        self._line("return 0;")
        self._lines.append("}")
        return "\n".join(self._lines)

    def _add_packed_form(self, func: Any, name: str) -> None:
        """A PrimFunc already in packed form (after MakePackedAPI): emit it as it is."""
        if len(func.params) != len(PACKED_PARAM_TYPES):
            raise TVMError(f"C codegen: packed function {name} must take the 6 packed params")
        params = []
        for var, ctype in zip(func.params, PACKED_PARAM_TYPES):
            params.append(f"{ctype} {self._bind(var)}")
            self._pointer_types[id(var)] = ctype
        self._lines.append(packed_declaration(name))
        self._lines.append(f"int32_t {c_function_identifier(name)}({', '.join(params)}) {{")
        self._indent = 1
        self.emit_stmt(func.body)
        self._line("return 0;")
        self._lines.append("}")
        self._functions.append("\n".join(self._lines))
        self.function_names.append(name)

    @property
    def kernel_chars(self) -> int:
        """Characters of function text emitted so far (what gcc compiles beyond the fixed
        preamble and the imported C)."""
        return sum(map(len, self._functions))

    def absorb(self, other: CodeGenC) -> None:
        """Take ``other``'s functions into this unit (several units saved as one file: each
        declaration, helper and imported source once)."""
        self.declarations.update(other.declarations)
        self._imported_c += [s for s in other._imported_c if s not in self._imported_c]
        self._functions += other._functions
        self.function_names += other.function_names
        self.uses_module_ctx = self.uses_module_ctx or other.uses_module_ctx

    def finish(self, entry: bool = True) -> str:
        """The whole translation unit: includes, helpers, imported C, then the functions.

        ``entry``: define ``__tvm_main__`` (naming the first function); a library of several
        units defines it in its first one only."""
        parts = [preamble("c"), *self.declarations.values(), PRELUDE_HELPERS.strip()]
        if self.uses_module_ctx:
            parts.append(MODULE_CTX)
        parts.extend("/* imported by pragma import_c */\n" + src.strip()
                     for src in self._imported_c)
        parts.extend(self._functions)
        if entry:
            parts.append(entry_symbol(self.function_names))
        if self.system_lib:
            parts.append(system_lib_registration(self.function_names, self.uses_module_ctx))
        return "\n\n".join(parts) + "\n"

    # -- names -----------------------------------------------------------------------------
    def _bind(self, var: Any, hint: str | None = None) -> str:
        name = self._fresh(hint or var.name)
        self._names[id(var)] = name
        return name

    def _fresh(self, hint: str) -> str:
        """A C identifier based on ``hint`` that no other name of the function uses."""
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit() or base in C_RESERVED or base.startswith(("_", "kiln_")):
            base = "v_" + base
        name, suffix = base, 0
        while name in self._used_names:
            suffix += 1
            name = f"{base}_{suffix}"
        self._used_names.add(name)
        return name

    def var_name(self, var: Any) -> str:
        """The C name bound to a TIR variable (a parameter, loop variable or let)."""
        try:
            return self._names[id(var)]
        except KeyError:
            raise TVMError(
                f"C codegen ({self.func_name}): variable {var.name!r} is used but never "
                "defined (not a parameter, loop variable or let binding)"
            ) from None

    def _line(self, text: str) -> None:
        self._lines.append("  " * self._indent + text)

    # -- expressions -----------------------------------------------------------------------
    def expr(self, node: Any) -> str:
        """The C text of a PrimExpr."""
        kind = node_name(node)
        if kind in BINARY_FORMATS:
            return self._binary(node, kind)
        method = getattr(self, f"expr_{kind}", None)
        if method is None:
            raise TVMError(f"C codegen: no rule for TIR expression node {kind}")
        return method(node)

    def _binary(self, node: Any, kind: str) -> str:
        a_type = DataType(node.a.dtype)
        if a_type.lanes > 1 and kind in VECTOR_MASK_BINARY:
            return self._bool_bytes(node)
        a, b = self.expr(node.a), self.expr(node.b)
        if a_type.lanes > 1 and kind in VECTOR_MIN_MAX:
            return self._min_max(kind, DataType(node.dtype), a, b)
        if a_type.lanes > 1 and kind not in _NATIVE_VECTOR_BINARY:
            return self.per_lane(node.dtype, [node.a.dtype, node.b.dtype], [a, b],
                                  lambda x, y: self._binary_scalar(kind, a_type, x, y))
        return self._binary_scalar(kind, a_type, a, b)

    def _min_max(self, kind: str, dtype: DataType, a: str, b: str) -> str:
        vtype = self.vector_type(dtype)
        mask = f"_x {VECTOR_MIN_MAX[kind]} _y"
        return (f"({{ {vtype} _x = {a}; {vtype} _y = {b}; "
                f"{self._blend(dtype, mask, '_x', '_y')}; }})")

    @staticmethod
    def _binary_scalar(kind: str, a_type: DataType, a: str, b: str) -> str:
        rule = BINARY_FORMATS[kind]
        if isinstance(rule, dict):
            rule = rule["float" if a_type.is_float else "int"]
        bits = 64 if a_type.bits == 64 else 32
        return rule.format(a=a, b=b, f=float_suffix(a_type), bits=bits)

    def per_lane(self, dtype: Any, operand_types: Sequence[Any], operands: Sequence[str],
                  lane_rule) -> str:
        """A vector result computed lane by lane (for ops C vectors lack).

        The lanes go through plain arrays: gcc's loop vectorizer turns the lane loop back
        into vector code (e.g. an inlined ``kiln_expf``), which it does not do for
        subscripted vector variables.
        """
        result = DataType(dtype)
        lanes_count = result.lanes
        decls, lanes = [], []
        for index, (op_type, text) in enumerate(zip(operand_types, operands)):
            op_dtype = DataType(op_type)
            if op_dtype.lanes > 1 and op_dtype.is_bool:
                # a comparison's mask: GCC types it as an integer vector of the operands' width
                decls.append(f"__auto_type _v{index} = {text}; long long _a{index}"
                             f"[{lanes_count}]; for (int _l = 0; _l < {lanes_count}; ++_l) "
                             f"_a{index}[_l] = _v{index}[_l];")
                lanes.append(f"_a{index}[_l]")
            elif op_dtype.lanes > 1:
                op_c = self.vector_type(op_dtype)
                decls.append(f"{op_c} _v{index} = {text}; {c_type(op_dtype.element_of)} "
                             f"_a{index}[{lanes_count}]; __builtin_memcpy(_a{index}, &_v{index}, "
                             f"sizeof _a{index});")
                lanes.append(f"_a{index}[_l]")
            else:
                decls.append(f"{c_type(op_dtype)} _a{index} = {text};")
                lanes.append(f"_a{index}")
        body = lane_rule(*lanes)
        vtype = self.vector_type(result)
        return (f"({{ {' '.join(decls)} {c_type(result.element_of)} _o[{lanes_count}]; "
                f"for (int _l = 0; _l < {lanes_count}; ++_l) _o[_l] = {body}; "
                f"{vtype} _r; __builtin_memcpy(&_r, _o, sizeof _r); _r; }})")

    def vector_type(self, dtype: DataType) -> str:
        """Declare (once) and name the GCC vector type for a vector dtype."""
        if dtype.lanes == 1:
            return c_type(dtype)
        if dtype.is_bool:
            # GCC vector lanes must be whole integers: a bool vector is its bytes (0 or 1)
            return self.vector_type(DataType("int8").with_lanes(dtype.lanes))
        name = c_type(dtype)
        if name not in self.declarations:
            scalar = c_type(dtype.element_of)
            size = dtype.bits * dtype.lanes // 8
            if size & (size - 1):
                raise TVMError(f"C codegen: vector {dtype} is not a power-of-two size")
            elem = max(dtype.bits // 8, 1)
            self.declarations[name] = (
                f"typedef {scalar} {name} __attribute__((vector_size({size})));\n"
                f"typedef {scalar} {name}_u __attribute__((vector_size({size}), "
                f"aligned({elem})));"
            )
        return name

    def expr_IntImm(self, node: Any) -> str:
        """C text of a TIR ``IntImm`` node."""
        t = DataType(node.dtype)
        value = int(node.value)
        if t.is_bool:
            return "1" if value else "0"
        if t.bits == 64:
            if value == -(2**63):
                return "(-9223372036854775807LL - 1)"
            literal = f"{value}ULL" if t.is_uint else f"{value}LL"
            return f"(({c_type(t)}){literal})"
        if t.bits == 32 and value == -(2**31):
            return "(-2147483647 - 1)"
        literal = f"{value}U" if t.is_uint else str(value)
        if t.bits != 32:
            return f"(({c_type(t)}){literal})"
        return f"({literal})" if value < 0 else literal

    def expr_FloatImm(self, node: Any) -> str:
        """C text of a TIR ``FloatImm`` node."""
        t = DataType(node.dtype)
        value = float(node.value)
        suffix = "f" if t.bits == 32 else ""
        if math.isnan(value):
            return f"(({c_type(t)})NAN)"
        if math.isinf(value):
            return f"(({c_type(t)}){'-' if value < 0 else ''}INFINITY)"
        if t.bits == 32:
            value = float(np.float32(value))
        text = repr(value)
        if t.bits == 16:
            return f"((_Float16){text})"
        return f"({text}{suffix})" if value < 0 else f"{text}{suffix}"

    def expr_StringImm(self, node: Any) -> str:
        """C text of a TIR ``StringImm`` node."""
        return c_string(node.value)

    def expr_Var(self, node: Any) -> str:
        """C text of a TIR ``Var`` node."""
        return self.var_name(node)

    expr_SizeVar = expr_Var

    def expr_Cast(self, node: Any) -> str:
        """C text of a TIR ``Cast`` node."""
        target = DataType(node.dtype)
        if target.lanes > 1 and target.is_bool:
            source = DataType(node.value.dtype)
            if source.is_bool:
                return self.vector_value(node.value)
            zero = self.vector_type(source)
            mask = f"__builtin_convertvector({self.expr(node.value)} != ({zero}){{0}}, " \
                f"{self.vector_type(target)})"
            return f"(-{mask})"
        if target.lanes > 1:
            self.vector_type(DataType(node.value.dtype))
            return (f"__builtin_convertvector({self.vector_value(node.value)}, "
                    f"{self.vector_type(target)})")
        return f"(({c_type(target)}){self.expr(node.value)})"

    def expr_Not(self, node: Any) -> str:
        """C text of a TIR ``Not`` node."""
        if DataType(node.dtype).lanes > 1:
            return self._bool_bytes(node)
        return f"(!{self.expr(node.a)})"

    def _blend(self, dtype: Any, mask: str, then: str, other: str) -> str:
        """``mask ? then : other`` per lane of a GCC vector, as bit operations (C has no
        vector ``?:``). ``mask`` is a comparison of lanes as wide as ``dtype``'s (all ones or
        zero per lane); floats are blended through same-width integer vectors."""
        t = DataType(dtype)
        vtype = self.vector_type(t)
        itype = self.vector_type(DataType(f"int{max(t.bits, 8)}").with_lanes(t.lanes))
        return (f"({{ {itype} _m = {mask}; ({vtype})((_m & ({itype})({then})) | "
                f"(~_m & ({itype})({other}))); }})")

    def lane_mask(self, cond: Any, bits: int) -> str:
        """C text of an ``int<bits>`` vector that is all ones in the lanes where the vector
        bool ``cond`` holds and zero elsewhere: comparison masks are converted to the width,
        And/Or/Not combine masks bitwise, bool data (bytes 0/1) is compared with zero."""
        kind = node_name(cond)
        lanes = DataType(cond.dtype).lanes
        itype = self.vector_type(DataType(f"int{bits}").with_lanes(lanes))
        if kind in COMPARISONS and not DataType(cond.a.dtype).is_bool:
            text = self.expr(cond)
            if DataType(cond.a.dtype).bits == bits:
                return text
            return f"__builtin_convertvector({text}, {itype})"
        if kind in VECTOR_MASK_BINARY:
            return VECTOR_MASK_BINARY[kind].format(a=self.lane_mask(cond.a, bits),
                                                    b=self.lane_mask(cond.b, bits))
        if kind == "Not":
            return f"(~{self.lane_mask(cond.a, bits)})"
        # compare the bytes, then widen the byte mask (gcc: vpcmpeqb + vpmovsxbd)
        self.vector_type(DataType("int8").with_lanes(lanes))
        mask = f"({self.expr(cond)} != 0)"
        return mask if bits == 8 else f"__builtin_convertvector({mask}, {itype})"

    def _bool_bytes(self, node: Any) -> str:
        """A vector bool expression as the bytes a bool buffer holds (0 or 1 per lane)."""
        if node_name(node) in COMPARISONS or node_name(node) in VECTOR_MASK_BINARY \
                or node_name(node) == "Not":
            return f"(-{self.lane_mask(node, 8)})"
        return self.expr(node)

    def expr_Select(self, node: Any) -> str:
        """C text of a TIR ``Select`` node."""
        t = DataType(node.dtype)
        if t.lanes > 1:
            mask = self.lane_mask(node.condition, max(t.bits, 8))
            return self._blend(t, mask, self.vector_value(node.true_value),
                               self.vector_value(node.false_value))
        cond, then, other = (self.expr(x) for x in
                             (node.condition, node.true_value, node.false_value))
        return f"({cond} ? {then} : {other})"

    def vector_value(self, node: Any) -> str:
        """A vector operand as data: bool vectors as bytes, others as their expression."""
        return self._bool_bytes(node) if DataType(node.dtype).is_bool else self.expr(node)

    def expr_Ramp(self, node: Any) -> str:
        """C text of a TIR ``Ramp`` node."""
        t = DataType(node.dtype)
        name = self.vector_type(t)
        steps = ", ".join(str(i) for i in range(t.lanes))
        return f"((({name}){{{steps}}}) * {self.expr(node.stride)} + {self.expr(node.base)})"

    def expr_Broadcast(self, node: Any) -> str:
        """C text of a TIR ``Broadcast`` node."""
        t = DataType(node.dtype)
        name = self.vector_type(t)
        value = self.expr(node.value)
        lanes = ", ".join(["_b"] * t.lanes)
        return f"({{ {c_type(t.element_of)} _b = {value}; ({name}){{{lanes}}}; }})"

    def expr_Let(self, node: Any) -> str:
        """C text of a TIR ``Let`` node."""
        name = self._bind(node.var)
        value = self.vector_value(node.value)  # a bool vector as its bytes
        ctype = self.vector_type(DataType(node.var.dtype))
        return f"({{ {ctype} {name} = {value}; {self.expr(node.body)}; }})"

    def expr_Shuffle(self, node: Any) -> str:
        """C text of a TIR ``Shuffle`` node."""
        vectors = [self.vector_value(v) for v in node.vectors]  # bool vectors as bytes
        decls = []
        sources = []
        for index, (vec, text) in enumerate(zip(node.vectors, vectors)):
            decls.append(f"{self.vector_type(DataType(vec.dtype))} _s{index} = {text};")
            lanes = DataType(vec.dtype).lanes
            sources.extend(f"_s{index}[{lane}]" if lanes > 1 else f"_s{index}"
                           for lane in range(lanes))
        picked = ", ".join(sources[int(i.value)] for i in node.indices)
        t = DataType(node.dtype)
        if t.lanes == 1:
            return f"({{ {' '.join(decls)} {picked}; }})"
        return f"({{ {' '.join(decls)} ({self.vector_type(t)}){{{picked}}}; }})"

    def data_pointer(self, buffer: Any) -> str:
        """The buffer's data pointer, cast when its variable was declared with another type."""
        data = self.var_name(buffer.data)
        want = f"{c_type(buffer.dtype)}*"
        have = self._pointer_types.get(id(buffer.data), want)
        return data if have == want else f"(({want}){data})"

    def expr_BufferLoad(self, node: Any) -> str:
        """C text of a TIR ``BufferLoad`` node."""
        buffer = node.buffer
        data = self.data_pointer(buffer)
        access = flat_access(self, buffer, node.indices)
        lanes = DataType(node.dtype).lanes
        if lanes == 1:
            return f"{data}[{access.base}]"
        vtype = self.vector_type(DataType(node.dtype))
        if id(buffer.data) in self.vector_locals:
            return f"{data}[({access.base}) / {lanes}]"
        if access.contiguous:
            return f"(*({vtype}_u*)({data} + {access.base}))"
        index_vec = access.vector_index
        elems = ", ".join(f"{data}[_i[{lane}]]" for lane in range(lanes))
        itype = self.vector_type(DataType("int64").with_lanes(lanes))
        return (f"({{ {itype} _i = __builtin_convertvector({index_vec}, {itype}); "
                f"({vtype}){{{elems}}}; }})")

    def call_address_of(self, node: Any) -> str:
        """C text of ``tir.address_of``: the address of a buffer element."""
        load = node.args[0]
        access = flat_access(self, load.buffer, load.indices)
        return f"(&{self.var_name(load.buffer.data)}[{access.base}])"

    # -- statements ------------------------------------------------------------------------
    def emit_stmt(self, node: Any) -> None:
        """Append the C lines of a TIR statement."""
        kind = node_name(node)
        method = getattr(self, f"stmt_{kind}", None)
        if method is None:
            raise TVMError(f"C codegen: no rule for TIR statement node {kind}")
        method(node)

    def stmt_SeqStmt(self, node: Any) -> None:
        """Append the C lines of each statement of a TIR ``SeqStmt``, in order."""
        for stmt in node.seq:
            self.emit_stmt(stmt)

    def stmt_Evaluate(self, node: Any) -> None:
        """Append the C lines of a TIR ``Evaluate`` statement."""
        if node_name(node.value) in ("IntImm", "FloatImm"):
            return
        if (node_name(node.value) == "Call" and node.value.op == "tir.tvm_call_packed"
                and self._parallel_depth == 0):
            self._line(f"if ({self.expr(node.value)} != 0) return -1;")
            return
        if node_name(node.value) == "Call" and node.value.op == "tir.ret":
            if self._parallel_depth:
                raise TVMError("C codegen: tir.ret inside a parallel loop (a task cannot "
                               "return from the kernel)")
            self._line(f"return {self.expr(node.value.args[0])};")
            return
        self._line(f"{self.expr(node.value)};")

    def stmt_BufferStore(self, node: Any) -> None:
        """Append the C lines of a TIR ``BufferStore`` statement."""
        buffer = node.buffer
        data = self.data_pointer(buffer)
        lanes = DataType(node.value.dtype).lanes
        access = flat_access(self, buffer, node.indices)
        value = self.vector_value(node.value) if lanes > 1 else self.expr(node.value)
        if lanes == 1 and not access.vector_index:
            self._line(f"{data}[{access.base}] = {value};")
            return
        vtype = self.vector_type(DataType(buffer.dtype).with_lanes(lanes))
        if id(buffer.data) in self.vector_locals:
            self._line(f"{data}[({access.base}) / {lanes}] = {value};")
            return
        if access.contiguous:
            self._line(f"*({vtype}_u*)({data} + {access.base}) = {value};")
            return
        itype = self.vector_type(DataType("int64").with_lanes(lanes))
        self._line("{")
        self._line(f"  {itype} _i = __builtin_convertvector({access.vector_index}, {itype});")
        self._line(f"  {vtype} _v = {value};")
        for lane in range(lanes):
            self._line(f"  {data}[_i[{lane}]] = _v[{lane}];")
        self._line("}")

    def stmt_LetStmt(self, node: Any) -> None:
        """Append the C lines of a TIR ``LetStmt`` statement."""
        value = self.expr(node.value)
        t = DataType(node.var.dtype)
        ctype = self.vector_type(t) if t.lanes > 1 else c_type(t)
        if t.is_handle:
            ctype = _pointer_type(node.var)
        name = self._bind(node.var)
        if t.is_handle:
            self._pointer_types[id(node.var)] = ctype
        # a vector read once for a run of stores (tir.ShareVectorLoads) stays in a register:
        # gcc would otherwise re-read memory at every use
        pin = t.lanes > 1 and node_name(node.value) == "BufferLoad" and \
            fits_vector_register(ctype, self.vector_bits)
        self._line(f"{ctype} {name} = {value};" + (f" KILN_IN_REGISTER({name});" if pin else ""))
        self.emit_stmt(node.body)

    def stmt_AttrStmt(self, node: Any) -> None:
        """Append the C lines of a TIR ``AttrStmt`` statement."""
        key = node.attr_key
        if key == "pragma_import_c":
            source = node.value.value
            if source not in self._imported_c:
                self._imported_c.append(source)
        elif key.startswith("pragma_") or key in ("compute_scope", "realize_scope",
                                                  "storage_alignment", "storage_scope"):
            self._line(f"/* {key} */")
        self.emit_stmt(node.body)

    def stmt_AssertStmt(self, node: Any) -> None:
        """Append the C lines of a TIR ``AssertStmt`` statement."""
        message = assert_message(node, self.func_name)
        self._line(f"if (!({self.expr(node.condition)})) {{")
        self._indent += 1
        self._fail(c_string(message))
        self._indent -= 1
        self._line("}")
        self.emit_stmt(node.body)

    def _fail(self, message: str | None) -> None:
        """Return -1 with ``message`` (a C string literal; None: the callee set it).

        Inside a parallel loop's lambda the first failing task records its message in the
        closure's shared slot and jumps to the end of its chunk loop; the others stop claiming
        chunks, and after the launch the function sets the message (the last error is
        thread-local) and returns -1."""
        if self._region_failure is None:
            if message is not None:
                self._line(f"TVMAPISetLastError({message});")
            self._line("return -1;")
            return
        slot, label = self._region_failure
        text = message or '"a call inside a parallel loop failed"'
        expected = self._fresh("expected")
        self._line(f"{{ const char* {expected} = NULL;")
        self._line(f"  __atomic_compare_exchange_n(&{slot}, &{expected}, {text}, 0, "
                   "__ATOMIC_RELAXED, __ATOMIC_RELAXED);")
        self._line(f"  goto {label}; }}")

    def stmt_IfThenElse(self, node: Any) -> None:
        """Append the C lines of a TIR ``IfThenElse`` statement."""
        self._line(f"if ({self.expr(node.condition)}) {{")
        self._block(node.then_case)
        if node.else_case is not None:
            self._line("} else {")
            self._block(node.else_case)
        self._line("}")

    def stmt_While(self, node: Any) -> None:
        """Append the C lines of a TIR ``While`` statement."""
        self._line(f"while ({self.expr(node.condition)}) {{")
        self._block(node.body)
        self._line("}")

    def stmt_DeclBuffer(self, node: Any) -> None:
        """Append the C lines of a TIR ``DeclBuffer`` statement."""
        self.emit_stmt(node.body)

    def stmt_For(self, node: Any) -> None:
        """Append the C lines of a TIR ``For`` statement."""
        kind = int(node.kind)
        loop_type = c_type(node.loop_var.dtype)
        name = self._bind(node.loop_var)
        begin, extent = self.expr(node.min), self.expr(node.extent)
        end = extent if is_const_int(node.min, 0) else f"{begin} + {extent}"
        if kind == 1 and self.use_thread_pool and self._parallel_depth == 0:
            self.parallel_launch(node, loop_type, name, begin, extent)
            return
        if kind == 2:
            self._lines.append("#pragma GCC ivdep")
        elif kind == 3 and is_const_int(node.extent):
            self._lines.append(f"#pragma GCC unroll {max(int(node.extent.value), 1)}")
        self._line(f"for ({loop_type} {name} = {begin}; {name} < {end}; ++{name}) {{")
        self._loop_body(node)
        self._line("}")

    def _loop_body(self, node: Any) -> None:
        self._block(node.body)

    def stmt_Allocate(self, node: Any) -> None:
        """Append the C lines of a TIR ``Allocate`` statement."""
        t = DataType(node.dtype)
        elem = c_type(t.element_of)
        name = self._bind(node.buffer_var)
        self._pointer_types[id(node.buffer_var)] = f"{elem}*"
        count_const = all(is_const_int(e) for e in node.extents)
        lanes = t.lanes
        if count_const:
            count = math.prod(int(e.value) for e in node.extents) * lanes
            if count * t.element_of.itemsize <= self.workspace_threshold:
                lanes_used = self._vector_lanes_of.get(id(node.buffer_var))
                if lanes_used and count % lanes_used == 0:
                    # An array of vectors, indexed by constant-ish positions, lets gcc keep
                    # the whole accumulator tile in registers (scalar replacement).
                    self.vector_locals[id(node.buffer_var)] = lanes_used
                    vtype = self.vector_type(t.element_of.with_lanes(lanes_used))
                    self._line(f"{vtype} {name}[{count // lanes_used}] "
                               "__attribute__((aligned(64)));")
                else:
                    self._line(f"{elem} {name}[{max(count, 1)}] __attribute__((aligned(64)));")
                self.emit_stmt(node.body)
                return
            count_text = str(count)
        else:
            count_text = " * ".join(f"(uint64_t){self.expr(e)}" for e in node.extents)
            if lanes > 1:
                count_text += f" * {lanes}"
        self._emit_workspace(node, elem, name, count_text, t.element_of)

    def _emit_workspace(self, node: Any, elem: str, name: str, count: str,
                        t: DataType) -> None:
        nbytes = f"(uint64_t)({count}) * {t.itemsize}"
        self._line(f"{elem}* {self.restrict} {name} = ({elem}*)TVMBackendAllocWorkspace("
                   f"1, 0, {nbytes}, {int(t.type_code)}, {t.bits});")
        self._line(f"if ({name} == NULL) {{")
        self._indent += 1
        self._fail(None)
        self._indent -= 1
        self._line("}")
        self.emit_stmt(node.body)
        self._line(f"TVMBackendFreeWorkspace(1, 0, {name});")

    def _block(self, body: Any) -> None:
        self._indent += 1
        self.emit_stmt(body)
        self._indent -= 1

    # Nodes that must be lowered away before code generation: say so by name.
    def stmt_BufferRealize(self, node: Any) -> None:
        """Reject: a BufferRealize must be flattened before codegen."""
        raise TVMError("C codegen: BufferRealize must be flattened before code generation")

    def expr_ProducerLoad(self, node: Any) -> str:
        """Reject: a te.Tensor read must be lowered before codegen."""
        raise TVMError("C codegen: ProducerLoad (a te.Tensor read) must be lowered first")

    def expr_Reduce(self, node: Any) -> str:
        """Reject: a Reduce must be lowered to loops before codegen."""
        raise TVMError("C codegen: Reduce must be lowered to loops before code generation")


def _pointer_type(var: Any) -> str:
    annotation = getattr(var, "type_annotation", None)
    element = getattr(getattr(annotation, "element_type", None), "dtype", None)
    return f"{c_type(element)}*" if element is not None else "void*"


def emit_c(mod: Any, target: Any = None, bare_metal: bool | None = None,
           entry: bool = True) -> tuple[str, list[str]]:
    """Emit one C translation unit for every PrimFunc of ``mod``; return (source, names).

    ``bare_metal`` picks :class:`~kiln.target.codegen_c_baremetal.CodeGenCBareMetal`; by
    default it is chosen when the target names an ``-mcpu=cortex-m*``. ``entry=False``
    leaves out ``__tvm_main__`` (a later unit of a library of several).
    """
    cg = codegen_for(target, bare_metal)
    add_kernels(cg, mod)
    return cg.finish(entry), cg.function_names


def codegen_for(target: Any = None, bare_metal: bool | None = None) -> CodeGenC:
    """A fresh emitter for ``target``: the bare-metal dialect for ``-mcpu=cortex-m*`` (or
    when ``bare_metal`` says so), a system-lib registration for ``--system-lib``, vectors as
    wide as the target's registers (:func:`native_vector_bits`)."""
    if bare_metal is None:
        mcpu = getattr(target, "mcpu", "") if target is not None else ""
        bare_metal = mcpu.startswith("cortex-m")
    system_lib = bool(getattr(target, "attrs", {}).get("system-lib", False))
    if bare_metal:
        from kiln.target.codegen_c_baremetal import CodeGenCBareMetal  # a subclass of CodeGenC

        return CodeGenCBareMetal(system_lib)
    return CodeGenC(system_lib, native_vector_bits(target))


def native_vector_bits(target: Any = None) -> int:
    """Bits of the vector registers gcc keeps ``target``'s generic vectors in: 512 for an
    x86 target with AVX-512 (``-mcpu`` naming one, or the host's CPU without ``-mcpu``),
    else 256 (AVX2; wider vectors are split before printing). Without a target: 256.

    On Zen 4, 16-lane parts instead of two 8-lane ones made a 128x256x768 dense 1.12x ->
    1.00x of LLVM's time, ResNet-18's 3x3 convs 1.03x -> 1.00x (LLVM legalizes to the
    host's registers itself)."""
    if target is None or getattr(target, "kind", None) is None:
        return 256
    mcpu = getattr(target, "mcpu", "") or ""
    triple = getattr(target, "attrs", {}).get("mtriple", "") or ""
    foreign = triple and not triple.startswith(("x86_64", "i686", "i386"))
    if foreign or mcpu.startswith(("cortex-", "arm", "apple")) or "arm_cpu" in target.keys:
        return 256
    from kiln.target.x86 import target_has_features

    return 512 if target_has_features("avx512f", target) else 256


def add_kernels(cg: CodeGenC, mod: Any) -> None:
    """Emit every PrimFunc of ``mod`` (through the C codegen's TIR passes, for ``cg``'s
    vector width) into ``cg``, each under a comment naming its Relay source or its
    buffers."""
    for symbol, func in functions_of(mod, _pipeline(cg.vector_bits)):
        comment = func.attrs.get("kiln.source") or f"{symbol}: {describe_kernel(func)}"
        cg.add_function(func, symbol, comment)


@functools.cache
def _pipeline(vector_bits: int) -> list[Any]:
    return c_codegen_pipeline(vector_bits)


def describe_kernel(func: Any) -> str:
    """A one-line comment for a kernel without a Relay source: its buffers' shapes, dtypes."""
    buffers = function_signature(func).buffers
    parts = [f"{b.name}[{', '.join(map(repr, b.shape))}] {b.dtype}" for b in buffers]
    return "kernel over " + ", ".join(parts)


def compile_options(target: Any) -> list[str]:
    """gcc flags for a host build of ``target``: -O3, -march from -mcpu (parallel loops run
    on the runtime's thread pool, so no OpenMP)."""
    mcpu = getattr(target, "mcpu", "") if target is not None else ""
    march = [f"-march={mcpu}"] if mcpu and not mcpu.startswith(("cortex-", "arm")) \
        else ["-march=native"]
    if march != ["-march=native"] and not compiler_accepts(tuple(march)):
        # an LLVM CPU name this gcc does not know: the same extensions by feature flags
        march = gcc_arch_options(target) or march
    # Neither flag changes a result: no errno from libm, no FP exception traps (which lets
    # gcc if-convert and vectorize float selects, e.g. in kiln_expf).
    return ["-O3", *march, "-fPIC", "-std=gnu11", "-fno-math-errno", "-fno-trapping-math"]


@register_func("target.build.c", override=True)
def build_c(mod: Any, target: Any = None) -> Any:
    """``target.build.c``: emit C for ``mod``, compile it (cached), return a runtime Module."""
    from kiln.target.build import NativeModule

    source, names = emit_c(mod, target)
    return NativeModule.from_c_source(source, names, compile_options(target), kind="c")
