"""How CodeGenLLVM prints ``tir.masked_load``.

Entry point: :class:`LLVMLaneMasks`, a mixin of :class:`~kiln.target.codegen_llvm.CodeGenLLVM`
with the rule for ``tir.masked_load(load, mask)`` (the LLVM twin of
:mod:`kiln.target.codegen_c_masked`).

A per-lane ``if_then_else`` never reaches the printer: ``tir.SelectSafeIfThenElse`` and
``tir.MaskFaultingLanes`` (the codegen pipeline) make it a ``select`` whose arms are safe in
every lane, each load that may fault a ``tir.masked_load``. That becomes ``llvm.masked.load``
(contiguous lanes; one ``vmaskmovps``/``vpmaskmovd`` for 32/64-bit elements on AVX2,
expanded lane by lane by LLVM for narrower ones; the inactive lanes' memory is never touched,
a page past the end of a buffer included) or ``llvm.masked.gather`` (any other lane pattern).
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.llvm_intrinsics import mangle_type

__all__ = ["LLVMLaneMasks"]


class LLVMLaneMasks:
    """``tir.masked_load`` for :class:`~kiln.target.codegen_llvm.CodeGenLLVM` (which provides
    ``builder``, ``expr``, ``ltype``, ``declare`` and the buffer addressing helpers)."""

    def call_masked_load(self, call: Any):
        """``tir.masked_load(load, mask)``: a vector load touching only the elements of the
        lanes where the mask holds (zero in the others)."""
        node, mask = call.args
        ir, b = self.ir, self.builder
        t = DataType(node.dtype)
        storage = self.ltype(t, storage=True)
        element_ptr = self.element_pointer(node.buffer)
        offsets, contiguous = self.lane_offsets(node.buffer, node.indices, t.lanes)
        align = ir.Constant(self.i32, max(DataType(node.buffer.dtype).itemsize, 1))
        passthru = ir.Constant(storage, None)
        mask = self.expr(mask)
        # no ``inbounds`` on these GEPs: the inactive lanes' addresses may lie outside
        if contiguous:
            address = b.bitcast(b.gep(element_ptr, [offsets]), storage.as_pointer())
            loaded = self._masked_memory_call("llvm.masked.load", address, align, mask,
                                              passthru)
        else:
            pointers = ir.Constant(ir.VectorType(element_ptr.type, t.lanes), None)
            for lane, offset in enumerate(offsets):
                pointers = b.insert_element(pointers, b.gep(element_ptr, [offset]),
                                            self.const("int32", lane))
            loaded = self._masked_memory_call("llvm.masked.gather", pointers, align, mask,
                                              passthru)
        return self.from_storage(loaded, t)

    def _masked_memory_call(self, name: str, address, align, mask, passthru):
        # the (pointer, i32 align, mask, passthru) form: LLVM 22 moved the alignment onto the
        # pointer and upgrades this form when it reads it; older LLVMs take it as it is
        args = [address, align, mask, passthru]
        fn = self.declare(f"{name}.{mangle_type(passthru.type)}.{mangle_type(address.type)}",
                           passthru.type, [a.type for a in args])
        return self.builder.call(fn, args)
