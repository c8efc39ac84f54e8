"""kiln.target: compilation targets and native code generation (TVM's ``tvm.target``).

``Target`` parses TVM target strings; ``codegen_c`` and ``codegen_llvm`` turn TIR PrimFuncs
into runtime Modules (``llvm_library`` builds the LLVM ones kernel by kernel; ``c_abi``: the
packed wrapper and C glue both share; ``c_intrinsics`` / ``llvm_intrinsics``: how each lowers
``tir.Call``); ``build`` holds the table of target kinds -> build functions and the
NativeModule they return.
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "Target": ("kiln.target.target", "Target"),
    "TargetKind": ("kiln.target.target", "TargetKind"),
    "TARGET_KINDS": ("kiln.target.target", "TARGET_KINDS"),
    "arm_cpu": ("kiln.target.target", "arm_cpu"),
    "cuda": ("kiln.target.target", "cuda"),
    "rasp": ("kiln.target.target", "rasp"),
    "micro": ("kiln.target.target", "micro"),
    "target": "kiln.target.target",
    "codegen": "kiln.target.build",
    "codegen_c": "kiln.target.codegen_c",
    "codegen_llvm": "kiln.target.codegen_llvm",
    "llvm_library": "kiln.target.llvm_library",
    "c_abi": "kiln.target.c_abi",
    "c_intrinsics": "kiln.target.c_intrinsics",
    "llvm_intrinsics": "kiln.target.llvm_intrinsics",
    "x86": "kiln.target.x86",
    "build_module": ("kiln.target.build", "build_module"),
    "BUILD_FUNCTIONS": ("kiln.target.build", "BUILD_FUNCTIONS"),
}

__getattr__, __dir__ = attach(__name__, _LAZY)
