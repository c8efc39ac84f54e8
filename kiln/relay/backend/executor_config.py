"""Executor and Runtime descriptions for ``relay.build`` (TVM's ``relay.backend.Executor`` /
``Runtime``).

Entry points: :class:`Executor` (``"graph"``, ``"aot"``; options such as ``link-params``,
``unpacked-api``, ``interface-api``) and :class:`Runtime` (``"cpp"``, ``"crt"``; option
``system-lib``).
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["Executor", "Runtime"]

# name -> option -> (type, default)
_EXECUTOR_OPTIONS: dict[str, dict[str, tuple[type, Any]]] = {
    "graph": {"link-params": (bool, False)},
    "aot": {"link-params": (bool, True), "unpacked-api": (bool, False),
            "interface-api": (str, "packed"), "workspace-byte-alignment": (int, 16),
            "constant-byte-alignment": (int, 16)},
    "vm": {},
}
_RUNTIME_OPTIONS: dict[str, dict[str, tuple[type, Any]]] = {
    "cpp": {"system-lib": (bool, False)},
    "crt": {"system-lib": (bool, False)},
}


class _Config:
    _TABLE: dict[str, dict[str, tuple[type, Any]]] = {}
    _WHAT = ""

    def __init__(self, name: str, options: dict | None = None) -> None:
        if name not in self._TABLE:
            raise TVMError(f"unknown {self._WHAT} {name!r}; choose one of {sorted(self._TABLE)}")
        known = self._TABLE[name]
        self.name = name
        self.attrs: dict[str, Any] = {key: default for key, (_, default) in known.items()}
        for key, value in (options or {}).items():
            if key not in known:
                raise TVMError(f"{self._WHAT} {name!r} has no option {key!r}; it has "
                               f"{sorted(known)}")
            kind = known[key][0]
            if not isinstance(value, kind):
                raise TVMError(f"{self._WHAT} option {key!r} must be {kind.__name__}, "
                               f"got {value!r}")
            self.attrs[key] = value

    def __getitem__(self, key: str) -> Any:
        return self.attrs[key]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and (self.name, self.attrs) == (other.name, other.attrs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.attrs})"


class Executor(_Config):
    """Which executor ``relay.build`` generates for: ``Executor("graph")``, ``Executor("aot",
    {"unpacked-api": True})``."""

    _TABLE = _EXECUTOR_OPTIONS
    _WHAT = "executor"


class Runtime(_Config):
    """Which runtime the build links against: ``Runtime("cpp")`` or ``Runtime("crt",
    {"system-lib": True})``."""

    _TABLE = _RUNTIME_OPTIONS
    _WHAT = "runtime"
