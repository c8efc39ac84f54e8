"""kiln.arith: the arithmetic simplifier and integer analysis (TVM's ``tvm.arith``).

Entry points: :class:`Analyzer` (simplify, const_int_bound, modular_set, can_prove, bind),
:class:`ConstIntBound`, :class:`ModularSet`, :class:`IntervalSet`, :func:`eval_set`.
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "Analyzer": ("kiln.arith.analyzer", "Analyzer"),
    "ConstIntBound": ("kiln.arith.bound", "ConstIntBound"),
    "ModularSet": ("kiln.arith.bound", "ModularSet"),
    "IntervalSet": ("kiln.arith.int_set", "IntervalSet"),
    "eval_set": ("kiln.arith.int_set", "eval_set"),
    "union_sets": ("kiln.arith.int_set", "union_sets"),
    "analyzer": "kiln.arith.analyzer",
    "canonical": "kiln.arith.canonical",
    "int_set": "kiln.arith.int_set",
    "bound": "kiln.arith.bound",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
