"""The TIR passes every codegen's input goes through (C, LLVM, OpenCL, bare-metal C).

Entry points: :data:`CODEGEN_PIPELINE`, :func:`prepare_for_codegen`.

Target-independent rewriting happens here, on TIR, so that each codegen prints what it gets
(STYLE.md, "Target-independent rewriting is a TIR pass, not codegen"). The codegens call
:func:`prepare_for_codegen` on every PrimFunc they print (``kiln.target.c_abi.functions_of``).
"""

from __future__ import annotations

from kiln.tir.function import PrimFunc
from kiln.tir.transform.base import PrimFuncPass
from kiln.tir.transform.safe_choices import SelectSafeIfThenElse
from kiln.tir.transform.shared_subexpr import BindSharedSubexprs

__all__ = ["CODEGEN_PIPELINE", "prepare_for_codegen"]

CODEGEN_PIPELINE: list[PrimFuncPass] = [
    SelectSafeIfThenElse(),  # per-lane choices that cannot fault: blend both arms
    BindSharedSubexprs(),  # a printer expands a DAG into a tree: bind what is shared first
]


def prepare_for_codegen(func: PrimFunc) -> PrimFunc:
    """``func`` after every pass of :data:`CODEGEN_PIPELINE`, in order."""
    for codegen_pass in CODEGEN_PIPELINE:
        func = codegen_pass(func)
    return func
