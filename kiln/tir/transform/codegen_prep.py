"""The TIR passes every codegen's input goes through (C, LLVM, OpenCL, bare-metal C).

Entry points: :data:`CODEGEN_PIPELINE`, :data:`C_CODEGEN_PIPELINE` (AVX2-wide vectors),
:func:`c_codegen_pipeline` (for a given register width), :func:`prepare_for_codegen`.

Target-independent rewriting happens here, on TIR, so that each codegen prints what it gets
(STYLE.md, "Target-independent rewriting is a TIR pass, not codegen"). The codegens call
:func:`prepare_for_codegen` on every PrimFunc they print (``kiln.target.c_abi.functions_of``).
"""

from __future__ import annotations

from kiln.tir.function import PrimFunc
from kiln.tir.transform.base import PrimFuncPass
from kiln.tir.transform.lane_masks import MaskFaultingLanes
from kiln.tir.transform.safe_choices import HoistSafeArmLoads, SelectSafeIfThenElse
from kiln.tir.transform.shared_loads import ShareVectorLoads
from kiln.tir.transform.shared_subexpr import BindSharedSubexprs
from kiln.tir.transform.wide_vectors import NATIVE_VECTOR_BITS, SplitWideVectors

__all__ = ["CODEGEN_PIPELINE", "C_CODEGEN_PIPELINE", "c_codegen_pipeline",
           "prepare_for_codegen"]

CODEGEN_PIPELINE: list[PrimFuncPass] = [
    SelectSafeIfThenElse(),  # per-lane choices that cannot fault: blend both arms
    BindSharedSubexprs(),  # a printer expands a DAG into a tree: bind what is shared first
    MaskFaultingLanes(),  # the other per-lane choices: blend arms that read only their lanes
]


# The C-family printers (C, bare-metal C, OpenCL) also bind safe loading arms of scalar
# choices before the ``?:`` (a GCC workaround; LLVM branches on the condition instead), get
# vectors wider than a register as native-width parts (GCC spills wider generic vectors to
# the stack; LLVM legalizes them itself), and vector loads shared by a run of stores bound
# once (GCC re-reads them at every use; LLVM's GVN shares them over noalias pointers).
def c_codegen_pipeline(native_bits: int = NATIVE_VECTOR_BITS) -> list[PrimFuncPass]:
    """The C family's passes for a machine whose vector registers hold ``native_bits``."""
    return [
        SelectSafeIfThenElse(),
        SplitWideVectors(native_bits),  # before the masks: each native part of a choice
        BindSharedSubexprs(),
        MaskFaultingLanes(),
        HoistSafeArmLoads(),  # on what the printer gets, under the same loop facts
        ShareVectorLoads(),  # after the split: the parts' loads are what the stores share
    ]


C_CODEGEN_PIPELINE: list[PrimFuncPass] = c_codegen_pipeline()


def prepare_for_codegen(func: PrimFunc, pipeline: list[PrimFuncPass] | None = None) -> PrimFunc:
    """``func`` after every pass of ``pipeline`` (default :data:`CODEGEN_PIPELINE`), in
    order."""
    for codegen_pass in CODEGEN_PIPELINE if pipeline is None else pipeline:
        func = codegen_pass(func)
    return func
