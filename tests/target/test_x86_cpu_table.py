"""kiln's table of x86 ``-mcpu`` names (kiln.target.x86) against two independent oracles: the
code LLVM (llvmlite's) generates for each CPU name, and gcc's ``-march`` feature macros."""

from __future__ import annotations

import functools
import os
import random
import re
import subprocess
import tempfile

import pytest

from kiln.runtime import cc
from kiln.target import Target
from kiln.target.x86 import target_has_features

# LLVM's x86-64 CPU names: every one kiln's table lists and the older ones it must answer
# False for
CPUS = [
    "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "core2", "nehalem", "sandybridge",
    "ivybridge", "haswell", "core-avx2", "broadwell", "skylake", "skylake-avx512", "skx",
    "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
    "rocketlake", "tigerlake", "sapphirerapids", "emeraldrapids", "graniterapids",
    "graniterapids-d", "diamondrapids", "alderlake", "raptorlake", "meteorlake", "arrowlake",
    "arrowlake-s", "lunarlake", "pantherlake", "wildcatlake", "novalake", "gracemont",
    "sierraforest", "grandridge", "clearwaterforest", "atom", "silvermont", "goldmont",
    "tremont", "knl", "knm", "btver2", "bdver1", "bdver2", "bdver3", "bdver4", "znver1",
    "znver2", "znver3", "znver4", "znver5",
]
FEATURES = ["avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "avx512vbmi"]

_PERMUTATION = random.Random(1).sample(range(64), 64)
# One function per feature, each compiled to an instruction only that feature gives:
# 256-bit integer adds (AVX2), three-operand vfmadd (FMA), zmm registers (AVX-512F), 512-bit
# byte adds (BW), vpmaddwd + add folded into vpdpwssd (VNNI), a byte shuffle across the
# register as one vpermb (VBMI). The last two need AVX512-BW to compile at all.
_IR = r"""
target triple = "x86_64-unknown-linux-gnu"
declare <4 x float> @llvm.fma.v4f32(<4 x float>, <4 x float>, <4 x float>)
declare <16 x i32> @llvm.x86.avx512.pmaddw.d.512(<32 x i16>, <32 x i16>)
define void @avx2(ptr %a, ptr %b) {
  %x = load <8 x i32>, ptr %a
  %y = load <8 x i32>, ptr %b
  %s = add <8 x i32> %x, %y
  store <8 x i32> %s, ptr %a
  ret void
}
define void @fma(ptr %a) {
  %x = load <4 x float>, ptr %a
  %y = call <4 x float> @llvm.fma.v4f32(<4 x float> %x, <4 x float> %x, <4 x float> %x)
  store <4 x float> %y, ptr %a
  ret void
}
define void @avx512f(ptr %a) #0 {
  %x = load <16 x float>, ptr %a
  %y = fadd <16 x float> %x, %x
  store <16 x float> %y, ptr %a
  ret void
}
define void @avx512bw(ptr %a, ptr %b) #0 {
  %x = load <64 x i8>, ptr %a
  %y = load <64 x i8>, ptr %b
  %s = add <64 x i8> %x, %y
  store <64 x i8> %s, ptr %a
  ret void
}
@BW_ONLY@
attributes #0 = { "min-legal-vector-width"="512" }
"""
_BW_ONLY = r"""
define void @avx512vnni(ptr %a, ptr %b, ptr %c) #0 {
  %x = load <32 x i16>, ptr %a
  %y = load <32 x i16>, ptr %b
  %acc = load <16 x i32>, ptr %c
  %m = call <16 x i32> @llvm.x86.avx512.pmaddw.d.512(<32 x i16> %x, <32 x i16> %y)
  %s = add <16 x i32> %m, %acc
  store <16 x i32> %s, ptr %c
  ret void
}
define void @avx512vbmi(ptr %a) #0 {
  %x = load <64 x i8>, ptr %a
  %y = shufflevector <64 x i8> %x, <64 x i8> poison, <64 x i32> <@PERMUTATION@>
  store <64 x i8> %y, ptr %a
  ret void
}
""".replace("@PERMUTATION@", ", ".join(f"i32 {p}" for p in _PERMUTATION))
# FMA3's mnemonics only: FMA4 (bdver1) writes vfmaddps
_SIGNS = {"avx2": r"vpaddd\s[^\n]*%ymm", "fma": r"vfmadd(132|213|231)", "avx512f": r"%zmm",
          "avx512bw": r"vpaddb\s[^\n]*%zmm", "avx512vnni": r"vpdpwssd",
          "avx512vbmi": r"vperm[it]?2?b\s"}


def _functions(asm: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+):\n(.*?)\.Lfunc_end", asm, re.S | re.M))


@functools.cache
def _llvm_features(cpu: str) -> frozenset[str] | None:
    """The features LLVM's code for ``-mcpu=cpu`` uses (None: this LLVM does not know the
    name; it says so on stderr and compiles for a generic CPU)."""
    from kiln.target.llvm_toolchain import initialized_llvm

    llvm = initialized_llvm()[1]
    with tempfile.TemporaryFile() as err:  # LLVM writes to file descriptor 2 itself
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            # +64bit: an unknown name would select a 32-bit subtarget and abort the process
            machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
                cpu=cpu, features="+64bit", opt=2)
            asm = machine.emit_assembly(llvm.parse_assembly(_IR.replace("@BW_ONLY@", "")))
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        if b"not a recognized processor" in err.read():
            return None
    body = _functions(asm)
    found = {f for f, code in body.items() if re.search(_SIGNS[f], code)}
    if "avx512bw" in found:
        more = machine.emit_assembly(llvm.parse_assembly(_IR.replace("@BW_ONLY@", _BW_ONLY)))
        found |= {f for f, code in _functions(more).items()
                  if f in ("avx512vnni", "avx512vbmi") and re.search(_SIGNS[f], code)}
    return frozenset(found)


@functools.cache
def _llvm_prefers_fma4(cpu: str) -> bool:
    """Whether LLVM writes FMA4's vfmaddps for ``cpu`` (bdver2-4 have both FMA4 and FMA3 and
    get FMA4: the code then says nothing about FMA3, which gcc's macros decide)."""
    from kiln.target.llvm_toolchain import initialized_llvm

    llvm = initialized_llvm()[1]
    machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu=cpu, features="+64bit", opt=2)
    code = _functions(machine.emit_assembly(llvm.parse_assembly(
        _IR.replace("@BW_ONLY@", ""))))["fma"]
    return bool(re.search(r"vfmaddps\s[^\n]*,[^\n]*,[^\n]*,", code))


@pytest.mark.parametrize("cpu", CPUS)
def test_the_table_agrees_with_the_code_llvm_generates(cpu):
    if _llvm_features(cpu) is None:
        pytest.skip(f"llvmlite's LLVM does not know -mcpu={cpu}")
    decided = [f for f in FEATURES if not (f == "fma" and _llvm_prefers_fma4(cpu))]
    kiln = {f for f in decided if target_has_features(f, Target(f"llvm -mcpu={cpu}"))}
    assert kiln == _llvm_features(cpu) - (set(FEATURES) - set(decided))


_GCC_MACROS = {"avx2": "__AVX2__", "fma": "__FMA__", "avx512f": "__AVX512F__",
               "avx512bw": "__AVX512BW__", "avx512vnni": "__AVX512VNNI__",
               "avx512vbmi": "__AVX512VBMI__"}


def test_the_table_agrees_with_gcc_where_gcc_knows_the_cpu():
    """gcc's ``-march=cpu`` macros: a second table, kept apart from LLVM's (a gcc too old for
    a name refuses it; there must be many it knows)."""
    compared = 0
    for cpu in CPUS:
        proc = subprocess.run([cc.find_compiler(), f"-march={cpu}", "-dM", "-E", "-x", "c",
                               "/dev/null"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            continue
        gcc = {f for f, macro in _GCC_MACROS.items() if f"#define {macro} 1" in proc.stdout}
        kiln = {f for f in FEATURES if target_has_features(f, Target(f"llvm -mcpu={cpu}"))}
        assert kiln == gcc, cpu
        compared += 1
    assert compared >= 25


@pytest.mark.parametrize("cpu", ["znver4", "skx"])
def test_a_cpu_gcc_does_not_know_builds_on_the_c_target_with_its_extensions(cpu):
    """gcc 12 has no -march=znver4 (nor LLVM's skx): a ``c -mcpu=znver4`` build (the CI
    machine's own CPU) failed to compile. Such a name gets the x86-64 level and extensions
    kiln's table gives it; the kernels compute what NumPy does."""
    import numpy as np

    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.target.codegen_c import compile_options
    from kiln.target.x86 import host_features

    target = Target(f"c -mcpu={cpu}")
    x = relay.var("x", shape=(4, 40))
    func = relay.Function([x], relay.nn.softmax(relay.nn.relu(x) * relay.const(2.0)))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(func), target=target)
    options = compile_options(target)
    if not cc.compiler_accepts((f"-march={cpu}",)):
        assert "-march=x86-64-v4" in options
        assert ("-mavx512vnni" in options) == target_has_features("avx512vnni", target)
    if not {"avx512f", "avx512bw", "avx512vnni", "avx512vbmi"} <= host_features():
        pytest.skip("the host cannot run this CPU's code")
    a = np.random.default_rng(3).standard_normal((4, 40)).astype("float32")
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.run(x=a)
    e = np.exp(2 * np.maximum(a, 0) - (2 * np.maximum(a, 0)).max(axis=1, keepdims=True))
    np.testing.assert_allclose(gmod.get_output(0).numpy(), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def test_a_cpu_name_no_compiler_knows_stays_the_compilers_error():
    from kiln.target.codegen_c import compile_options

    assert "-march=notacpu" in compile_options(Target("c -mcpu=notacpu"))
