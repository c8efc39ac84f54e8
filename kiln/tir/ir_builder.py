"""Building TIR statements imperatively (TVM's ``tvm.tir.ir_builder``).

Entry points: :func:`create` (an :class:`IRBuilder`), :class:`BufferVar`.

An :class:`IRBuilder` keeps a stack of open scopes. Statements are appended to the innermost
one; a scope that wraps what follows it (``let``, ``allocate``, ``scope_attr``) is recorded as
a function of its body, applied when the enclosing scope closes. ``with ib.for_range(...)``,
``if_scope``, ``else_scope``, ``while_loop`` and ``new_scope`` open a scope and emit their
statement when the ``with`` block ends; :meth:`IRBuilder.get` returns the whole statement.
Typical use is the body of ``te.extern``::

    def body(ins, outs):
        ib = tir.ir_builder.create()
        a, b = ib.buffer_ptr(ins[0]), ib.buffer_ptr(outs[0])
        with ib.for_range(0, n, name="i") as i:
            b[i] = a[i] + 1.0
        return ib.get()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.type import PointerType, PrimType
from kiln.runtime.error import TVMError
from kiln.tir import op as _op
from kiln.tir.buffer import Buffer, decl_buffer
from kiln.tir.expr import BufferLoad, Call, IterVar, PrimExpr, StringImm, Var
from kiln.tir.stmt import (
    Allocate,
    AttrStmt,
    BufferStore,
    DeclBuffer,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    SeqStmt,
    Stmt,
    While,
)

__all__ = ["BufferVar", "IRBuilder", "create"]

_KINDS = {"serial": ForKind.SERIAL, "parallel": ForKind.PARALLEL,
          "vectorize": ForKind.VECTORIZED, "unroll": ForKind.UNROLLED}


class _Scope:
    """A ``with`` block whose exit emits the scope's statement."""

    def __init__(self, value: Any, on_exit: Callable[[], None]) -> None:
        self._value, self._on_exit = value, on_exit

    def __enter__(self) -> Any:
        return self._value

    def __exit__(self, kind, value, trace) -> None:
        if kind is None:  # a failing block leaves the builder as it is: the error propagates
            self._on_exit()


def _element(dtype: str) -> str:
    return str(dtype).split("x", 1)[0]


class BufferVar:
    """A buffer seen through the builder: ``x[i]`` loads, ``x[i] = v`` emits a store.

    A single index into a multi-dimensional buffer is a flat (row-major) position, as in TVM.
    """

    def __init__(self, builder: IRBuilder, buffer: Buffer, content_type: str) -> None:
        self._builder, self._buffer, self._content_type = builder, buffer, str(content_type)

    def asobject(self) -> Buffer:
        """The underlying :class:`~kiln.tir.Buffer`."""
        return self._buffer

    @property
    def dtype(self) -> str:
        return self._content_type

    def _indices(self, index: Any) -> list:
        items = list(index) if isinstance(index, tuple | list) else [index]
        items = [i.var if isinstance(i, IterVar) else i for i in items]
        ndim = len(self._buffer.shape)
        if len(items) == 1 and ndim > 1:  # a flat position: row-major coordinates
            flat, coords = items[0], []
            for extent in reversed(self._buffer.shape[1:]):
                coords.insert(0, flat % extent)
                flat = flat // extent
            return [flat, *coords]
        if len(items) != ndim:
            raise TVMError(f"{self._buffer.name}: {len(items)} indices into a {ndim}-D buffer")
        return items

    def __getitem__(self, index: Any) -> PrimExpr:
        return BufferLoad(self._buffer, self._indices(index))

    def __setitem__(self, index: Any, value: Any) -> None:
        value = _op.convert_expr(value) if not isinstance(value, PrimExpr) else value
        if _element(value.dtype) != _element(self._content_type):
            raise TVMError(f"{self._buffer.name}: storing a {value.dtype} value into a buffer of "
                           f"{self._content_type}")
        self._builder.emit(BufferStore(self._buffer, value, self._indices(index)))


class IRBuilder:
    """Imperative construction of a TIR statement (see the module docstring)."""

    def __init__(self) -> None:
        self._scopes: list[list] = [[]]
        self._loops = 0  # default loop names: i, j, k, then i_0, i_1, ...
        self._last_if: IfThenElse | None = None

    # -- scopes ---------------------------------------------------------------------------

    def _close(self) -> Stmt:
        """The statement of the innermost scope: wrappers applied to what follows them."""
        items = self._scopes.pop()
        body: list[Stmt] = []
        for item in reversed(items):
            if callable(item):
                inner = body[0] if len(body) == 1 else SeqStmt(body) if body else Evaluate(0)
                body = [item(inner)]
            else:
                body.insert(0, item)
        if not body:
            return Evaluate(0)
        return body[0] if len(body) == 1 else SeqStmt(body)

    def emit(self, stmt: Any) -> None:
        """Append ``stmt`` (a statement, a call, or a function of the rest of the scope)."""
        if isinstance(stmt, Call):
            stmt = Evaluate(stmt)
        if not (isinstance(stmt, Stmt) or callable(stmt)):
            raise TVMError(f"IRBuilder.emit: expected a TIR statement, a call or a function "
                           f"building a statement from its body, got {type(stmt).__name__}")
        self._scopes[-1].append(stmt)
        self._last_if = None

    def scope_attr(self, node: Any, attr_key: str, value: Any) -> None:
        """Annotate the rest of the current scope with ``attr_key`` of ``node``."""
        node = StringImm(node) if isinstance(node, str) else node
        value = StringImm(value) if isinstance(value, str) else value
        if attr_key == "thread_extent":
            value = _op.max(1, value)  # an extent computed at run time may be 0
        self.emit(lambda body: AttrStmt(node, attr_key, value, body))

    def new_scope(self) -> _Scope:
        """A plain nested scope (its statements are emitted as one block)."""
        self._scopes.append([])
        return _Scope(None, lambda: self.emit(self._close()))

    def for_range(self, begin: Any, end: Any, name: str = "i", dtype: str | None = None,
                  kind: str = "serial") -> _Scope:
        """``for name in range(begin, end)``; the ``with`` block gets the loop variable."""
        if kind not in _KINDS:
            raise TVMError(f"for_range: unknown kind {kind!r} (use one of {sorted(_KINDS)})")
        if name == "i":
            name = "ijk"[self._loops] if self._loops < 3 else f"i_{self._loops - 3}"
            self._loops += 1
        if dtype is None:
            dtype = "int64" if "int64" in (_index_dtype(begin), _index_dtype(end)) else "int32"
        loop_var = Var(name, dtype)
        extent = end if isinstance(begin, int) and begin == 0 else end - begin
        self._scopes.append([])
        return _Scope(loop_var, lambda: self.emit(
            For(loop_var, begin, extent, _KINDS[kind], self._close())))

    def while_loop(self, condition: Any) -> _Scope:
        """``while condition``."""
        self._scopes.append([])
        return _Scope(None, lambda: self.emit(While(condition, self._close())))

    def if_scope(self, cond: Any) -> _Scope:
        """``if cond``; an :meth:`else_scope` may follow directly."""
        self._scopes.append([])

        def done() -> None:
            stmt = IfThenElse(cond, self._close(), None)
            self.emit(stmt)
            self._last_if = stmt

        return _Scope(None, done)

    def else_scope(self) -> _Scope:
        """The ``else`` of the :meth:`if_scope` just closed."""
        last = self._last_if
        if last is None or not self._scopes[-1] or self._scopes[-1][-1] is not last:
            raise TVMError("else_scope must directly follow an if_scope")
        self._scopes[-1].pop()
        self._scopes.append([])

        def done() -> None:
            self.emit(IfThenElse(last.condition, last.then_case, self._close()))

        return _Scope(None, done)

    # -- values ---------------------------------------------------------------------------

    def let(self, var_name: str, value: Any) -> Var:
        """Bind ``value`` to a new variable for the rest of the scope."""
        value = _op.convert_expr(value) if not isinstance(value, PrimExpr) else value
        var = Var(var_name, value.dtype)
        self.emit(lambda body: LetStmt(var, value, body))
        return var

    def allocate(self, dtype: str, shape: Any, name: str = "buf", axis_separators=None,
                 scope: str = "") -> BufferVar:
        """Storage for the rest of the scope, as a :class:`BufferVar`."""
        shape = list(shape) if isinstance(shape, tuple | list) else [shape]
        data = Var(name, PointerType(PrimType(dtype), scope or "global"))
        buffer = decl_buffer(shape, dtype, name=name, data=data, scope=scope,
                             axis_separators=axis_separators)
        self.emit(lambda body: Allocate(data, dtype, shape, _op.const(1, "bool"),
                                        DeclBuffer(buffer, body)))
        return BufferVar(self, buffer, dtype)

    def pointer(self, content_type: str, name: str = "ptr", scope: str = "") -> BufferVar:
        """A handle of unknown extent, indexed as a flat array of ``content_type``."""
        data = Var(name, PointerType(PrimType(content_type), scope or "global"))
        buffer = decl_buffer((0,), content_type, name=name, data=data, scope=scope)
        return BufferVar(self, buffer, content_type)

    def buffer_ptr(self, buf: Buffer) -> BufferVar:
        """Index an existing buffer (e.g. ``te.extern``'s ``ins``/``outs``) through the builder."""
        if not isinstance(buf, Buffer):
            raise TVMError(f"buffer_ptr: expected a tir.Buffer, got {type(buf).__name__}")
        return BufferVar(self, buf, buf.dtype)

    def likely(self, expr: Any) -> PrimExpr:
        """``expr`` marked as usually true."""
        return _op.likely(expr)

    def get(self) -> Stmt:
        """The statement built so far (every ``with`` scope must be closed)."""
        if len(self._scopes) != 1:
            raise TVMError(f"IRBuilder.get: {len(self._scopes) - 1} scope(s) still open")
        seq = self._close()
        self._scopes.append([])
        return seq


def _index_dtype(value: Any) -> str:
    if isinstance(value, bool):
        raise TVMError("for_range: a loop bound must be an integer, got a bool")
    if isinstance(value, int):
        return "int32"
    if isinstance(value, PrimExpr) and str(value.dtype).startswith(("int", "uint")):
        return str(value.dtype)
    raise TVMError(f"for_range: a loop bound must be an integer, got {value!r}")


def create() -> IRBuilder:
    """A new :class:`IRBuilder`."""
    return IRBuilder()
