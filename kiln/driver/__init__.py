"""kiln.driver: the compile driver (TVM's ``tvm.driver``): ``build`` from TE or TIR to a Module."""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "build": ("kiln.driver.build_module", "build"),
    "build_module": "kiln.driver.build_module",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
