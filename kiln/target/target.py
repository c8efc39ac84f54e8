"""Compilation targets: what to generate code for (TVM's ``tvm.target``).

Entry points: :class:`Target`, :class:`TargetKind`, :data:`TARGET_KINDS`, and the helpers
:func:`arm_cpu`, :func:`cuda`, :func:`rasp`, :func:`micro`.

A target is a *kind* (``llvm``, ``c``, ``cuda`` …) plus typed attributes parsed from TVM's
string form ``"llvm -mcpu=znver3 -mattr=+avx2,+fma -num-cores=2"`` or from a dict
``{"kind": "c", "mcpu": "cortex-m7"}``. ``keys`` select operator strategies (``cpu``,
``arm_cpu``, ``gpu``); ``host`` is the target that runs the host side of a device program.
``with target:`` makes it :meth:`Target.current`.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = ["Target", "TargetKind", "TARGET_KINDS", "arm_cpu", "cuda", "rasp", "micro"]

# Attribute name -> how a string value parses. Every kind accepts these.
_COMMON_OPTIONS: dict[str, type] = {
    "keys": list,
    "device": str,
    "model": str,
    "libs": list,
    "tag": str,
    "from_device": int,
    "opt-level": int,
}
_CPU_OPTIONS: dict[str, type] = {
    "mcpu": str,
    "mtriple": str,
    "mattr": list,
    "mabi": str,
    "mfloat-abi": str,
    "num-cores": int,
    "system-lib": bool,
    "link-params": bool,
    "runtime": str,
    "unpacked-api": bool,
    "interface-api": str,
    "fast-math": bool,
    # TVM 0.8 put the executor in the target string ("c -executor=aot -unpacked-api=1")
    "executor": str,
    "workspace-byte-alignment": int,
    "constants-byte-alignment": int,
}
_GPU_OPTIONS: dict[str, type] = {
    "arch": str,
    "max_num_threads": int,
    "thread_warp_size": int,
    "max_threads_per_block": int,
    "max_shared_memory_per_block": int,
    "mcpu": str,
    "mtriple": str,
}


@dataclass(frozen=True)
class TargetKind:
    """A registered target kind: its name, DLPack device type, default keys and options."""

    name: str
    device_type: int
    default_keys: tuple[str, ...]
    options: Mapping[str, type] = field(default_factory=dict)

    def option_type(self, name: str) -> type | None:
        """The Python type of option ``name`` (kind-specific or common), or None."""
        return self.options.get(name) or _COMMON_OPTIONS.get(name)

    def __str__(self) -> str:
        return self.name


def _kind(name: str, device_type: int, keys: tuple[str, ...], options: dict) -> TargetKind:
    return TargetKind(name, device_type, keys, options)


# The one table of target kinds (device types are DLPack's kDLCPU=1, kDLCUDA=2 …).
TARGET_KINDS: dict[str, TargetKind] = {
    kind.name: kind
    for kind in (
        _kind("llvm", 1, ("cpu",), _CPU_OPTIONS),
        _kind("c", 1, ("cpu",), _CPU_OPTIONS),
        _kind("cuda", 2, ("cuda", "gpu"), _GPU_OPTIONS),
        _kind("opencl", 4, ("opencl", "gpu"), _GPU_OPTIONS),
        _kind("vulkan", 7, ("vulkan", "gpu"), _GPU_OPTIONS),
        _kind("metal", 8, ("metal", "gpu"), _GPU_OPTIONS),
        _kind("rocm", 10, ("rocm", "gpu"), _GPU_OPTIONS),
        _kind("ext_dev", 12, ("ext_dev",), _CPU_OPTIONS),
        _kind("hexagon", 16, ("hexagon",), _CPU_OPTIONS),
    )
}
# Attribute values that put "arm_cpu" in the keys (TVM infers it from -device and -mcpu).
_ARM_CPU_PREFIXES = ("cortex-", "arm", "neoverse", "apple-")

_scope = threading.local()


def _parse_value(kind: TargetKind, name: str, text: str | None) -> Any:
    expected = kind.option_type(name)
    if expected is None:
        known = ", ".join(sorted({*kind.options, *_COMMON_OPTIONS}))
        raise TVMError(f"Unknown option '-{name}' for target kind '{kind.name}'; known: {known}")
    if text is None:
        if expected is not bool:
            raise TVMError(f"Target option '-{name}' needs a value (-{name}=...)")
        return True
    if expected is bool:
        lowered = text.lower()
        if lowered not in ("true", "false", "1", "0"):
            raise TVMError(f"Target option '-{name}' expects true/false, got {text!r}")
        return lowered in ("true", "1")
    if expected is int:
        try:
            return int(text)
        except ValueError:
            raise TVMError(f"Target option '-{name}' expects an integer, got {text!r}") from None
    if expected is list:
        return [item for item in text.split(",") if item]
    return text


def _check_value(kind: TargetKind, name: str, value: Any) -> Any:
    """Validate a value from a dict config (strings parse like the string form)."""
    if isinstance(value, str):
        return _parse_value(kind, name, value)
    expected = kind.option_type(name)
    if expected is None:
        return _parse_value(kind, name, "")  # raises the unknown-option error
    if expected is list and isinstance(value, list | tuple):
        return [str(v) for v in value]
    if expected is bool and isinstance(value, bool) or expected is int and isinstance(value, int):
        return value
    raise TVMError(f"Target option '{name}' expects {expected.__name__}, got {value!r}")


def _lookup_kind(name: str) -> TargetKind:
    try:
        return TARGET_KINDS[name]
    except KeyError:
        known = ", ".join(sorted(TARGET_KINDS))
        raise TVMError(f"Unknown target kind '{name}'; known kinds: {known}") from None


@register_object("Target")
class Target(Object):
    """A compilation target (TVM's ``tvm.target.Target``).

    Parameters
    ----------
    target : str, dict or Target
        ``"llvm -mcpu=znver3"``, ``"c -keys=arm_cpu -mcpu=cortex-m7"``, or
        ``{"kind": "llvm", "mcpu": "znver3"}``. A dict may hold ``"host"``.
    host : str, dict or Target, optional
        The target of the host code (defaults to none, i.e. the target itself for CPUs).

    Example
    -------
    >>> t = Target("c -keys=arm_cpu -mcpu=cortex-m7 -model=stm32f746xx")
    >>> t.kind.name, t.keys, t.mcpu
    ('c', ('arm_cpu', 'cpu'), 'cortex-m7')
    >>> str(Target("llvm -mcpu=znver3 -opt-level=3"))
    'llvm -keys=cpu -mcpu=znver3 -opt-level=3'
    """

    _fields = {"kind": "any", "keys": "any", "attrs": "any", "host": Object}

    def __init__(self, target: str | Mapping | Target, host: str | Mapping | Target | None = None):
        if isinstance(target, Target):
            config = {"kind": target.kind.name, **target.attrs}
            if target.host is not None and host is None:
                host = target.host
        elif isinstance(target, Mapping):
            config = dict(target)
        elif isinstance(target, str):
            config = _parse_string(target)
        else:
            raise TVMError(f"Target expects a string, dict or Target, got {type(target).__name__}")
        kind_name = config.pop("kind", None)
        if not kind_name:
            raise TVMError(f"Target config needs a 'kind', got {config!r}")
        kind = _lookup_kind(str(kind_name))
        if "host" in config:
            host = config.pop("host") if host is None else host
            config.pop("host", None)
        attrs = {name: _check_value(kind, name, value) for name, value in config.items()}
        keys = _infer_keys(kind, attrs)
        attrs.pop("keys", None)
        host_target = None if host is None else Target(host)
        super().__init__(kind, keys, attrs, host_target)

    # -- attribute views --------------------------------------------------------------------
    @property
    def mcpu(self) -> str:
        """The ``-mcpu`` option ("" when not given)."""
        return self.attrs.get("mcpu", "")

    @property
    def mattr(self) -> list[str]:
        """The ``-mattr`` features, e.g. ``["+avx2"]``."""
        return list(self.attrs.get("mattr", []))

    @property
    def model(self) -> str:
        """The ``-model`` option (``"unknown"`` when not given)."""
        return self.attrs.get("model", "unknown")

    @property
    def libs(self) -> list[str]:
        """The ``-libs`` option: external libraries the target may call."""
        return list(self.attrs.get("libs", []))

    @property
    def device_name(self) -> str:
        """The ``-device`` option (e.g. ``"arm_cpu"``), "" when not given."""
        return self.attrs.get("device", "")

    @property
    def opt_level(self) -> int:
        """The ``-opt-level`` option (default 3)."""
        return int(self.attrs.get("opt-level", 3))

    @property
    def num_cores(self) -> int | None:
        """The ``-num-cores`` option, or None."""
        return self.attrs.get("num-cores")

    @property
    def device_type(self) -> int:
        """The DLPack device type code of the target's kind (1 = CPU)."""
        return self.kind.device_type

    def get_target_device_type(self) -> int:
        """The DLPack device type code (TVM's method name)."""
        return self.kind.device_type

    def export(self) -> dict[str, Any]:
        """The target as a dict (TVM's ``Target.export``), round-trips through ``Target``."""
        out: dict[str, Any] = {"kind": self.kind.name, "keys": list(self.keys), **self.attrs}
        if self.host is not None:
            out["host"] = self.host.export()
        return out

    def with_host(self, host: str | Mapping | Target) -> Target:
        """This target with ``host`` as its host target."""
        return Target(self, host)

    # -- scoping ----------------------------------------------------------------------------
    @staticmethod
    def current(allow_none: bool = True) -> Target | None:
        """The innermost target entered with ``with target:``.

        Example
        -------
        >>> with Target("llvm"):
        ...     Target.current().kind.name
        'llvm'
        """
        stack = getattr(_scope, "stack", [])
        if stack:
            return stack[-1]
        if not allow_none:
            raise TVMError("Target.current(allow_none=False): no target is in scope")
        return None

    def __enter__(self) -> Target:
        if not hasattr(_scope, "stack"):
            _scope.stack = []
        _scope.stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _scope.stack.pop()

    # -- printing and identity --------------------------------------------------------------
    def __str__(self) -> str:
        parts = [self.kind.name]
        if self.keys:
            parts.append("-keys=" + ",".join(self.keys))
        for name in sorted(self.attrs):
            value = self.attrs[name]
            if isinstance(value, bool):
                parts.append(f"-{name}={'true' if value else 'false'}" if not value
                             else f"-{name}")
            elif isinstance(value, list):
                parts.append(f"-{name}=" + ",".join(value))
            else:
                parts.append(f"-{name}={value}")
        return " ".join(parts)

    def __repr__(self) -> str:
        host = f", host={str(self.host)!r}" if self.host is not None else ""
        return f"Target({str(self)!r}{host})"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, str):
            try:
                other = Target(other)
            except TVMError:
                return False
        if not isinstance(other, Target):
            return NotImplemented
        return str(self) == str(other) and str(self.host) == str(other.host)

    def __hash__(self) -> int:
        return hash((str(self), str(self.host)))

    @staticmethod
    def list_kinds() -> list[str]:
        """The names of every target kind kiln knows."""
        return sorted(TARGET_KINDS)

    @staticmethod
    def canon_target(target: Any) -> Target | None:
        """``None`` stays ``None``; strings and dicts become Targets."""
        return None if target is None else Target(target)

    @staticmethod
    def canon_target_and_host(target: Any, host: Any = None) -> tuple[Target | None, Any]:
        """Canonical ``(target, host)``: Targets, the host folded into the target."""
        target = Target.canon_target(target)
        if target is None:
            return None, Target.canon_target(host)
        if host is not None:
            target = Target(target, host)
        return target, target.host


def _parse_string(text: str) -> dict[str, Any]:
    """``"llvm -mcpu=x -mattr=+a,+b -system-lib"`` -> ``{"kind": "llvm", "mcpu": "x", ...}``."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise TVMError(f"Cannot parse target string {text!r}: {err}") from None
    if not words:
        raise TVMError("Target string is empty")
    kind = _lookup_kind(words[0])
    config: dict[str, Any] = {"kind": kind.name}
    for word in words[1:]:
        if not word.startswith("-"):
            raise TVMError(f"Target option {word!r} in {text!r} must start with '-'")
        name, sep, value = word.lstrip("-").partition("=")
        config[name] = _parse_value(kind, name, value if sep else None)
    return config


def _infer_keys(kind: TargetKind, attrs: Mapping[str, Any]) -> tuple[str, ...]:
    keys = list(attrs.get("keys", []))
    device = attrs.get("device", "")
    mcpu = attrs.get("mcpu", "")
    if device and device not in keys:
        keys.append(device)
    if kind.name in ("llvm", "c") and mcpu.startswith(_ARM_CPU_PREFIXES) and "arm_cpu" not in keys:
        keys.append("arm_cpu")
    keys.extend(key for key in kind.default_keys if key not in keys)
    return tuple(keys)


# -- helpers (TVM's tvm.target.arm_cpu() etc.) ----------------------------------------------

_ARM_MODELS = {
    "pixel2": "-model=snapdragon835 -mtriple=arm64-linux-android -mattr=+neon",
    "rasp3b": "-model=bcm2837 -mtriple=armv7l-linux-gnueabihf -mattr=+neon",
    "rasp4b": "-model=bcm2711 -mtriple=armv8l-linux-gnueabihf -mattr=+neon -mcpu=cortex-a72",
    "rk3399": "-model=rk3399 -mtriple=aarch64-linux-gnu -mattr=+neon",
}


def arm_cpu(model: str = "unknown", options: str | list[str] | None = None) -> Target:
    """An ARM CPU LLVM target (``llvm -device=arm_cpu``) for a known board model.

    Example
    -------
    >>> arm_cpu("rasp4b").keys
    ('arm_cpu', 'cpu')
    """
    extra = _ARM_MODELS.get(model, f"-model={model}")
    return Target(f"llvm -device=arm_cpu {extra} {_join(options)}".strip())


def rasp(options: str | list[str] | None = None) -> Target:
    """Raspberry Pi 3b (TVM's ``tvm.target.rasp``)."""
    return arm_cpu("rasp3b", options)


def cuda(model: str = "unknown", arch: str | None = None,
         options: str | list[str] | None = None) -> Target:
    """A CUDA target (kiln generates no CUDA code; usable for target queries)."""
    arch_opt = f"-arch={arch}" if arch else ""
    return Target(f"cuda -model={model} {arch_opt} {_join(options)}".strip())


_MICRO_MCPU = {
    "host": None,
    "stm32f746xx": "cortex-m7",
    "nrf5340dk": "cortex-m33",
    "stm32l4r5zi": "cortex-m4",
    "mps2_an521": "cortex-m33",
}


def micro(model: str = "host", options: str | list[str] | None = None) -> Target:
    """A microTVM C target for a board model (TVM's ``tvm.target.target.micro``).

    Example
    -------
    >>> str(micro("stm32f746xx"))
    'c -keys=arm_cpu,cpu -mcpu=cortex-m7 -model=stm32f746xx'
    """
    if model not in _MICRO_MCPU:
        raise TVMError(f"Unknown micro model {model!r}; known: {', '.join(_MICRO_MCPU)}")
    mcpu = _MICRO_MCPU[model]
    mcpu_opt = f"-mcpu={mcpu}" if mcpu else ""
    return Target(f"c -model={model} {mcpu_opt} {_join(options)}".strip())


def _join(options: str | list[str] | None) -> str:
    if options is None:
        return ""
    return options if isinstance(options, str) else " ".join(options)
