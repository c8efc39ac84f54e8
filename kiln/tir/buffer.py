"""TIR buffers: a typed, shaped view of memory behind a handle ``Var``.

Entry points: :class:`Buffer`, :func:`decl_buffer`.

``Buffer.data`` is a handle var whose ``type_annotation`` is a ``PointerType`` carrying the
storage scope (``"global"``, ``"local"``); ``strides`` is empty for a compact row-major buffer.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.base import Span
from kiln.ir.expr import IntImm, PrimExpr
from kiln.ir.type import PointerType, PrimType
from kiln.runtime.dtype import dtype_str
from kiln.runtime.object import Object, register_object
from kiln.tir.expr import BufferLoad, Var

__all__ = ["Buffer", "decl_buffer"]


@register_object("tir.Buffer")
class Buffer(Object):
    """A multi-dimensional view of memory.

    Example
    -------
    >>> from kiln import tir
    >>> A = tir.decl_buffer((4, 8), "float32", name="A")
    >>> A.shape[1], A.dtype, A.scope()
    (8, 'float32', 'global')
    """

    _fields = {"data": Var, "dtype": "dtype", "shape": PrimExpr, "strides": PrimExpr,
               "elem_offset": PrimExpr, "name": str, "data_alignment": int,
               "offset_factor": int, "buffer_type": int, "span": Span}

    DEFAULT = 1
    AUTO_BROADCAST = 2

    def __init__(self, data: Var, dtype: Any, shape, strides=(), elem_offset=None,
                 name: str = "buffer", data_alignment: int = 64, offset_factor: int = 1,
                 buffer_type: int = 1, span: Span | None = None) -> None:
        from kiln.tir.op import convert_expr

        shape = [convert_expr(s) for s in shape]
        strides = [convert_expr(s) for s in (strides or ())]
        if elem_offset is None:
            elem_offset = IntImm("int32", 0)
        super().__init__(data, dtype_str(dtype), shape, strides, convert_expr(elem_offset),
                         name, int(data_alignment), int(offset_factor), int(buffer_type), span)

    def scope(self) -> str:
        """The storage scope of the data pointer."""
        annotation = self.data.type_annotation
        return getattr(annotation, "storage_scope", "") or "global"

    def vload(self, begin, dtype: str | None = None) -> PrimExpr:
        """Load at multi-dimensional index ``begin``."""
        return BufferLoad(self, list(begin))

    def __getitem__(self, indices) -> PrimExpr:
        if not isinstance(indices, tuple | list):
            indices = (indices,)
        return BufferLoad(self, list(indices))

    def offset_of(self, indices) -> list[PrimExpr]:
        """The flat element offset of ``indices`` (row-major, or by ``strides``)."""
        from kiln.tir.op import convert_expr

        indices = [convert_expr(i) for i in indices]
        if self.strides:
            offset = self.elem_offset
            for index, stride in zip(indices, self.strides):
                offset = offset + index * stride
            return [offset]
        offset = indices[0] if indices else convert_expr(0)
        for dim, index in zip(self.shape[1:], indices[1:]):
            offset = offset * dim + index
        if not (isinstance(self.elem_offset, IntImm) and self.elem_offset.value == 0):
            offset = offset + self.elem_offset
        return [offset]

    def access_ptr(self, access_mask: Any = "rw", ptr_type: str = "handle",
                   content_lanes: int = 1, offset: Any = 0, extent: Any = None) -> PrimExpr:
        """A pointer to the buffer's first element (plus ``offset``): ``tir.tvm_access_ptr``."""
        from kiln.tir.op import call_intrin, type_annotation

        mask = access_mask
        if isinstance(access_mask, str):
            mask = (1 if "r" in access_mask else 0) | (2 if "w" in access_mask else 0)
        if extent is None:
            extent = 1
            for dim in self.shape:
                extent = extent * dim
        start = self.elem_offset + offset
        return call_intrin(ptr_type, "tir.tvm_access_ptr", type_annotation(self.dtype),
                           self.data, start, extent - offset, mask)

    def __repr__(self) -> str:
        return self.name


def decl_buffer(shape, dtype: Any = "float32", name: str = "buffer", data: Var | None = None,
                strides=None, elem_offset=None, scope: str = "", data_alignment: int = -1,
                offset_factor: int = 0, buffer_type: str = "", axis_separators=None,
                span: Span | None = None) -> Buffer:
    """Declare a new buffer (TVM's ``tvm.tir.decl_buffer``).

    Example
    -------
    >>> from kiln import tir
    >>> tir.decl_buffer((16,), "int8", name="B").data.dtype
    'handle'
    """
    if isinstance(shape, PrimExpr | int):
        shape = (shape,)
    dtype = dtype_str(dtype)
    if data is None:
        data = Var(name, PointerType(PrimType(dtype), scope or "global"))
    if elem_offset is None and offset_factor:
        elem_offset = Var(name + "_elem_offset", "int32")
    return Buffer(data, dtype, list(shape), list(strides or ()), elem_offset, name,
                  64 if data_alignment <= 0 else data_alignment, max(offset_factor, 1),
                  2 if buffer_type == "auto_broadcast" else 1, span)
