"""TIR functions: :class:`PrimFunc`.

A PrimFunc's ``params`` are Vars: handles for buffers (described in ``buffer_map``) or scalar
vars for symbolic shape values. ``attrs`` is a plain dict (``global_symbol``, ``tir.noalias``,
and after MakePackedAPI ``calling_conv`` and ``target``).
"""

from __future__ import annotations

from typing import Any

from kiln.ir.attrs import DictAttrs
from kiln.ir.base import Span
from kiln.ir.function import BaseFunc
from kiln.runtime.object import Object, register_object
from kiln.tir.buffer import Buffer
from kiln.tir.expr import Var
from kiln.tir.stmt import Stmt

__all__ = ["PrimFunc"]


@register_object("tir.PrimFunc")
class PrimFunc(BaseFunc):
    """A low-level function over buffers.

    Example
    -------
    >>> from kiln import tir
    >>> A = tir.decl_buffer((4,), "float32", name="A")
    >>> body = tir.BufferStore(A, tir.const(0.0, "float32"), [0])
    >>> f = tir.PrimFunc([A.data], body, buffer_map={A.data: A}).with_attr("global_symbol", "f")
    >>> f.attrs["global_symbol"]
    'f'
    """

    _fields = {"params": Var, "body": Stmt, "ret_type": Object, "buffer_map": Buffer}
    _sequal_def_fields = ("params",)

    def __init__(self, params, body: Stmt, ret_type=None, buffer_map=None, attrs=None,
                 span: Span | None = None) -> None:
        params = list(params)
        buffer_map = dict(buffer_map or {})
        # TVM accepts Buffers in params: they become their data var plus a buffer_map entry.
        for i, param in enumerate(params):
            if isinstance(param, Buffer):
                buffer_map[param.data] = param
                params[i] = param.data
        if not isinstance(attrs, DictAttrs):
            attrs = DictAttrs(dict(attrs or {}))
        super().__init__(span, attrs, params, body, ret_type, buffer_map)
        self._set("checked_type_", None)

    def with_attr(self, key: str | dict, value: Any = None) -> PrimFunc:
        """A copy with ``attrs[key] = value`` (or with every pair of a dict)."""
        return self.with_attrs(key if isinstance(key, dict) else {key: value})

    def with_body(self, body: Stmt) -> PrimFunc:
        """A copy with a new body."""
        return PrimFunc(self.params, body, self.ret_type, self.buffer_map, self.attrs, self.span)

    def script(self, name: str | None = None) -> str:
        """TVMScript-like text of the function."""
        from kiln.tir.printer import script

        return script(self, name=name)

    def show(self) -> None:
        print(self.script())

    def __str__(self) -> str:
        return self.script()

    def __repr__(self) -> str:
        return self.script()
