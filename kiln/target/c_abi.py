"""The C side of TVM's packed calling convention, shared by the c and llvm targets.

Entry points: :func:`c_type`, :func:`function_signature` (:class:`FunctionSignature`),
:func:`packed_glue`, :func:`functions_of` (:func:`primfuncs_of`); for the code generators
also the prelude of C helpers every translation unit carries and the packed-wrapper emitter.

The packed wrapper of a kernel ``f`` is ``int32_t f(TVMValue* args, int* type_codes,
int num_args, TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle)``: it checks
the argument count and every argument's type code; for tensors the ndim, dtype, device, each
constant extent, symbolic extents (bound on first sight, checked after) and compactness of
the strides; then calls ``f_unpacked(data pointers..., shape variables...)``. A failed check
calls ``TVMAPISetLastError`` with a message naming the argument and returns -1 (no libc
needed, so the wrapper also builds freestanding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.runtime.dtype import DataType, DataTypeCode
from kiln.runtime.error import TVMError
from kiln.target import packed_checks
from kiln.target.narrow_types_c import NARROW_TYPE_HELPERS
from kiln.tir.transform.codegen_prep import prepare_for_codegen

__all__ = ["c_type", "c_function_identifier", "FunctionSignature", "function_signature",
           "packed_glue", "functions_of", "primfuncs_of", "PACKED_CALLING_CONV",
           "crt_func_registry_names", "crt_system_lib_source", "C_RESERVED", "MODULE_CTX",
           "PACKED_PARAM_TYPES", "PRELUDE_HELPERS", "DLTENSOR_FIELDS", "VALUE_CONTENT",
           "assert_message", "c_string", "entry_symbol", "float_suffix", "is_const_int",
           "node_name", "packed_declaration", "packed_wrapper", "preamble",
           "system_lib_registration"]

# Names a generated identifier must not take (C11 keywords and the types kiln's C uses).
C_RESERVED = frozenset(
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while bool true false NULL int8_t int16_t int32_t "
    "int64_t uint8_t uint16_t uint32_t uint64_t DLTensor TVMValue args type_codes num_args "
    "out_ret_value out_ret_tcode resource_handle".split()) | frozenset(
    # libm / stdlib functions the generated C calls or declares through its headers, with the
    # float (f) and long double (l) variants of the math ones
    name + suffix
    for name in (
        "exp exp2 expm1 log log2 log10 log1p sqrt cbrt sin cos tan asin acos atan atan2 sinh "
        "cosh tanh asinh acosh atanh pow fabs floor ceil round trunc rint nearbyint fmod fmin "
        "fmax fma erf erfc tgamma lgamma hypot copysign ldexp frexp modf remainder"
    ).split()
    for suffix in ("", "f", "l")
) | frozenset(
    "isnan isinf isfinite signbit abs labs llabs malloc calloc realloc free memcpy memset "
    "memmove printf fprintf snprintf abort exit main _Float16 _Bool".split())


# Scalar C types by (type code, bits).
_C_SCALAR = {
    (DataTypeCode.INT, 8): "int8_t",
    (DataTypeCode.INT, 16): "int16_t",
    (DataTypeCode.INT, 32): "int32_t",
    (DataTypeCode.INT, 64): "int64_t",
    (DataTypeCode.UINT, 1): "bool",
    (DataTypeCode.UINT, 8): "uint8_t",
    (DataTypeCode.UINT, 16): "uint16_t",
    (DataTypeCode.UINT, 32): "uint32_t",
    (DataTypeCode.UINT, 64): "uint64_t",
    (DataTypeCode.FLOAT, 16): "_Float16",
    (DataTypeCode.FLOAT, 32): "float",
    (DataTypeCode.FLOAT, 64): "double",
    # the narrow types as bit patterns (kiln.tir.transform.narrow_types)
    (DataTypeCode.BFLOAT, 16): "uint16_t",
    (DataTypeCode.FLOAT8_E4M3FN, 8): "uint8_t",
    (DataTypeCode.FLOAT8_E4M3FNUZ, 8): "uint8_t",
    (DataTypeCode.FLOAT8_E5M2, 8): "uint8_t",
    (DataTypeCode.FLOAT8_E5M2FNUZ, 8): "uint8_t",
    (DataTypeCode.INT, 4): "uint8_t",
    (DataTypeCode.UINT, 4): "uint8_t",
    (DataTypeCode.INT, 2): "uint8_t",
    (DataTypeCode.UINT, 2): "uint8_t",
    (DataTypeCode.HANDLE, 64): "void*",
    (DataTypeCode.HANDLE, 0): "void*",
}


# PrimFuncs already in packed form (MakePackedAPI output) carry attrs["calling_conv"] == 1
# and these six params.
PACKED_CALLING_CONV = 1


PACKED_PARAM_TYPES = ("TVMValue*", "int*", "int32_t", "TVMValue*", "int*", "void*")


# tir.tvm_struct_get field kinds (TVM's builtin::TVMStructFieldKind) -> DLTensor member
DLTENSOR_FIELDS = {0: "", 1: "data", 2: "shape", 3: "strides", 4: "ndim", 5: "dtype.code",
                    6: "dtype.bits", 7: "dtype.lanes", 8: "byte_offset", 9: "device.device_id",
                    10: "device.device_type"}


VALUE_CONTENT = 12


# Helpers every translation unit carries (static inline, so unused ones cost nothing).
PRELUDE_HELPERS = r"""
static inline int32_t kiln_floordiv_32(int32_t a, int32_t b) {
  int32_t q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t kiln_floordiv_64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int32_t kiln_floormod_32(int32_t a, int32_t b) {
  int32_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int64_t kiln_floormod_64(int64_t a, int64_t b) {
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int32_t kiln_q_multiply_shift(int32_t x, int32_t y, int32_t q, int32_t s) {
  int64_t prod = (int64_t)x * (int64_t)y;
  int32_t total = q - s;
  int64_t round = total > 0 ? ((int64_t)1 << (total - 1)) : 0;
  return (int32_t)((prod + round) >> total);
}
/* Keep a value in a vector register: an empty asm that "changes" it stops gcc from
 * re-reading it from memory at every use (which it prefers, and which starves FMA loops). */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define KILN_IN_REGISTER(v) __asm__("" : "+x"(v))
#elif defined(__GNUC__) && defined(__aarch64__)
#define KILN_IN_REGISTER(v) __asm__("" : "+w"(v))
#else
#define KILN_IN_REGISTER(v) ((void)0)
#endif
static inline float kiln_pow2i(int32_t n) {
  int32_t bits = (n + 127) << 23;
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}
/* expf that gcc can vectorize (libm's cannot be inlined): Cody-Waite reduction
 * x = n*ln2 + r, |r| <= ln2/2, then a degree-6 polynomial for exp(r) (Cephes' coefficients),
 * scaled by 2^n in two steps so subnormal results come out right. Max error 1 ulp. */
static inline float kiln_expf(float x) {
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest */
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t ni = (int32_t)n;
  int32_t half = ni >> 1;
  y = y * kiln_pow2i(half) * kiln_pow2i(ni - half);
  y = x > 88.72283935546875f ? INFINITY : y;
  y = x < -103.972084045410156f ? 0.0f : y;
  return x != x ? x : y;
}
/* Report a bad packed-call argument: message, then the offending values (no libc needed). */
static int32_t kiln_arg_error(const char* msg, const int64_t* got, int count) {
  char buf[512];
  int pos = 0;
  while (*msg && pos < 400) buf[pos++] = *msg++;
  for (int i = 0; i < count && pos < 480; ++i) {
    char digits[24];
    int n = 0;
    uint64_t v = got[i] < 0 ? (uint64_t)(-(got[i] + 1)) + 1 : (uint64_t)got[i];
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    if (i) { buf[pos++] = ','; buf[pos++] = ' '; }
    if (got[i] < 0) buf[pos++] = '-';
    while (n) buf[pos++] = digits[--n];
  }
  buf[pos] = '\0';
  TVMAPISetLastError(buf);
  return -1;
}
"""
PRELUDE_HELPERS += "\n" + NARROW_TYPE_HELPERS


def c_type(dtype: Any) -> str:
    """The C spelling of a scalar dtype, or the vector typedef name of a vector dtype.

    Example
    -------
    >>> c_type("float32"), c_type("int64"), c_type("float32x8")
    ('float', 'int64_t', 'float32x8')
    """
    t = DataType(dtype)
    if t.lanes > 1:
        return str(t).replace(" ", "")
    try:
        return _C_SCALAR[(t.type_code, t.bits)]
    except KeyError:
        raise TVMError(f"C codegen: no C type for dtype {t}") from None


def float_suffix(dtype: DataType) -> str:
    """The libm name suffix of a float type: ``f`` for float32 (``expf``), none otherwise."""
    return "f" if dtype.bits == 32 else ""


def c_string(text: str) -> str:
    """``text`` as a C string literal (quotes, backslashes and newlines escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return '"' + escaped + '"'


def node_name(node: Any) -> str:
    """The class name of a TIR node: the key of the printers' dispatch tables."""
    return type(node).__name__


def is_const_int(node: Any, value: int | None = None) -> bool:
    """Whether ``node`` is an ``IntImm`` (equal to ``value`` when one is given)."""
    if node_name(node) != "IntImm":
        return False
    return value is None or node.value == value


def assert_message(node: Any, func_name: str) -> str:
    """The error text of a failed AssertStmt, prefixed by the function unless it names it."""
    message = node.message.value if node_name(node.message) == "StringImm" else "assertion"
    return message if func_name in message else f"{func_name}: {message}"


class FunctionSignature:
    """What a PrimFunc takes: tensor buffers, then scalar params, then free shape variables."""

    __slots__ = ("params", "buffers", "scalars", "param_kinds")

    def __init__(self, params: list, buffers: list, scalars: list, param_kinds: list) -> None:
        self.params, self.buffers, self.scalars = params, buffers, scalars
        self.param_kinds = param_kinds  # per packed argument: ("tensor", buf) / ("scalar", var)


def function_signature(func: Any) -> FunctionSignature:
    """Split a PrimFunc's params into tensor buffers and scalars; find free shape vars."""
    buffers, scalars, kinds = [], [], []
    for param in func.params:
        buffer = func.buffer_map.get(param)
        if buffer is not None:
            buffers.append(buffer)
            kinds.append(("tensor", buffer))
        else:
            scalars.append(param)
            kinds.append(("scalar", param))
    seen = {id(v) for v in scalars}
    for buffer in buffers:
        for expr in [*buffer.shape, *buffer.strides, buffer.elem_offset]:
            for var in _free_vars(expr):
                if id(var) not in seen:
                    seen.add(id(var))
                    scalars.append(var)
    return FunctionSignature(list(func.params), buffers, scalars, kinds)


def _free_vars(expr: Any) -> list:
    """Vars in a shape expression, in order of first appearance."""
    if expr is None:
        return []
    kind = node_name(expr)
    if kind in ("Var", "SizeVar"):
        return [expr]
    out = []
    for field in ("a", "b", "value"):
        child = getattr(expr, field, None) if kind not in ("IntImm", "FloatImm") else None
        if child is not None and hasattr(child, "dtype"):
            out.extend(_free_vars(child))
    return out


def packed_wrapper(name: str, signature: FunctionSignature) -> str:
    """The C source of the packed-ABI function ``name``: it checks every argument (naming
    it in the error) and calls ``<name>_unpacked`` (:func:`packed_checks.describe_wrapper`
    says what it checks; the ``llvm`` target prints the same description as LLVM IR)."""
    spec = packed_checks.describe_wrapper(name, signature)
    lines = [packed_declaration(name),
             f"int32_t {c_function_identifier(name)}({_PACKED_PARAMS_TEXT}) {{",
             "  (void)out_ret_value; (void)out_ret_tcode; (void)resource_handle;"]
    for step in spec.steps:
        kind = node_name(step)
        if kind == "Check":
            got = ", ".join(f"(int64_t)({_wrapper_expr(v)})" for v in step.values)
            values = f"(const int64_t[]){{{got}}}, {len(step.values)}" if step.values \
                else "NULL, 0"
            lines += [f"  if ({_wrapper_expr(step.cond)}) {{",
                      f"    return kiln_arg_error({c_string(step.message)}, {values});",
                      "  }"]
        elif kind == "Let" and step.ctype == "DLTensor*":
            lines.append(f"  DLTensor* {step.name} = (DLTensor*){_wrapper_expr(step.value)};")
        elif kind == "Let":
            ctype = (c_type(step.ctype[:-1]) + "*" if step.ctype.endswith("*")
                     else c_type(step.ctype))
            lines.append(f"  {ctype} {step.name} = {_wrapper_expr(step.value)};")
        else:
            args = ", ".join(_wrapper_expr(a) for a in step.args)
            lines.append(f"  return {step.callee}({args});")
    lines.append("}")
    return "\n".join(lines)


def _wrapper_expr(node: Any) -> str:
    """The C text of an expression of a packed wrapper's description."""
    kind = node_name(node)
    if kind == "Const":
        return str(node.value)
    if kind == "NumArgs":
        return "num_args"
    if kind == "TypeCode":
        return f"type_codes[{node.index}]"
    if kind == "ArgValue":
        return f"args[{node.index}].{node.member}"
    if kind == "Local":
        return node.name
    if kind == "Field":
        return f"{node.tensor}->{node.member}"
    if kind in ("ShapeAt", "StrideAt"):
        array = "shape" if kind == "ShapeAt" else "strides"
        return f"{node.tensor}->{array}[{node.dim}]"
    if kind == "Binary":
        if node_name(node.b) == "Const" and node.b.value == 0 and _is_pointer(node.a):
            return f"{_wrapper_expr(node.a)} {node.op} NULL"
        return f"{_wrapper_operand(node.a)} {node.op} {_wrapper_operand(node.b)}"
    if kind == "Select":
        return (f"({_wrapper_expr(node.cond)} ? {_wrapper_expr(node.a)} : "
                f"{_wrapper_expr(node.b)})")
    if kind == "Cast":
        inner = _wrapper_expr(node.value)
        if node_name(node.value) != "Select":  # a Select prints its own parentheses
            inner = f"({inner})"
        return f"({c_type(node.dtype)}){inner}"
    if kind == "DataPointer":
        ctype = c_type(node.dtype)
        if node.with_offset:
            return f"({ctype}*)((char*){node.tensor}->data + {node.tensor}->byte_offset)"
        return f"({ctype}*){node.tensor}->data"
    raise TVMError(f"packed wrapper: no C form for {kind}")


def _is_pointer(node: Any) -> bool:
    """Whether a wrapper expression is a pointer (compared with NULL, not 0)."""
    kind = node_name(node)
    if kind == "Local":
        return node.name.endswith("_tensor")
    return kind == "Field" and packed_checks.DLTENSOR_MEMBERS[node.member][0].endswith("*")


def _wrapper_operand(node: Any) -> str:
    text = _wrapper_expr(node)
    return f"({text})" if node_name(node) == "Binary" else text


_PACKED_PARAMS_TEXT = ("TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value, "
                       "int* out_ret_tcode, void* resource_handle")


def c_function_identifier(name: str) -> str:
    """The C identifier of the packed function exported as ``name``: ``name`` itself unless it
    is a C keyword or a libm/stdlib name (then ``kiln_fn_<name>``, exported as ``name`` through
    an asm label, see :func:`packed_declaration`).

    >>> c_function_identifier("add"), c_function_identifier("exp")
    ('add', 'kiln_fn_exp')
    """
    return f"kiln_fn_{name}" if name in C_RESERVED else name


def packed_declaration(name: str) -> str:
    """Prototype of the packed function ``name``; a mangled one keeps the symbol ``name``."""
    label = f' __asm__("{name}")' if c_function_identifier(name) != name else ""
    return f"int32_t {c_function_identifier(name)}({_PACKED_PARAMS_TEXT}){label};"


def preamble(kind: str) -> str:
    """The first lines of a generated translation unit for target ``kind``: the banner and
    the includes the kernels need."""
    return "\n".join([
        f"/* Generated by kiln (target {kind}). */",
        "#include <stdint.h>",
        "#include <stdbool.h>",
        "#include <math.h>",
        "#include <tvm/runtime/c_runtime_api.h>",
        "#include <tvm/runtime/c_backend_api.h>",
        "#ifndef NULL\n#define NULL ((void*)0)\n#endif",
    ])


def entry_symbol(names: Sequence[str]) -> str:
    """``__tvm_main__`` names the module's entry function (weak: modules link together)."""
    if not names:
        return ""
    return f'__attribute__((weak)) const char __tvm_main__[] = "{names[0]}";'


MODULE_CTX = ("/* set by the loader; tvm_call_packed looks names up through it */\n"
               "__attribute__((weak)) void* __tvm_module_ctx = NULL;")


def system_lib_registration(names: Sequence[str], module_ctx: bool = False) -> str:
    """A load-time constructor registering every packed function with the system library
    (``-system-lib`` targets; found again with ``kiln.runtime.system_lib()``)."""
    lines = ["static void __attribute__((constructor)) kiln_register_system_lib(void) {"]
    lines += [f'  TVMBackendRegisterSystemLibSymbol("{name}", '
              f'(void*)&{c_function_identifier(name)});' for name in names]
    if module_ctx:
        lines.append('  TVMBackendRegisterSystemLibSymbol("__tvm_module_ctx", '
                     '(void*)&__tvm_module_ctx);')
    lines.append("}")
    return "\n".join(lines)


def crt_func_registry_names(names: Sequence[str]) -> bytes:
    """The ``names`` blob of a CRT ``TVMFuncRegistry`` (``func_registry_generator.cc``): the
    function count as a little-endian u16, then each name followed by a NUL.

    >>> crt_func_registry_names(["f", "g"])
    b'\\x02\\x00f\\x00g\\x00'
    """
    if len(names) >= 1 << 16:
        raise TVMError(f"a CRT function registry holds at most 65535 functions, got {len(names)}")
    return len(names).to_bytes(2, "little") + b"".join(n.encode() + b"\0" for n in names)


def crt_system_lib_source(names: Sequence[str], defined_here: Sequence[str] = ()) -> str:
    """The CRT system library of packed functions ``names`` (TVM's ``CreateFuncRegistry`` +
    ``GenerateCrtSystemLib``): a ``TVMFuncRegistry`` and ``TVMSystemLibEntryPoint``.

    Functions not in ``defined_here`` are declared first (they live in another translation
    unit). The names blob is written with octal escapes, which never swallow the next
    character as hex escapes can.
    """
    lines = ["#include <tvm/runtime/crt/module.h>"]
    lines += [f"TVM_DLL int32_t {name}({_PACKED_PARAMS_TEXT});" for name in names
              if name not in defined_here]
    lines.append("static TVMBackendPackedCFunc _tvm_func_array[] = {")
    lines += [f"    (TVMBackendPackedCFunc){name}," for name in names]
    lines.append("};")
    blob = "".join(f"\\{byte:03o}" if not (32 <= byte < 127) or chr(byte) in '"\\?'
                   else chr(byte) for byte in crt_func_registry_names(names))
    lines += ["static const TVMFuncRegistry _tvm_func_registry = {",
              f'    "{blob}",', "    _tvm_func_array,", "};",
              "static const TVMModule _tvm_system_lib = {", "    &_tvm_func_registry,", "};",
              "const TVMModule* TVMSystemLibEntryPoint(void) {",
              "    return &_tvm_system_lib;", "}"]
    return "\n".join(lines)


def packed_glue(functions: Sequence[tuple[str, FunctionSignature, list[str]]],
                imported_c: Sequence[str] = (), kind: str = "llvm",
                system_lib: bool = False, packed_names: Sequence[str] = (),
                module_ctx: bool = False) -> str:
    """C glue for kernels compiled elsewhere: ``(name, signature, unpacked C param types)``
    become a prototype of ``name_unpacked`` plus the packed wrapper ``name``."""
    parts = [preamble(kind), PRELUDE_HELPERS.strip()]
    if module_ctx:
        parts.append(MODULE_CTX)
    parts.extend("/* imported by pragma import_c */\n" + src.strip() for src in imported_c)
    for name, signature, param_types in functions:
        parts.append(f"int32_t {name}_unpacked({', '.join(param_types) or 'void'});")
        parts.append(packed_wrapper(name, signature))
    names = [name for name, _, _ in functions] + list(packed_names)
    parts.extend(packed_declaration(name) for name in packed_names)
    parts.append(entry_symbol(names))
    if system_lib:
        parts.append(system_lib_registration(names, module_ctx))
    return "\n\n".join(parts) + "\n"


def primfuncs_of(mod: Any) -> list[tuple[str, Any]]:
    """``(symbol, PrimFunc)`` pairs of an IRModule, a PrimFunc, or a dict of them, as given
    (a symbol is the function's ``global_symbol``, else its name in the module)."""
    if node_name(mod) == "PrimFunc":
        return [(mod.attrs.get("global_symbol") or "default_function", mod)]
    items = mod.functions.items() if hasattr(mod, "functions") else dict(mod).items()
    out = []
    for gvar, func in items:
        if node_name(func) != "PrimFunc":
            raise TVMError(f"codegen: {gvar!r} is a {node_name(func)}, not a tir.PrimFunc")
        out.append((func.attrs.get("global_symbol") or getattr(gvar, "name_hint", str(gvar)),
                    func))
    return out


def functions_of(mod: Any, pipeline: list[Any] | None = None) -> list[tuple[str, Any]]:
    """``(symbol, PrimFunc)`` pairs of an IRModule, a PrimFunc, or a dict of them: what a
    codegen prints, each function already through the TIR passes of ``pipeline`` (default:
    those every codegen's input goes through,
    :data:`kiln.tir.transform.codegen_prep.CODEGEN_PIPELINE`)."""
    return [(symbol, prepare_for_codegen(func, pipeline)) for symbol, func in primfuncs_of(mod)]
