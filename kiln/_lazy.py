"""PEP 562 lazy attribute tables for package ``__init__`` files.

A package lists ``name -> "module"`` (a submodule) or ``name -> ("module", "attr")`` and
calls :func:`attach`; names are imported on first access, which keeps ``import kiln`` fast
and lets the layers arrive independently.
"""

from __future__ import annotations

import importlib
from typing import Any

# package -> its lazy table, for tests that check every entry resolves (tests/test_layering.py)
TABLES: dict[str, dict[str, Any]] = {}


def attach(package: str, table: dict[str, Any]):
    """Return ``(__getattr__, __dir__)`` for a package with the lazy ``table``."""
    TABLES[package] = table

    def __getattr__(name: str) -> Any:
        target = table.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if isinstance(target, str):
            value = importlib.import_module(target)
        else:
            value = getattr(importlib.import_module(target[0]), target[1])
        import sys

        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        import sys

        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
