"""Executor and Runtime descriptions for ``relay.build`` (TVM's ``relay.backend.Executor`` /
``Runtime``).

Entry points: :class:`Executor` (``"graph"``, ``"aot"``; options such as ``link-params``,
``unpacked-api``, ``interface-api``) and :class:`Runtime` (``"cpp"``, ``"crt"``; option
``system-lib``), each with TVM's ``list_registered()`` and ``list_registered_options(name)``,
and :func:`check_combination`, which refuses what ``relay.build`` cannot produce.

As in TVM (``src/relay/backend/executor.cc``, ``runtime.cc``), an option with a registered
default is always present in ``attrs``; one without a default is present only when given, so
``"interface-api" in Executor("aot")`` is False until the user sets it.
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["Executor", "Runtime", "check_combination"]

# name -> option -> (type, default or None)
_EXECUTOR_OPTIONS: dict[str, dict[str, tuple[type, Any]]] = {
    "aot": {"link-params": (bool, True), "unpacked-api": (bool, None),
            "interface-api": (str, None), "workspace-byte-alignment": (int, None),
            "constant-byte-alignment": (int, None)},
    "graph": {"link-params": (bool, False)},
}
_RUNTIME_OPTIONS: dict[str, dict[str, tuple[type, Any]]] = {
    "cpp": {"system-lib": (bool, None)},
    "crt": {"system-lib": (bool, None)},
}
# TVM's names for the option types (ListExecutorOptions / ListRuntimeOptions)
_TYPE_KEYS = {bool: "IntImm", int: "IntImm", str: "runtime.String"}
# option -> allowed values, where the set is closed
_CHOICES = {"interface-api": ("packed", "c")}


class _Config:
    _TABLE: dict[str, dict[str, tuple[type, Any]]] = {}
    _WHAT = ""

    def __init__(self, name: str, options: dict | None = None) -> None:
        if name not in self._TABLE:
            raise TVMError(f"unknown {self._WHAT} {name!r}; choose one of {sorted(self._TABLE)}")
        known = self._TABLE[name]
        self.name = name
        self.attrs: dict[str, Any] = {key: default for key, (_, default) in known.items()
                                      if default is not None}
        for key, value in (options or {}).items():
            if key not in known:
                raise TVMError(f"{self._WHAT} {name!r} has no option {key!r}; it has "
                               f"{sorted(known)}")
            kind = known[key][0]
            if kind is bool and isinstance(value, int) and value in (0, 1):
                value = bool(value)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TVMError(f"{self._WHAT} option {key!r} must be {kind.__name__}, "
                               f"got {value!r}")
            if key in _CHOICES and value not in _CHOICES[key]:
                raise TVMError(f"{self._WHAT} option {key!r} must be one of {_CHOICES[key]}, "
                               f"got {value!r}")
            if kind is int and value <= 0:
                raise TVMError(f"{self._WHAT} option {key!r} must be positive, got {value}")
            self.attrs[key] = value

    def __contains__(self, key: str) -> bool:
        return key in self.attrs

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (self.name, self.attrs) == (other.name, other.attrs)

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.attrs.items()))))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.attrs})"

    @classmethod
    def list_registered(cls) -> list[str]:
        """The registered names (TVM's ``ListExecutors`` / ``ListRuntimes``)."""
        return sorted(cls._TABLE)

    @classmethod
    def list_registered_options(cls, name: str) -> dict[str, str]:
        """``{option: TVM type key}`` of one registered name."""
        if str(name) not in cls._TABLE:
            raise TVMError(f"unknown {cls._WHAT} {name!r}; choose one of {sorted(cls._TABLE)}")
        return {key: _TYPE_KEYS[kind] for key, (kind, _) in cls._TABLE[str(name)].items()}


class Executor(_Config):
    """Which executor ``relay.build`` generates for: ``Executor("graph")``, ``Executor("aot",
    {"unpacked-api": True})``.

    Example
    -------
    >>> Executor.list_registered()
    ['aot', 'graph']
    >>> "interface-api" in Executor("aot"), Executor("aot")["link-params"]
    (False, True)
    """

    _TABLE = _EXECUTOR_OPTIONS
    _WHAT = "executor"


class Runtime(_Config):
    """Which runtime the build links against: ``Runtime("cpp")`` or ``Runtime("crt",
    {"system-lib": True})``."""

    _TABLE = _RUNTIME_OPTIONS
    _WHAT = "runtime"


def check_combination(executor: Executor, runtime: Runtime) -> tuple[bool, str]:
    """``(unpacked, interface_api)`` of a valid executor/runtime pair, else a TVMError naming
    the valid combinations (TVM's checks in ``AOTExecutorCodegen::Codegen``, issue #12060)."""
    if executor.name != "aot":
        return False, "packed"
    unpacked = bool(executor.get("unpacked-api", False))
    interface = executor.get("interface-api", "packed")
    if runtime.name == "crt":
        if interface == "c" and not unpacked:
            raise TVMError(
                "Executor('aot') with Runtime('crt'): interface-api 'c' needs unpacked-api "
                f"True (got unpacked-api={unpacked}); valid combinations are interface-api "
                "'packed' with unpacked-api False or True, and interface-api 'c' with "
                "unpacked-api True")
    elif unpacked or interface != "packed":
        raise TVMError(
            "Executor('aot') with Runtime('cpp') needs unpacked-api False and interface-api "
            f"'packed' (got unpacked-api={unpacked}, interface-api={interface!r}); use "
            "Runtime('crt') for the C interface or the unpacked API")
    return unpacked, interface
