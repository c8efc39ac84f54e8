"""C helpers for the narrow types, called by the code that the TIR pass
:mod:`kiln.tir.transform.narrow_types` leaves: conversions of bfloat16, the four 8-bit floats
and the sub-byte integers (int4/uint4/int2/uint2) to and from float32 / int64.

Entry point: :data:`NARROW_TYPE_HELPERS` (C source, part of every translation unit's prelude).

Generated code holds a narrow value as its bit pattern (``uint16_t`` for bfloat16,
``uint8_t`` otherwise), as NumPy + ml_dtypes store it: a sub-byte integer in the low bits of
its byte with the high bits zero. The rules are ml_dtypes' (the oracle of ONNX's own tests):
float32 to a narrow float rounds to nearest even (a float64 first becomes a float32, as
ml_dtypes converts it); the 8-bit floats saturate (Relay ``cast`` is ONNX Cast with
``saturate=1``: ±inf and finite values beyond the largest become ± the largest, NaN stays
NaN); the formats without a negative zero (``fnuz``) turn -0 into +0; an integer narrower
than a byte keeps the low bits (wraps) of the value, truncated toward zero for a float, and
NaN or ±inf become 0.
"""

from __future__ import annotations

__all__ = ["NARROW_TYPE_HELPERS", "FLOAT8_FORMATS"]

# name -> (exponent bits, mantissa bits, bias, fnuz, largest finite bit pattern, NaN pattern)
FLOAT8_FORMATS = {
    "float8_e4m3fn": (4, 3, 7, 0, 0x7E, 0x7F),
    "float8_e4m3fnuz": (4, 3, 8, 1, 0x7F, 0x80),
    "float8_e5m2": (5, 2, 15, 0, 0x7B, 0x7E),
    "float8_e5m2fnuz": (5, 2, 16, 1, 0x7F, 0x80),
}

_GENERIC = r"""
/* ---- narrow types (kiln.target.narrow_types_c): values as bit patterns ---------------- */
static inline float kiln_f32_of_bits(uint32_t b) {
  float f; __builtin_memcpy(&f, &b, 4); return f;
}
static inline uint32_t kiln_bits_of_f32(float f) {
  uint32_t b; __builtin_memcpy(&b, &f, 4); return b;
}
/* 2^n for -149 <= n <= 127, exactly */
static inline float kiln_exp2i(int32_t n) {
  return n >= -126 ? kiln_f32_of_bits((uint32_t)(n + 127) << 23)
                   : kiln_f32_of_bits(1u << (n + 149));
}
static inline uint16_t kiln_to_bfloat16(float x) {
  uint32_t u = kiln_bits_of_f32(x);
  if (x != x) return (uint16_t)((u >> 16) | 0x0040);  /* a quiet NaN of the same sign */
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float kiln_bfloat16_to_f32(uint16_t b) {
  return kiln_f32_of_bits((uint32_t)b << 16);
}
/* float32 -> an 8-bit float with e exponent and m mantissa bits, saturating (see above) */
static inline uint8_t kiln_to_float8(float x, int e, int m, int bias, int fnuz, uint8_t largest,
                                     uint8_t nan) {
  uint32_t u = kiln_bits_of_f32(x);
  uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  if (x != x) return fnuz ? nan : (uint8_t)(sign | nan);
  float a = x < 0 ? -x : x;
  int emin = 1 - bias;                        /* exponent of the smallest normal */
  float big = kiln_exp2i((int32_t)((largest >> m) & ((1 << e) - 1)) - bias)
              * (1.0f + (float)(largest & ((1 << m) - 1)) / (float)(1 << m));
  if (a >= big) return (uint8_t)(sign | largest);
  uint32_t q;
  int32_t exp = (int32_t)((u >> 23) & 0xFFu) - 127;
  if (exp < emin) {                           /* subnormal (or zero): a multiple of 2^(emin-m) */
    float t = a * kiln_exp2i(m - emin);
    q = (uint32_t)t;
    float frac = t - (float)q;
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) q += 1;  /* 2^m carries into a normal */
  } else {
    uint32_t sig = (u & 0x7FFFFFu) | 0x800000u;
    int shift = 23 - m;
    uint32_t rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    uint32_t mant = sig >> shift;
    if (rest > half || (rest == half && (mant & 1u))) mant += 1;  /* may carry into exp */
    q = ((uint32_t)(exp - emin + 1) << m) + (mant - (1u << m));
  }
  if (q > largest) q = largest;               /* rounded up past the largest: saturate */
  if (q == 0 && fnuz) return 0;               /* no negative zero */
  return (uint8_t)(sign | q);
}
static inline float kiln_float8_to_f32(uint8_t b, int e, int m, int bias, int fnuz,
                                       int has_inf) {
  int sign = b & 0x80, field = (b >> m) & ((1 << e) - 1), mant = b & ((1 << m) - 1);
  if (fnuz && b == 0x80) return __builtin_nanf("");
  if (!fnuz && field == (1 << e) - 1) {
    if (has_inf && mant == 0) return sign ? -__builtin_inff() : __builtin_inff();
    if (!has_inf ? mant == (1 << m) - 1 : 1) return __builtin_nanf("");
  }
  float v = field == 0 ? (float)mant * kiln_exp2i(1 - bias - m)
                       : (float)((1 << m) + mant) * kiln_exp2i(field - bias - m);
  return sign ? -v : v;
}
/* sub-byte integers: keep the low bits; a float is truncated toward zero, NaN/inf give 0 */
static inline uint8_t kiln_wrap_bits(int64_t v, int bits) {
  return (uint8_t)((uint64_t)v & ((1u << bits) - 1u));
}
static inline uint8_t kiln_float_to_bits(double x, int bits) {
  if (!(x > -9.2e18 && x < 9.2e18)) return 0;
  return kiln_wrap_bits((int64_t)x, bits);
}
static inline int8_t kiln_signed_bits(uint8_t b, int bits) {
  return (int8_t)((int8_t)(uint8_t)(b << (8 - bits)) >> (8 - bits));
}
"""


def _float8_pair(name: str) -> str:
    """``kiln_to_<name>(float)`` and ``kiln_<name>_to_f32(uint8_t)`` for one format."""
    e, m, bias, fnuz, largest, nan = FLOAT8_FORMATS[name]
    has_inf = int(name == "float8_e5m2")
    return (f"static inline uint8_t kiln_to_{name}(float x) {{ return kiln_to_float8(x, {e}, "
            f"{m}, {bias}, {fnuz}, {largest:#x}, {nan:#x}); }}\n"
            f"static inline float kiln_{name}_to_f32(uint8_t b) {{ return kiln_float8_to_f32("
            f"b, {e}, {m}, {bias}, {fnuz}, {has_inf}); }}\n")


NARROW_TYPE_HELPERS = _GENERIC.strip() + "\n" + "".join(map(_float8_pair, FLOAT8_FORMATS))
