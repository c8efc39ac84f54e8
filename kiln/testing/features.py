"""TVM's ``tvm.testing.requires_*`` / ``uses_*`` decorators: skip what this machine cannot run.

Entry points: :class:`Feature` and its instances (``requires_llvm``, ``requires_gpu``,
``uses_gpu``, ``requires_cuda``, ...), :func:`requires_package`, :data:`slow`.

A feature is usable at compile time when kiln supports its target kind, and at run time when its
device exists (``kiln.device(kind).exist``); kiln never fakes a device, so on a machine without a
GPU the GPU tests skip exactly as they do under TVM.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

__all__ = ["Feature", "requires_package", "slow", "skip_if_32bit", "any_gpu_exists"]

GPU_KINDS = ("cuda", "rocm", "opencl", "metal", "vulkan")


def _kind_supported(kind: str) -> bool:
    """Whether kiln can compile for target kind ``kind`` here."""
    if kind == "llvm":
        from kiln.target.codegen_llvm import llvm_available

        return llvm_available()
    return kind in ("c", "opencl")


def _device_exists(kind: str) -> bool:
    from kiln.runtime.device import device

    try:
        return bool(device(kind).exist)
    except (ValueError, KeyError):
        return False


def any_gpu_exists() -> bool:
    """Whether any GPU-class device (cuda, rocm, opencl, metal, vulkan) exists here."""
    return any(_device_exists(kind) for kind in GPU_KINDS)


class Feature:
    """A capability a test needs; calling it decorates a test with marker and skip conditions.

    Parameters mirror TVM's: ``name`` (the pytest marker), ``long_name`` (used in messages),
    ``target_kind_enabled`` (a target string kiln must compile for), ``target_kind_hardware``
    (a device kind that must exist to run), ``run_time_check`` (callable returning bool or a
    skip reason), ``parent_features`` (features this one implies).
    """

    _all_features: dict[str, Feature] = {}

    def __init__(self, name: str, long_name: str | None = None, *,
                 cmake_flag: str | None = None, target_kind_enabled: str | None = None,
                 compile_time_check: Callable[[], Any] | None = None,
                 target_kind_hardware: str | None = None,
                 run_time_check: Callable[[], Any] | None = None,
                 parent_features: str | list[str] | None = None):
        self.name = name
        self.long_name = long_name or name
        # kiln has no CMake build: a feature behind a flag kiln lacks is simply unsupported.
        self.cmake_flag = cmake_flag
        self.target_kind_enabled = target_kind_enabled
        self.compile_time_check = compile_time_check
        self.target_kind_hardware = target_kind_hardware
        self.run_time_check = run_time_check
        if isinstance(parent_features, str):
            parent_features = [parent_features]
        self.parent_features = list(parent_features or [])
        Feature._all_features[name] = self

    def _skip(self, check: Callable[[], Any], what: str) -> Iterator[Any]:
        result = check()
        if result is not True:
            reason = result if isinstance(result, str) else f"{self.long_name} {what}"
            yield pytest.mark.skipif(True, reason=reason)

    def _compile_only_marks(self) -> Iterator[Any]:
        for parent in self.parent_features:
            yield from Feature._all_features[parent]._compile_only_marks()
        if self.compile_time_check is not None:
            yield from self._skip(self.compile_time_check, "is not supported by kiln")
        if self.target_kind_enabled is not None:
            kind = self.target_kind_enabled.split()[0]
            yield pytest.mark.skipif(not _kind_supported(kind),
                                     reason=f"{self.target_kind_enabled} tests disabled")

    def _run_only_marks(self) -> Iterator[Any]:
        for parent in self.parent_features:
            yield from Feature._all_features[parent]._run_only_marks()
        if self.run_time_check is not None:
            yield from self._skip(self.run_time_check, "is not present on this machine")
        if self.target_kind_hardware is not None:
            yield pytest.mark.skipif(
                not _device_exists(self.target_kind_hardware),
                reason=f"No device exists for target {self.target_kind_hardware}")

    def marks(self, support_required: str = "compile-and-run") -> list[Any]:
        """The pytest marks for a test that needs this feature (``"compile-only"`` or
        ``"compile-and-run"``; ``"optional"`` only tags the test)."""
        if support_required not in ("optional", "compile-only", "compile-and-run"):
            raise ValueError(f"support_required must be 'optional', 'compile-only' or "
                             f"'compile-and-run', got {support_required!r}")
        marks = [getattr(pytest.mark, self.name)]
        if support_required != "optional":
            marks.extend(self._compile_only_marks())
        if support_required == "compile-and-run":
            marks.extend(self._run_only_marks())
        return marks

    def __call__(self, func: Callable | None = None, *,
                 support_required: str = "compile-and-run") -> Any:
        """Decorate ``func`` (or return a decorator when called with keywords only)."""
        marks = self.marks(support_required)

        def wrapper(f: Callable) -> Callable:
            for mark in marks:
                f = mark(f)
            return f

        return wrapper if func is None else wrapper(func)

    @classmethod
    def require(cls, name: str, support_required: str = "compile-and-run") -> Callable:
        """Decorator for the feature registered as ``name``."""
        if name not in cls._all_features:
            raise KeyError(f"unknown testing feature {name!r}; known: "
                           f"{sorted(cls._all_features)}")
        return cls._all_features[name](support_required=support_required)


def _absent(what: str) -> Callable[[], str]:
    return lambda: f"{what} is not part of kiln"


requires_llvm = Feature("llvm", "LLVM", target_kind_enabled="llvm",
                        target_kind_hardware="llvm")
requires_gpu = Feature("gpu", run_time_check=any_gpu_exists)
uses_gpu = requires_gpu(support_required="optional")
requires_multi_gpu = Feature("multi_gpu", run_time_check=lambda: False)
uses_multi_gpu = requires_multi_gpu(support_required="optional")
requires_cuda = Feature("cuda", "CUDA", target_kind_enabled="cuda", target_kind_hardware="cuda",
                        parent_features="gpu")
requires_tensorcore = Feature("tensorcore", "NVIDIA Tensor Core", run_time_check=lambda: False,
                              parent_features="cuda")
requires_cudnn = Feature("cudnn", "cuDNN", parent_features="cuda")
requires_cublas = Feature("cublas", "cuBLAS", parent_features="cuda")
requires_nvptx = Feature("nvptx", "NVPTX", target_kind_enabled="nvptx", parent_features="gpu")
requires_cudagraph = Feature("cudagraph", "CUDA Graph", parent_features="cuda")
requires_opencl = Feature("opencl", "OpenCL", target_kind_enabled="opencl",
                          target_kind_hardware="opencl", parent_features="gpu")
requires_rocm = Feature("rocm", "ROCm", target_kind_enabled="rocm", target_kind_hardware="rocm",
                        parent_features="gpu")
requires_metal = Feature("metal", "Metal", target_kind_enabled="metal",
                         target_kind_hardware="metal", parent_features="gpu")
requires_vulkan = Feature("vulkan", "Vulkan", target_kind_enabled="vulkan",
                          target_kind_hardware="vulkan", parent_features="gpu")
requires_micro = Feature("micro", "MicroTVM")
requires_rpc = Feature("rpc", "RPC",
                       compile_time_check=lambda: importlib.util.find_spec("kiln.rpc") is not None
                       or "kiln.rpc is not present")
requires_hexagon = Feature("hexagon", "Hexagon", compile_time_check=_absent("Hexagon"))
requires_ethosn = Feature("ethosn", "Arm(R) Ethos(TM)-N", compile_time_check=_absent("Ethos-N"))
requires_ethosu = Feature("ethosu", "Arm(R) Ethos(TM)-U", compile_time_check=_absent("Ethos-U"))
requires_cmsisnn = Feature("cmsisnn", "CMSIS NN", compile_time_check=_absent("CMSIS-NN"))
requires_cutlass = Feature("cutlass", "CUTLASS", compile_time_check=_absent("CUTLASS"))
requires_libtorch = Feature("libtorch", "LibTorch", compile_time_check=_absent("LibTorch"))
requires_vitis_ai = Feature("vitis_ai", "Vitis AI", compile_time_check=_absent("Vitis AI"))

__all__ += [name for name, value in list(globals().items())
            if name.startswith(("requires_", "uses_")) and not name.startswith("requires_pack")]


def requires_package(*packages: str) -> Callable:
    """Skip the test unless every Python package in ``packages`` can be imported."""
    def wrapper(func: Callable) -> Callable:
        for package in packages:
            missing = importlib.util.find_spec(package) is None
            func = pytest.mark.skipif(missing, reason=f"Cannot import '{package}'")(func)
        return func

    return wrapper


def skip_if_32bit(reason: str) -> Callable:
    """Skip the test on a 32-bit interpreter."""
    import struct

    return pytest.mark.skipif(struct.calcsize("P") == 4, reason=reason)


# TVM's ``slow`` mark: slow tests run only when SKIP_SLOW_TESTS is not set.
slow = pytest.mark.skipif(os.environ.get("SKIP_SLOW_TESTS", "") not in ("", "0"),
                          reason="Skipping slow test since SKIP_SLOW_TESTS is set")
