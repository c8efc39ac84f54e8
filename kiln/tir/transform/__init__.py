"""TIR passes (TVM's ``tvm.tir.transform``).

Each name is a factory returning a pass that runs on an IRModule (every PrimFunc in it) or on
a single PrimFunc. :data:`LOWER_PIPELINE` is the ordered list ``kiln.lower`` runs;
:data:`CODEGEN_PIPELINE` the list every codegen's input goes through (LLVM), and
:data:`C_CODEGEN_PIPELINE` the C family's (C, bare-metal C, OpenCL).
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "prim_func_pass": ("kiln.tir.transform.base", "prim_func_pass"),
    "PrimFuncPass": ("kiln.tir.transform.base", "PrimFuncPass"),
    "StorageFlatten": ("kiln.tir.transform.storage_flatten", "StorageFlatten"),
    "FlattenBuffer": ("kiln.tir.transform.storage_flatten", "StorageFlatten"),
    "Simplify": ("kiln.tir.transform.simplify", "Simplify"),
    "RemoveNoOp": ("kiln.tir.transform.simplify", "RemoveNoOp"),
    "LoopPartition": ("kiln.tir.transform.loop_partition", "LoopPartition"),
    "VectorizeLoop": ("kiln.tir.transform.vectorize", "VectorizeLoop"),
    "UnrollLoop": ("kiln.tir.transform.vectorize", "UnrollLoop"),
    "ConvertForLoopsToSerial": ("kiln.tir.transform.vectorize", "ConvertForLoopsToSerial"),
    "LowerIntrin": ("kiln.tir.transform.lower_intrin", "LowerIntrin"),
    "MakePackedAPI": ("kiln.tir.transform.packed_api", "MakePackedAPI"),
    "make_packed_api": ("kiln.tir.transform.packed_api", "make_packed_api"),
    "BindSharedSubexprs": ("kiln.tir.transform.shared_subexpr", "BindSharedSubexprs"),
    "SelectSafeIfThenElse": ("kiln.tir.transform.safe_choices", "SelectSafeIfThenElse"),
    "SplitWideVectors": ("kiln.tir.transform.wide_vectors", "SplitWideVectors"),
    "MaskFaultingLanes": ("kiln.tir.transform.lane_masks", "MaskFaultingLanes"),
    "ShareVectorLoads": ("kiln.tir.transform.shared_loads", "ShareVectorLoads"),
    "HoistSafeArmLoads": ("kiln.tir.transform.safe_choices", "HoistSafeArmLoads"),
    "CODEGEN_PIPELINE": ("kiln.tir.transform.codegen_prep", "CODEGEN_PIPELINE"),
    "C_CODEGEN_PIPELINE": ("kiln.tir.transform.codegen_prep", "C_CODEGEN_PIPELINE"),
    "prepare_for_codegen": ("kiln.tir.transform.codegen_prep", "prepare_for_codegen"),
    "LOWER_PIPELINE": ("kiln.te.lowering", "LOWER_PIPELINE"),
}

__getattr__, __dir__ = attach(__name__, _LAZY)
