"""Exhaustiveness of ``match``: which values no clause handles (TVM's ``unmatched_cases``).

Entry points: :func:`unmatched_cases`, :func:`type_data_of`.

The algorithm keeps the set of values not handled yet as a list of patterns, starting with
``_`` (everything), and subtracts each clause's pattern in turn. Subtracting ``p`` from a
candidate ``c``:

* ``p`` is ``_`` or a variable: nothing is left;
* ``c`` is ``_`` while ``p`` is a constructor (or tuple) pattern: ``c`` is first split into
  one candidate per constructor of the type, each with ``_`` fields (a tuple: one candidate);
* a different constructor: ``c`` is left whole;
* the same constructor with fields ``c_1..c_n`` and ``p_1..p_n``: a value escapes ``p`` when
  some field escapes, so what is left is, for each ``i``, ``c`` with field ``i`` replaced by
  each pattern of ``c_i - p_i``.

The pieces may overlap; that does not matter for reporting them.
"""

from __future__ import annotations

from typing import Any

from kiln.ir.adt import Constructor, TypeData
from kiln.relay.adt import (
    Match,
    Pattern,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
)
from kiln.runtime.error import TVMError

__all__ = ["unmatched_cases", "type_data_of"]


def type_data_of(ctor: Constructor, mod: Any) -> TypeData | None:
    """The definition of the ADT ``ctor`` builds, looked up in ``mod`` (None if absent)."""
    if mod is None:
        return None
    data = mod.type_definitions.get(ctor.belong_to)
    if data is None and ctor.belong_to.name_hint in mod:  # an equal-named header
        data = mod.type_definitions.get(mod.get_global_type_var(ctor.belong_to.name_hint))
    return data


def _same_constructor(a: Constructor, b: Constructor) -> bool:
    return a.name_hint == b.name_hint and a.belong_to.name_hint == b.belong_to.name_hint


def _split(pattern: Pattern, mod: Any) -> list[Pattern]:
    """``_`` split into the shapes ``pattern`` distinguishes, with ``_`` fields."""
    if isinstance(pattern, PatternTuple):
        return [PatternTuple([PatternWildcard() for _ in pattern.patterns])]
    data = type_data_of(pattern.constructor, mod)
    if data is None:
        raise TVMError(f"unmatched_cases: the module does not define the type of constructor "
                       f"{pattern.constructor.name_hint}")
    return [PatternConstructor(c, [PatternWildcard() for _ in c.inputs])
            for c in data.constructors]


def _rebuild(candidate: Pattern, fields: list[Pattern]) -> Pattern:
    if isinstance(candidate, PatternTuple):
        return PatternTuple(fields)
    return PatternConstructor(candidate.constructor, fields)


def _subtract(candidate: Pattern, pattern: Pattern, mod: Any) -> list[Pattern]:
    """Patterns covering the values ``candidate`` matches and ``pattern`` does not."""
    if isinstance(pattern, PatternWildcard | PatternVar):
        return []
    if isinstance(candidate, PatternWildcard | PatternVar):
        return [rest for piece in _split(pattern, mod) for rest in _subtract(piece, pattern, mod)]
    if isinstance(pattern, PatternConstructor) and not _same_constructor(
            candidate.constructor, pattern.constructor):
        return [candidate]
    fields = list(candidate.patterns)
    if len(fields) != len(pattern.patterns):
        raise TVMError(f"unmatched_cases: pattern {pattern!r} has {len(pattern.patterns)} "
                       f"fields, the value has {len(fields)}")
    left = []
    for i, (have, want) in enumerate(zip(fields, pattern.patterns)):
        for rest in _subtract(have, want, mod):
            left.append(_rebuild(candidate, fields[:i] + [rest] + fields[i + 1:]))
    return left


def unmatched_cases(match: Match, mod: Any = None) -> list[Pattern]:
    """Patterns of the values no clause of ``match`` handles (empty: the match is exhaustive).

    ``mod`` supplies the ADT definitions, so a constructor pattern's siblings are known.

    Example
    -------
    >>> from kiln import relay
    >>> from kiln.relay.adt import Clause, Match, PatternConstructor, PatternVar
    >>> mod = relay.prelude.Prelude().mod
    >>> _, cons, nil = mod.get_type("List")
    >>> xs = relay.var("xs")
    >>> m = Match(xs, [Clause(PatternConstructor(nil), relay.const(0))])
    >>> unmatched_cases(m, mod)
    [Cons(_, _)]
    """
    left: list[Pattern] = [PatternWildcard()]
    for clause in match.clauses:
        left = [rest for candidate in left for rest in _subtract(candidate, clause.lhs, mod)]
    unique: dict[str, Pattern] = {}
    for pattern in left:
        unique.setdefault(repr(pattern), pattern)
    return list(unique.values())
