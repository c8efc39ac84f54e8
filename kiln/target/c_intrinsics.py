"""How CodeGenC lowers ``tir.Call``: math functions, intrinsics, extern and packed calls.

Entry points: :class:`CIntrinsics` (a mixin of :class:`~kiln.target.codegen_c.CodeGenC`:
``expr_Call`` and one ``call_<intrinsic>`` method per TIR intrinsic that needs more than a
format string), :data:`UNARY_MATH`, :data:`INTRINSIC_FORMATS`.

Format strings use ``{0}``, ``{1}`` … for the emitted arguments, ``{f}`` for libm's float
suffix (``expf``), ``{fs}`` for a float literal's suffix, ``{bits}`` and ``{t}`` for the
argument's width and the result's C type. Vector operands without a native C vector form are
computed lane by lane.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.target.c_abi import (
    DLTENSOR_FIELDS,
    VALUE_CONTENT,
    c_string,
    c_type,
    float_suffix,
    node_name,
)

__all__ = ["CIntrinsics", "UNARY_MATH", "INTRINSIC_FORMATS"]

# tir.<name>(x) -> <C name>{f}(x): "f" for float32, "" for float64.
UNARY_MATH = {
    name: name
    for name in (
        "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "sin", "cos", "tan",
        "sinh", "cosh", "tanh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "erf",
        "floor", "ceil", "trunc", "nearbyint", "fabs", "cbrt",
    )
}
UNARY_MATH["round"] = "nearbyint"  # TVM rounds half to even, like NumPy

# Other intrinsics: positional {0}, {1} … are the emitted arguments; {f} the float suffix;
# {t} the result's C type.
INTRINSIC_FORMATS = {
    "tir.exp10": "pow{f}(10.0{fs}, {0})",
    "tir.rsqrt": "(1.0{fs} / sqrt{f}({0}))",
    "tir.sigmoid": "(1.0{fs} / (1.0{fs} + exp{f}(-{0})))",
    "tir.pow": "pow{f}({0}, {1})",
    "tir.fmod": "fmod{f}({0}, {1})",
    "tir.atan2": "atan2{f}({0}, {1})",
    "tir.hypot": "hypot{f}({0}, {1})",
    "tir.copysign": "copysign{f}({0}, {1})",
    "tir.nextafter": "nextafter{f}({0}, {1})",
    "tir.ldexp": "ldexp{f}({0}, {1})",
    "tir.isnan": "({0} != {0})",
    "tir.isinf": "(isinf({0}) != 0)",
    "tir.isfinite": "(isfinite({0}) != 0)",
    "tir.abs": "({0} < 0 ? -{0} : {0})",
    "tir.popcount": "((int32_t)__builtin_popcountll((uint64_t){0}))",
    "tir.clz": "((int32_t)__builtin_clzll((uint64_t){0}) - (64 - {bits}))",
    "tir.shift_left": "({0} << {1})",
    "tir.shift_right": "({0} >> {1})",
    "tir.bitwise_and": "({0} & {1})",
    "tir.bitwise_or": "({0} | {1})",
    "tir.bitwise_xor": "({0} ^ {1})",
    "tir.bitwise_not": "(~{0})",
    "tir.if_then_else": "({0} ? {1} : {2})",
    "tir.likely": "{0}",
    "tir.q_multiply_shift": "kiln_q_multiply_shift({0}, {1}, {2}, {3})",
}

# float32 rules that use kiln_expf (vectorizable) instead of libm's expf.
_FLOAT32_FAST = {
    "tir.exp": "kiln_expf({0})",
    "tir.sigmoid": "(1.0f / (1.0f + kiln_expf(-{0})))",
}


class CIntrinsics:
    """``tir.Call`` lowering for :class:`~kiln.target.codegen_c.CodeGenC` (which provides
    ``expr``, ``var_name``, ``per_lane`` and the module context flag)."""

    def expr_Call(self, node: Any) -> str:
        """C text of a ``Call``: its ``call_<name>`` rule, else a math or format rule."""
        op = node.op
        args = list(node.args)
        method = getattr(self, "call_" + op.replace("tir.", "").replace(".", "_"), None)
        if method is not None:
            return method(node)
        t = DataType(node.dtype)
        texts = [self.expr(a) for a in args]
        short = op[4:] if op.startswith("tir.") else op
        if op in _FLOAT32_FAST and t.element_of == DataType("float32"):
            rule = _FLOAT32_FAST[op]
        elif short in UNARY_MATH and len(args) == 1:
            rule = f"{UNARY_MATH[short]}{{f}}({{0}})"
        elif op in INTRINSIC_FORMATS:
            rule = INTRINSIC_FORMATS[op]
        else:
            raise TVMError(f"C codegen: no rule for TIR intrinsic Call {op!r}")
        arg_type = DataType(args[0].dtype) if args else t
        float_type = arg_type if arg_type.is_float else t
        fmt = dict(f=float_suffix(float_type), fs="f" if float_type.bits == 32 else "",
                   bits=arg_type.bits, t=c_type(t.element_of))
        if any(DataType(a.dtype).lanes > 1 for a in args if hasattr(a, "dtype")):
            return self.per_lane(node.dtype, [a.dtype for a in args], texts,
                                  lambda *xs: rule.format(*xs, **fmt))
        return rule.format(*texts, **fmt)

    def call_call_extern(self, node: Any) -> str:
        """C text of a ``tir.call_extern`` call."""
        name = node.args[0].value
        args = ", ".join(self.expr(a) for a in node.args[1:])
        return f"{name}({args})"

    call_call_pure_extern = call_call_extern

    def call_tvm_access_ptr(self, node: Any) -> str:
        """C text of a ``tir.tvm_access_ptr`` call."""
        ptype, data, offset = node.args[0], node.args[1], node.args[2]
        ctype = c_type(ptype.dtype)
        return f"(({ctype}*){self.var_name(data)} + {self.expr(offset)})"

    def call_reinterpret(self, node: Any) -> str:
        """C text of a ``tir.reinterpret`` call."""
        source = node.args[0]
        src_c, dst_c = c_type(source.dtype), c_type(node.dtype)
        return (f"({{ {src_c} _x = {self.expr(source)}; {dst_c} _y; "
                f"__builtin_memcpy(&_y, &_x, sizeof(_y)); _y; }})")

    def call_type_annotation(self, node: Any) -> str:
        """C text of a ``tir.type_annotation`` call."""
        return "0"

    def call_tvm_call_packed(self, node: Any) -> str:
        """Call a global PackedFunc by name (found once through the module context);
        Buffer arguments become stack DLTensors. The value is the call's return code."""
        self.uses_module_ctx = True
        name = node.args[0].value
        decls, fills = [], []
        for index, arg in enumerate(node.args[1:]):
            kind = node_name(arg)
            if kind == "Buffer":
                dims = ", ".join(f"(int64_t){self.expr(d)}" for d in arg.shape) or "0"
                code, bits, lanes = DataType(arg.dtype).as_tuple()
                decls.append(f"int64_t _s{index}[] = {{{dims}}}; DLTensor _t{index} = "
                             f"{{{self.var_name(arg.data)}, {{kDLCPU, 0}}, {len(arg.shape)}, "
                             f"{{{code}, {bits}, {lanes}}}, _s{index}, NULL, 0}};")
                fills.append(f"_a[{index}].v_handle = &_t{index}; _c[{index}] = 7;")
            elif kind == "StringImm":
                fills.append(f"_a[{index}].v_str = {c_string(arg.value)}; _c[{index}] = 11;")
            elif DataType(arg.dtype).is_float:
                fills.append(f"_a[{index}].v_float64 = {self.expr(arg)}; _c[{index}] = 2;")
            elif DataType(arg.dtype).is_handle:
                fills.append(f"_a[{index}].v_handle = {self.expr(arg)}; _c[{index}] = 3;")
            else:
                fills.append(f"_a[{index}].v_int64 = (int64_t){self.expr(arg)}; "
                             f"_c[{index}] = 0;")
        count = max(len(node.args) - 1, 1)
        return (f"({{ static TVMFunctionHandle _f = NULL; int32_t _rc = 0; "
                f"if (_f == NULL) _rc = TVMBackendGetFuncFromEnv(__tvm_module_ctx, "
                f"{c_string(name)}, &_f); {' '.join(decls)} TVMValue _a[{count}]; "
                f"int _c[{count}]; {' '.join(fills)} TVMValue _r; int _rt; "
                f"if (_rc == 0) _rc = TVMFuncCall(_f, _a, _c, {len(node.args) - 1}, &_r, &_rt); "
                f"_rc; }})")

    def call_isnullptr(self, node: Any) -> str:
        """C text of a ``tir.isnullptr`` call."""
        return f"({self.expr(node.args[0])} == NULL)"

    def call_tvm_struct_get(self, node: Any) -> str:
        """C text of a ``tir.tvm_struct_get`` call."""
        handle, index, kind = (self.expr(node.args[0]), self.expr(node.args[1]),
                               int(node.args[2].value))
        if kind == VALUE_CONTENT:
            t = DataType(node.dtype)
            member = "v_handle" if t.is_handle else ("v_float64" if t.is_float else "v_int64")
            value = f"((TVMValue*){handle})[{index}].{member}"
            return value if t.is_handle else f"(({c_type(t)}){value})"
        if kind not in DLTENSOR_FIELDS:
            raise TVMError(f"C codegen: tvm_struct_get of unknown field kind {kind}")
        field = DLTENSOR_FIELDS[kind]
        if kind == 0:
            return f"((void*)&((DLTensor*){handle})[{index}])"
        return f"((DLTensor*){handle})[{index}].{field}"
