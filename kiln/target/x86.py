"""x86 CPU features of a target (TVM's ``tvm.target.x86``).

Entry points: :func:`target_has_features` (whether a target's code may use an instruction
set extension), :func:`simd_32bit_lanes` (float32 lanes of its widest vector register),
:func:`host_features` and :func:`gcc_arch_options` (gcc flags for a CPU gcc does not know).

A CPU target's features come from ``-mattr`` where it names them, else from ``-mcpu`` (a
table of the x86 CPUs LLVM knows, by name prefix), else from the host: kiln compiles CPU code
for the build machine by default (``llvm`` with no ``-mcpu`` uses the host CPU,
``c`` ``-march=native``).
"""

from __future__ import annotations

import functools
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["target_has_features", "simd_32bit_lanes", "host_features", "gcc_arch_options"]

# -mcpu name prefixes of the x86 CPUs with each feature (LLVM's names, up to LLVM 22's; later
# CPUs of a line share the prefix, e.g. znver4/znver5 for AVX-512, graniterapids-d,
# icelake-client/-server, arrowlake-s). tests/target/test_x86_cpu_table.py checks every name
# against the code LLVM generates for it and against gcc's -march macros.
_AVX512_CPUS = ("skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake", "icelake",
                "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids",
                "diamondrapids", "novalake", "znver4", "znver5")
# the AVX-512 CPUs with VNNI and VBMI too: Ice Lake on, Zen 4 on
_AVX512_VNNI_VBMI_CPUS = ("icelake", "tigerlake", "rocketlake", "sapphirerapids",
                          "emeraldrapids", "graniterapids", "diamondrapids", "novalake",
                          "znver4", "znver5")
_CPUS_WITH = {
    "avx512f": _AVX512_CPUS + ("knl", "knm", "x86-64-v4"),
    "avx512bw": _AVX512_CPUS + ("x86-64-v4",),
    # AVX512-VNNI (vpdpbusd / vpdpwssd); Alder Lake's VEX "avxvnni" is another feature
    "avx512vnni": _AVX512_VNNI_VBMI_CPUS + ("cascadelake", "cooperlake"),
    "avx512vbmi": _AVX512_VNNI_VBMI_CPUS + ("cannonlake",),
    # the hybrid and E-core lines (Alder Lake on, Sierra Forest on) have AVX2 but no AVX-512
    "avx2": _AVX512_CPUS + ("haswell", "core-avx2", "broadwell", "skylake", "alderlake",
                            "raptorlake", "meteorlake", "arrowlake", "lunarlake",
                            "pantherlake", "wildcatlake", "gracemont", "sierraforest",
                            "grandridge", "clearwaterforest", "znver", "bdver4",
                            "x86-64-v3", "x86-64-v4", "knl", "knm"),
}
# every AVX2 CPU above has FMA3, and so do the AMD lines before AVX2 (Piledriver on)
_CPUS_WITH["fma"] = _CPUS_WITH["avx2"] + ("bdver2", "bdver3")
# features that ``-mattr=+X`` brings with it (every AVX-512 CPU has AVX2 and FMA)
_IMPLIED_BY = {"avx2": ("avx512f",), "fma": ("avx512f",)}
# /proc/cpuinfo flag names that differ from LLVM's feature names
_CPUINFO_FLAG = {"sse4.1": "sse4_1", "sse4.2": "sse4_2"}


@functools.cache
def host_features() -> frozenset[str]:
    """The host CPU's features (LLVM names): from llvmlite, else /proc/cpuinfo's flags (asked
    once: an LLVM call waits while kiln's LLVM thread compiles)."""
    try:
        import llvmlite.binding as llvm

        return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)
    except (ImportError, RuntimeError):
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = set(line.split(":", 1)[1].split())
                        return frozenset(flags | {k for k, v in _CPUINFO_FLAG.items()
                                                  if v in flags})
        except OSError:
            pass
    return frozenset()


def target_has_features(features: str | list[str], target: Any = None) -> bool:
    """Whether code for ``target`` (default: the current target, else the host) may use every
    x86 feature in ``features`` (LLVM names: ``"avx2"``, ``"avx512f"``, ``"fma"`` ...).

    Example
    -------
    >>> from kiln.target import Target
    >>> from kiln.target.x86 import target_has_features
    >>> target_has_features("avx512f", Target("llvm -mcpu=znver3"))
    False
    >>> target_has_features(["avx2", "avx512f"], Target("llvm -mcpu=skylake-avx512"))
    True
    """
    if target is None:
        from kiln.target.target import Target

        target = Target.current(allow_none=True)
    names = [features] if isinstance(features, str) else list(features)
    return all(_has(name, target) for name in names)


def _has(feature: str, target: Any) -> bool:
    mattr = list(getattr(target, "mattr", []) or []) if target is not None else []
    if f"-{feature}" in mattr:
        return False
    if f"+{feature}" in mattr or any(f"+{f}" in mattr for f in _IMPLIED_BY.get(feature, ())):
        return True
    mcpu = (getattr(target, "mcpu", "") or "") if target is not None else ""
    if mcpu and mcpu != "native":
        if feature not in _CPUS_WITH:
            raise TVMError(f"target_has_features: kiln's table of x86 CPUs does not list "
                           f"{feature!r} (known: {', '.join(sorted(_CPUS_WITH))}); name it in "
                           f"-mattr (+{feature} / -{feature}) to decide for -mcpu={mcpu}")
        return mcpu.startswith(_CPUS_WITH[feature])
    return feature in host_features()


def simd_32bit_lanes(target: Any = None) -> int:
    """float32 lanes of ``target``'s widest vector register: 16 with AVX-512, 8 with AVX2,
    else 4 (TVM's ``topi.x86.utils.get_simd_32bit_lanes``)."""
    if target_has_features("avx512f", target):
        return 16
    return 8 if target_has_features("avx2", target) else 4


def gcc_arch_options(target: Any) -> list[str] | None:
    """gcc flags giving ``target``'s ``-mcpu`` the instruction set extensions kiln's table says
    it has, for a gcc that does not know the name (gcc 12 and ``znver4``, LLVM's ``skx``):
    the x86-64 level (v4: AVX-512 F/BW/CD/DQ/VL; v3: AVX2, FMA) plus VNNI and VBMI. None for
    a CPU without AVX2 in the table (an unknown name stays gcc's error).

    Example
    -------
    >>> from kiln.target import Target
    >>> gcc_arch_options(Target("c -mcpu=znver4"))
    ['-march=x86-64-v4', '-mavx512vnni', '-mavx512vbmi']
    """
    if target_has_features(["avx512f", "avx512bw"], target):
        return ["-march=x86-64-v4"] + [f"-m{f}" for f in ("avx512vnni", "avx512vbmi")
                                       if target_has_features(f, target)]
    if target_has_features(["avx2", "fma"], target):
        return ["-march=x86-64-v3"]
    return None
