"""The vector operator tables of the C printer, and which vectors fit a register.

Entry points: :func:`fits_vector_register` and the tables :data:`COMPARISONS`,
:data:`VECTOR_MASK_BINARY`, :data:`VECTOR_MIN_MAX`.

The vector legalization that used to live here runs on TIR before the printer: vectors wider
than a register arrive in native-width parts (``tir.SplitWideVectors``), and a vector load
repeated across a run of stores arrives bound once to a ``LetStmt`` variable
(``tir.ShareVectorLoads``), which the printer pins in a register.
"""

from __future__ import annotations

import re

__all__ = ["fits_vector_register", "COMPARISONS", "VECTOR_MASK_BINARY",
           "VECTOR_MIN_MAX"]

# Logical ops on vector masks (all-ones / zero lanes) are bitwise in GCC's vector C.
VECTOR_MASK_BINARY = {"And": "({a} & {b})", "Or": "({a} | {b})"}
# Vector min/max: a comparison mask, then a blend (keeps scalar C's NaN behaviour).
VECTOR_MIN_MAX = {"Min": "<", "Max": ">"}
COMPARISONS = {"EQ", "NE", "LT", "LE", "GT", "GE"}


def fits_vector_register(vtype: str, register_bits: int = 256) -> bool:
    """Whether a C vector type (``float32x8``) fits one vector register of ``register_bits``
    (AVX2: 256; AVX-512: 512), which the register-pinning asm constraint needs."""
    m = re.fullmatch(r"[a-z]+?(\d+)x(\d+)", vtype)
    return m is not None and int(m.group(1)) * int(m.group(2)) <= register_bits
