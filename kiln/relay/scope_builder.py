"""Build Let chains and if/else blocks imperatively (TVM's ``relay.ScopeBuilder``).

Entry point: :class:`ScopeBuilder`.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.expr import RelayExpr
from kiln.ir.type import Type
from kiln.relay.expr import If, Let, Var, const, var
from kiln.runtime.error import TVMError

__all__ = ["ScopeBuilder"]


class _Scope:
    def __init__(self) -> None:
        self.bindings: list[tuple[Var, RelayExpr]] = []
        self.ret: RelayExpr | None = None


class ScopeBuilder:
    """Collect ``let`` bindings and a returned value, then :meth:`get` the nested Let.

    Example
    -------
    >>> from kiln import relay
    >>> sb = ScopeBuilder()
    >>> x = sb.let("x", relay.const(1))
    >>> sb.ret(x)
    >>> type(sb.get()).__name__
    'Let'
    """

    def __init__(self) -> None:
        self._scopes = [_Scope()]

    def let(self, var_or_name: Var | str | tuple, value: Any) -> Var:
        """Bind ``value`` to a variable (a Var, a name, or ``(name, type)``); returns it."""
        if isinstance(var_or_name, str):
            var_or_name = var(var_or_name)
        elif isinstance(var_or_name, tuple):
            name, annotation = var_or_name
            if not isinstance(annotation, Type | str | type(None)):
                raise TypeError(f"let type annotation must be a Type, got {annotation!r}")
            var_or_name = var(name, annotation)
        if not isinstance(value, RelayExpr):
            value = const(value)
        self._scopes[-1].bindings.append((var_or_name, value))
        return var_or_name

    def ret(self, value: Any) -> None:
        """Set the value the current scope returns."""
        scope = self._scopes[-1]
        if scope.ret is not None:
            raise TVMError("ScopeBuilder: ret() was already called in this scope")
        scope.ret = value if isinstance(value, RelayExpr) else const(value)

    def _enter(self) -> _Scope:
        self._scopes.append(_Scope())
        return self._scopes[-1]

    def _exit(self) -> RelayExpr:
        return self._wrap(self._scopes.pop())

    def if_scope(self, cond: RelayExpr) -> _Branch:
        """``with sb.if_scope(cond):`` — the then-branch; follow with :meth:`else_scope`."""
        return _Branch(self, cond, is_else=False)

    def else_scope(self) -> _Branch:
        """``with sb.else_scope():`` — the else-branch of the preceding if_scope."""
        return _Branch(self, None, is_else=True)

    @staticmethod
    def _wrap(scope: _Scope) -> RelayExpr:
        if scope.ret is None:
            raise TVMError("ScopeBuilder: the scope has no return value; call ret()")
        body = scope.ret
        for bound, value in reversed(scope.bindings):
            body = Let(bound, value, body)
        return body

    def get(self) -> RelayExpr:
        """The built expression (Lets around the returned value)."""
        if len(self._scopes) != 1:
            raise TVMError("ScopeBuilder: an if/else scope is still open")
        return self._wrap(self._scopes[0])


class _Branch:
    def __init__(self, builder: ScopeBuilder, cond: RelayExpr | None, is_else: bool) -> None:
        self.builder, self.cond, self.is_else = builder, cond, is_else

    def __enter__(self) -> None:
        builder = self.builder
        if self.is_else:
            pending = getattr(builder, "_pending_if", None)
            if pending is None:
                raise TVMError("ScopeBuilder: else_scope() must follow an if_scope()")
        builder._enter()

    def __exit__(self, exc_type, *rest) -> None:
        if exc_type is not None:
            self.builder._scopes.pop()
            return
        builder = self.builder
        branch = builder._exit()
        if not self.is_else:
            builder._pending_if = (self.cond, branch)
            return
        cond, then = builder._pending_if
        builder._pending_if = None
        builder.ret(If(cond, then, branch))
