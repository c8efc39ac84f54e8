"""Pattern matching on algebraic data types (TVM's ``tvm.relay.adt``).

Entry points: :class:`Match`, :class:`Clause` and the patterns :class:`PatternWildcard`,
:class:`PatternVar`, :class:`PatternConstructor`, :class:`PatternTuple`; :class:`Constructor`
and :class:`TypeData` are re-exported from :mod:`kiln.ir.adt`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.ir.adt import Constructor, TypeData
from kiln.ir.base import Span
from kiln.ir.expr import RelayExpr
from kiln.relay.expr import ExprWithOp, Var
from kiln.runtime.object import Object, register_object

__all__ = ["Pattern", "PatternWildcard", "PatternVar", "PatternConstructor", "PatternTuple",
           "Clause", "Match", "Constructor", "TypeData"]


@register_object("relay.Pattern")
class Pattern(Object):
    """Base of patterns."""

    _fields = {"span": Span}
    _sequal_ignore = ("span",)


@register_object("relay.PatternWildcard")
class PatternWildcard(Pattern):
    """``_``: matches anything, binds nothing."""

    def __init__(self, span: Span | None = None) -> None:
        super().__init__(span)

    def __repr__(self) -> str:
        return "_"


@register_object("relay.PatternVar")
class PatternVar(Pattern):
    """Matches anything and binds it to ``var``."""

    _fields = {"var": Var}
    _sequal_def_fields = ("var",)

    def __init__(self, var: Var, span: Span | None = None) -> None:
        super().__init__(span, var)

    def __repr__(self) -> str:
        return f"%{self.var.name_hint}"


@register_object("relay.PatternConstructor")
class PatternConstructor(Pattern):
    """Matches values built by ``constructor`` whose fields match ``patterns``."""

    _fields = {"constructor": Constructor, "patterns": Pattern}

    def __init__(self, constructor: Constructor, patterns: Sequence[Pattern] | None = None,
                 span: Span | None = None) -> None:
        super().__init__(span, constructor, tuple(patterns or ()))

    def __repr__(self) -> str:
        inner = f"({', '.join(repr(p) for p in self.patterns)})" if self.patterns else ""
        return f"{self.constructor.name_hint}{inner}"


@register_object("relay.PatternTuple")
class PatternTuple(Pattern):
    """Matches a tuple whose fields match ``patterns``."""

    _fields = {"patterns": Pattern}

    def __init__(self, patterns: Sequence[Pattern] | None = None,
                 span: Span | None = None) -> None:
        super().__init__(span, tuple(patterns or ()))

    def __repr__(self) -> str:
        return f"({', '.join(repr(p) for p in self.patterns)})"


@register_object("relay.Clause")
class Clause(Object):
    """One arm of a match: ``lhs`` pattern ``=> rhs``."""

    _fields = {"lhs": Pattern, "rhs": RelayExpr}

    def __init__(self, lhs: Pattern, rhs: RelayExpr) -> None:
        super().__init__(lhs, rhs)

    def __repr__(self) -> str:
        return f"{self.lhs!r} => {self.rhs!r}"


@register_object("relay.Match")
class Match(ExprWithOp):
    """``match (data) { clauses }``; ``complete`` says the clauses must be exhaustive.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("x")
    >>> m = Match(x, [Clause(PatternWildcard(), x)])
    >>> len(m.clauses)
    1
    """

    _fields = {"data": RelayExpr, "clauses": Clause, "complete": bool}

    def __init__(self, data: RelayExpr, clauses: Sequence[Clause], complete: bool = True,
                 span: Span | None = None) -> None:
        super().__init__(span, data, tuple(clauses), bool(complete))
        self.checked_type_ = None
