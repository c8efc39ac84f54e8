"""How CodeGenC prints choices: ``tir.if_then_else`` on a scalar condition, and
``tir.masked_load``.

Entry point: :class:`CLaneMasks`, a mixin of :class:`~kiln.target.codegen_c.CodeGenC` with the
C rules for both intrinsics (the C twin of :mod:`kiln.target.codegen_llvm_masked`).

A per-lane ``if_then_else`` never reaches the printer: ``tir.SelectSafeIfThenElse`` and
``tir.MaskFaultingLanes`` (the codegen pipelines) make it a ``Select`` whose arms are safe in
every lane, with each load that may fault as ``tir.masked_load(load, mask)``. That call is
printed here:

* contiguous lanes of 32/64-bit numbers filling whole 128-bit registers read with
  ``kiln_maskload_<vector>`` (AVX2 ``maskload`` per 128/256-bit part: the untaken lanes'
  memory is never touched; a guarded loop without AVX2) -- the conv pad border stays
  straight-line vector code;
* any other lane pattern (a gather, bytes, a bool buffer) reads each lane that the mask holds
  in a loop over the lanes, through plain arrays (gcc vectorizes what it can).
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.target.c_abi import c_type
from kiln.target.c_access import flat_access

__all__ = ["CLaneMasks"]


class CLaneMasks:
    """``tir.if_then_else`` and ``tir.masked_load`` for
    :class:`~kiln.target.codegen_c.CodeGenC`, through its public printer interface:
    ``expr``, ``lane_mask``, ``vector_value``, ``vector_type``, ``data_pointer``,
    ``declarations`` and ``vector_locals``)."""

    def call_if_then_else(self, node: Any) -> str:
        """``cond ? a : b`` on a scalar condition: only the taken arm is evaluated.

        A load under ``?:`` is conditional, so gcc's vectorizer makes it a masked load
        (``vmaskmovps``). GCC 12.2 picks the wrong mask for masked loads of interleaved
        groups (an outer loop vectorized over a fully unrolled small inner loop; GCC PR
        tree-optimization/114375), which silently broke scatter's "update" select. Loads
        that are provably in bounds need no mask: the C-family pipeline's
        ``tir.HoistSafeArmLoads`` binds them before the choice, so they become plain loads
        and a blend, which is both correct and faster.
        """
        cond = node.args[0]
        if DataType(cond.dtype).lanes > 1:
            raise TVMError(f"C codegen ({self.func_name}): a per-lane if_then_else reached "
                           "the printer; run the codegen pipeline first "
                           "(kiln.tir.transform.C_CODEGEN_PIPELINE: tir.MaskFaultingLanes)")
        then, other = (self.vector_value(a) for a in node.args[1:])
        return f"({self.expr(cond)} ? {then} : {other})"

    def call_masked_load(self, node: Any) -> str:
        """The lanes of a vector load where the mask holds, zero elsewhere; the other lanes'
        memory is not read."""
        load, mask = node.args
        t = DataType(load.dtype)
        if id(load.buffer.data) in self.vector_locals:
            return self.expr(load)  # a local array of vectors: in bounds by construction
        access = flat_access(self, load.buffer, load.indices)
        data = self.data_pointer(load.buffer)
        if self._maskable(t, access):
            return (f"{self._masked_load_helper(t)}({data} + {access.base}, "
                    f"{self.lane_mask(mask, t.bits)})")
        lanes = t.lanes
        decls = [f"{self.vector_type(DataType('int8').with_lanes(lanes))} _mv = "
                 f"{self.lane_mask(mask, 8)}; int8_t _m[{lanes}]; "
                 "__builtin_memcpy(_m, &_mv, sizeof _m);"]
        if access.contiguous:
            index = f"({access.base}) + _l"
        elif access.vector_index is not None:
            itype = self.vector_type(DataType("int64").with_lanes(lanes))
            decls.append(f"{itype} _i = __builtin_convertvector({access.vector_index}, "
                         f"{itype});")
            index = "_i[_l]"
        else:
            index = access.base  # every lane reads one element
        element = c_type(DataType("int8") if t.is_bool else t.element_of)
        return (f"({{ {' '.join(decls)} {element} _o[{lanes}]; for (int _l = 0; "
                f"_l < {lanes}; ++_l) _o[_l] = _m[_l] ? {data}[{index}] : 0; "
                f"{self.vector_type(t)} _r; __builtin_memcpy(&_r, _o, sizeof _r); _r; }})")

    @staticmethod
    def _maskable(t: DataType, access: Any) -> bool:
        """Whether a masked vector load is one ``maskload`` per register: contiguous lanes
        of 32/64-bit numbers filling whole 128-bit registers."""
        return (t.bits in (32, 64) and not t.is_bool and not t.is_handle
                and (t.bits * t.lanes) % 128 == 0 and access.contiguous)

    def _masked_load_helper(self, dtype: DataType) -> str:
        """Declare (once, beside the vector typedefs) and name ``kiln_maskload_<vector>``:
        the lanes of ``p`` where ``mask`` is all ones, zero elsewhere, reading no memory of
        the other lanes (AVX2 ``maskload`` per 128/256-bit part; a guarded loop without
        AVX2)."""
        vtype = self.vector_type(dtype)
        name = f"kiln_maskload_{vtype}"
        if name in self.declarations:
            return name
        total = dtype.bits * dtype.lanes
        width = 256 if total % 256 == 0 else 128
        per_part = width // dtype.bits
        element = c_type(dtype.element_of)
        mask_type = self.vector_type(DataType(f"int{dtype.bits}").with_lanes(dtype.lanes))
        kind = "p" + ("s" if dtype.bits == 32 else "d") if dtype.is_float \
            else f"epi{dtype.bits}"
        prefix = "_mm256" if width == 256 else "_mm"
        pointer = {"ps": "const float*", "pd": "const double*", "epi32": "const int*",
                   "epi64": "const long long*"}[kind]
        int_reg, reg = ("__m256i", "__m256") if width == 256 else ("__m128i", "__m128")
        reg += {"ps": "", "pd": "d"}.get(kind, "i")
        parts = "\n".join(
            f"  {{ {int_reg} m_{k}; {reg} r_{k}; __builtin_memcpy(&m_{k}, (char*)&mask + "
            f"{k * width // 8}, {width // 8}); r_{k} = {prefix}_maskload_{kind}(({pointer})"
            f"(p + {k * per_part}), m_{k}); __builtin_memcpy((char*)&r + {k * width // 8}, "
            f"&r_{k}, {width // 8}); }}"
            for k in range(total // width))
        self.declarations[name] = (
            "#if defined(__AVX2__)\n#include <immintrin.h>\n#endif\n"
            f"static inline {vtype} {name}(const {element}* p, {mask_type} mask) {{\n"
            f"  {vtype} r = {{0}};\n#if defined(__AVX2__)\n{parts}\n#else\n"
            f"  for (int l = 0; l < {dtype.lanes}; ++l) if (mask[l]) r[l] = p[l];\n"
            "#endif\n  return r;\n}")
        return name
