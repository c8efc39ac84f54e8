"""The LLVM toolchain behind the ``llvm`` target: llvmlite, target machines, optimization,
and the on-disk object cache.

Entry points: :func:`llvm_available`, :func:`llvmlite_modules`, :func:`initialized_llvm`,
:func:`host_target_machine`, :func:`parse_and_optimize`, :func:`compile_cached` (the object
file of an IR module, from ``KILN_CACHE_DIR/llvm`` when the same IR was compiled for the same
target, host CPU and LLVM before), :func:`optimize`, :func:`opt_level`.
"""

from __future__ import annotations

import functools
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["llvm_available", "llvmlite_modules", "initialized_llvm", "host_target_machine",
           "parse_and_optimize", "compile_cached", "object_cache_path", "optimize", "opt_level"]


def llvmlite_modules():
    """``(llvmlite.ir, llvmlite.binding)``; a TVMError naming the extra when missing."""
    try:
        import llvmlite.binding as binding
        import llvmlite.ir as ir
    except ImportError:
        raise TVMError(
            "target 'llvm' needs llvmlite, which is not installed; install the extra with "
            "`pip install kiln[llvm]` or use target 'c'"
        ) from None
    return ir, binding


def llvm_available() -> bool:
    """Whether llvmlite can be imported."""
    try:
        llvmlite_modules()
    except TVMError:
        return False
    return True


@functools.cache
def initialized_llvm():
    """llvmlite's modules with the native target and asm printer initialized (once)."""
    ir, llvm = llvmlite_modules()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return ir, llvm


def host_target_machine(target: Any = None):
    """An llvmlite TargetMachine for the host triple; CPU/features from ``-mcpu``/``-mattr``."""
    _, llvm = initialized_llvm()
    mcpu = getattr(target, "mcpu", "") if target is not None else ""
    mattr = ",".join(getattr(target, "mattr", []) or []) if target is not None else ""
    triple = (getattr(target, "attrs", {}) or {}).get("mtriple") if target is not None else None
    if mcpu and mcpu != "native":
        features = mattr
        if not triple and llvm.get_process_triple().startswith("x86_64"):
            # an unknown CPU name would select a 32-bit subtarget and abort the process
            features = f"+64bit,{features}" if features else "+64bit"
    else:  # -mcpu=native or none: the host CPU with its features
        mcpu = llvm.get_host_cpu_name()
        features = llvm.get_host_cpu_features().flatten()
        if mattr:
            features = f"{features},{mattr}" if features else mattr
    if triple:  # cross compilation needs every backend, not just the native one
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
    try:
        llvm_target = llvm.Target.from_triple(triple or llvm.get_process_triple())
    except RuntimeError as err:
        raise TVMError(f"LLVM cannot generate code for -mtriple={triple}: {err}") from None
    return llvm_target.create_target_machine(cpu=mcpu, features=features, opt=3, reloc="pic",
                                             codemodel="default")


def opt_level(target: Any) -> int:
    """The target's ``-opt-level`` (default 3), clamped to LLVM's 0-3."""
    opt_level = getattr(target, "opt_level", 3) if target is not None else 3
    return min(max(opt_level, 0), 3)


def parse_and_optimize(module: Any, tm: Any, target: Any):
    """The verified, optimized llvmlite ModuleRef of the llvmlite IR ``module``."""
    _, llvm = initialized_llvm()
    try:
        ref = llvm.parse_assembly(str(module))
        ref.verify()
    except RuntimeError as err:
        raise TVMError(f"LLVM codegen produced invalid IR: {err}\n{module}") from None
    optimize(llvm, ref, tm, opt_level(target))
    return ref


def object_cache_path(ir_text: str, target: Any) -> Any:
    """Where the object file of this unoptimized IR for this target is cached: the key covers
    the IR (with its triple and data layout), the target string, the host CPU and features
    (what ``-mcpu=native`` or no ``-mcpu`` select) and the LLVM version."""
    import hashlib

    from kiln.runtime import config

    _, llvm = initialized_llvm()
    key = hashlib.sha256("\0".join([
        ir_text, str(target), llvm.get_host_cpu_name(),
        llvm.get_host_cpu_features().flatten(), str(opt_level(target)),
        str(llvm.llvm_version_info)]).encode()).hexdigest()
    return config.cache_dir() / "llvm" / key


def compile_cached(module: Any, tm: Any, target: Any) -> tuple[bytes, str]:
    """``(object bytes, optimized IR text)``, from the disk cache when this exact module was
    compiled before (LLVM's optimization and object emission are most of a build's codegen)."""
    import os
    import tempfile

    path = object_cache_path(str(module), target)
    obj_path, ir_path = path.with_suffix(".o"), path.with_suffix(".ll")
    try:
        return obj_path.read_bytes(), ir_path.read_text()
    except OSError:
        pass
    ref = parse_and_optimize(module, tm, target)
    obj, ir_text = tm.emit_object(ref), str(ref)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the IR first and the object last, each renamed into place: a reader finding the
        # object finds its IR complete
        for final, data in ((ir_path, ir_text.encode()), (obj_path, obj)):
            fd, tmp = tempfile.mkstemp(dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, final)
    except OSError:
        pass  # a read-only cache only costs the next build its time
    return obj, ir_text


def optimize(llvm, ref, tm, opt_level: int) -> None:
    """Run LLVM's standard O<n> pipeline with loop and SLP vectorization."""
    vectorize = opt_level >= 2
    if hasattr(llvm, "create_pass_builder"):  # llvmlite >= 0.44: the new pass manager
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        tuning.loop_vectorization = vectorize
        tuning.slp_vectorization = vectorize
        tuning.loop_unrolling = vectorize
        passes = llvm.create_pass_builder(tm, tuning)
        passes.getModulePassManager().run(ref, passes)
        return
    builder = llvm.create_pass_manager_builder()  # older llvmlite: the legacy one
    builder.opt_level = opt_level
    builder.loop_vectorize = vectorize
    builder.slp_vectorize = vectorize
    manager = llvm.create_module_pass_manager()
    tm.add_analysis_passes(manager)
    builder.populate(manager)
    manager.run(ref)
