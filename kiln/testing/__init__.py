"""Testing helpers with TVM's names (``tvm.testing``).

Entry points: :func:`assert_allclose`, :func:`check_numerical_grads`, :func:`enabled_targets`,
:func:`device_enabled`, the FFI test functions (:func:`echo`, :func:`nop`,
:func:`device_test`, :func:`object_use_count`); pytest decorators and fixtures load lazily from
:mod:`~kiln.testing.features` (``requires_llvm``, ``uses_gpu``, ``requires_package``, ...) and
:mod:`~kiln.testing.params` (``parametrize_targets``, ``parameter``, ``fixture``, ...), so
importing this package needs pytest only when those are used.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from kiln._lazy import attach
from kiln.runtime.error import TVMError

_FEATURES = ("Feature", "requires_package", "slow", "skip_if_32bit", "requires_llvm",
             "requires_gpu", "uses_gpu", "requires_multi_gpu", "uses_multi_gpu", "requires_cuda",
             "requires_tensorcore", "requires_cudnn", "requires_cublas", "requires_nvptx",
             "requires_cudagraph", "requires_opencl", "requires_rocm", "requires_metal",
             "requires_vulkan", "requires_micro", "requires_rpc", "requires_hexagon",
             "requires_ethosn", "requires_ethosu", "requires_cmsisnn", "requires_cutlass",
             "requires_libtorch", "requires_vitis_ai")
_PARAMS = ("parametrize_targets", "exclude_targets", "known_failing_targets", "parameter",
           "parameters", "fixture")
_LAZY = {name: ("kiln.testing.features", name) for name in _FEATURES}
_LAZY.update({name: ("kiln.testing.params", name) for name in _PARAMS})
_LAZY["plugin"] = "kiln.testing.plugin"
_LAZY["aot"] = "kiln.testing.aot"
__getattr__, __dir__ = attach(__name__, _LAZY)

__all__ = ["assert_allclose", "check_numerical_grads", "enabled_targets", "device_enabled",
           "echo", "nop", "device_test", "object_use_count", *_FEATURES, *_PARAMS]


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


def check_numerical_grads(function: Any, input_values: Any, grad_values: Any,
                          function_value: float | None = None, delta: float = 1e-3,
                          atol: float = 1e-2, rtol: float = 0.1) -> None:
    """Check analytical gradients ``grad_values`` against finite differences of ``function``.

    ``input_values``/``grad_values`` are both lists (``function(*inputs)``) or both dicts
    (``function(**inputs)``); ``function`` returns a scalar. Each partial derivative starts as a
    forward difference and is refined (central, then five-point) only where it disagrees; a
    gradient fails when ``||numerical - analytical|| > atol * sqrt(n) + rtol * ||numerical||``.
    """
    if not isinstance(input_values, dict):
        keys = [str(i) for i in range(len(input_values))]
        positional = function
        input_values = dict(zip(keys, input_values, strict=True))
        grad_values = dict(zip(keys, grad_values, strict=True))

        def function(**kwargs):
            return positional(*(kwargs[k] for k in keys))

    inputs = {name: np.asarray(value) for name, value in input_values.items()}
    if function_value is None:
        function_value = function(**inputs)

    def derivative(name: str, j: int, step: float) -> float:
        moved = inputs[name].copy()
        moved.reshape(-1)[j] += step
        return (function(**{**inputs, name: moved}) - function_value) / step

    for name, grad in grad_values.items():
        grad = np.asarray(grad)
        if name not in inputs:
            raise AssertionError(f"Gradient given for '{name}', which is not an input")
        if grad.shape != inputs[name].shape:
            raise AssertionError(f"Gradient wrt '{name}' has unexpected shape {grad.shape}, "
                                 f"expected {inputs[name].shape} ")
        flat = grad.reshape(-1)

        def agrees(j: int, value: float, flat: np.ndarray = flat) -> bool:
            return abs(value - flat[j]) < atol + rtol * abs(value)

        numerical = np.zeros(grad.shape, dtype="float64")
        wrong = []
        for j in range(flat.size):
            value = derivative(name, j, delta)
            if not agrees(j, value):
                value = (derivative(name, j, -delta) + value) / 2
                if not agrees(j, value):
                    half = (derivative(name, j, delta / 2) + derivative(name, j, -delta / 2)) / 2
                    value = (4 * half - value) / 3
            if not agrees(j, value):
                wrong.append(np.unravel_index(j, grad.shape))
            numerical.reshape(-1)[j] = value
        dist = float(np.sqrt(np.sum((numerical - grad) ** 2)))
        norm = float(np.sqrt(np.sum(numerical ** 2)))
        if not (np.isfinite(dist) and np.isfinite(norm)):
            raise ValueError(f"NaN or infinity detected during numerical gradient checking wrt "
                             f"'{name}'\nanalytical grad = {grad}\n numerical grad = {numerical}")
        bound = atol * np.sqrt(float(grad.size)) + rtol * norm
        if dist > bound:
            raise AssertionError(
                f"Analytical and numerical grads wrt '{name}' differ too much\n"
                f"analytical grad = {grad}\n numerical grad = {numerical}\n"
                f"{int(100 * len(wrong) / grad.size)}% of elements differ, first 10 of wrong "
                f"positions: {wrong[:10]}\ndistance {dist} > {bound}")


def echo(value: Any) -> Any:
    """TVM's ``testing.echo``: returns its argument (checks a value's round trip)."""
    return value


def nop(*args: Any) -> None:
    """TVM's ``testing.nop``: takes anything, does nothing."""


def device_test(dev: Any, device_type: int, device_id: int) -> Any:
    """TVM's ``testing.device_test``: returns ``dev`` after checking its type and id."""
    if int(dev.device_type) != int(device_type) or int(dev.device_id) != int(device_id):
        raise TVMError(f"device_test: expected device ({device_type}, {device_id}), got "
                       f"({int(dev.device_type)}, {int(dev.device_id)})")
    return dev


def object_use_count(obj: Any) -> int:
    """How many references hold ``obj``, not counting this call's argument (TVM's
    ``testing.object_use_count``). A diagnostic from CPython's reference count, not a
    contract kiln's behaviour relies on."""
    # getrefcount sees the caller's reference, this frame's parameter and its own argument.
    return sys.getrefcount(obj) - 2
