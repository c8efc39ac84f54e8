"""Testing helpers with TVM's names (``tvm.testing``).

Entry points: :func:`assert_allclose`, :func:`enabled_targets`, :func:`device_enabled`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assert_allclose", "enabled_targets", "device_enabled"]


def _numpy(value: Any) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


def assert_allclose(actual: Any, desired: Any, rtol: float = 1e-7, atol: float = 1e-7) -> None:
    """NumPy's ``assert_allclose`` that also accepts NDArrays; shapes must match exactly.

    Example
    -------
    >>> import kiln
    >>> assert_allclose(kiln.nd.array([1.0, 2.0]), [1.0, 2.0])
    """
    actual, desired = _numpy(actual), _numpy(desired)
    np.testing.assert_equal(actual.shape, desired.shape)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol, verbose=True)


def enabled_targets() -> list[tuple[str, Any]]:
    """``(target, device)`` pairs this machine can run: ``c`` always, ``llvm`` with llvmlite."""
    from kiln.runtime.device import cpu
    from kiln.target.codegen_llvm import llvm_available

    targets = [("c", cpu(0))]
    if llvm_available():
        targets.append(("llvm", cpu(0)))
    return targets


def device_enabled(target: str) -> bool:
    """Whether ``target`` (a target string) can run here."""
    kind = target.split()[0]
    return any(kind == t for t, _ in enabled_targets())
