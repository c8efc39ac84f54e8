"""VM values: closures, and Python arguments converted and checked for a VM function.

Entry points: :class:`VMClosure`, :func:`convert_argument`, :func:`check_argument`,
:func:`spec_str`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime import ndarray as _nd
from kiln.runtime.container import ADT, Closure
from kiln.runtime.device import Device
from kiln.runtime.error import TVMError
from kiln.runtime.object import register_object
from kiln.runtime.vm.executable import VMFunction

__all__ = ["VMClosure", "convert_argument", "check_argument", "spec_str"]

_NDArray = _nd.NDArray


@register_object("vm.Closure")
class VMClosure(Closure):
    """A VM function value: ``func_index`` plus the captured ``free_vars`` (passed first)."""

    _fields = {"func_index": int, "free_vars": "any"}

    def __init__(self, func_index: int, free_vars: Sequence[Any] = ()) -> None:
        self._set("func_index", func_index)
        self._set("free_vars", tuple(free_vars))


def convert_argument(value: Any, device: Device) -> Any:
    """A Python argument as a VM value (TVM's conversion rules)."""
    if isinstance(value, _NDArray | VMClosure):
        return value
    if isinstance(value, ADT):
        # Convert NumPy/scalar fields; nested ADTs are taken as they are (no recursion,
        # so a long cons list passes in constant stack).
        if all(isinstance(f, _NDArray | ADT | VMClosure) for f in value.fields):
            return value
        return ADT(value.tag, [f if isinstance(f, _NDArray | ADT | VMClosure)
                               else convert_argument(f, device) for f in value.fields])
    if isinstance(value, np.ndarray | np.generic):
        return _nd.array(value, device)
    if isinstance(value, tuple | list):
        return ADT(0, [convert_argument(v, device) for v in value])
    if isinstance(value, bool):
        return _nd.array(np.array(value, dtype="bool"), device)
    if isinstance(value, int):
        return _nd.array(np.array(value, dtype="int32"), device)
    if isinstance(value, float):
        return _nd.array(np.array(value, dtype="float32"), device)
    raise TVMError(f"cannot pass a {type(value).__name__} to the VM; use an NDArray, a "
                   "NumPy array, a tuple/list of them, or a Python scalar")


def check_argument(func: VMFunction, index: int, value: Any) -> None:
    """Raise unless ``value`` fits parameter ``index`` of ``func`` (shape, dtype)."""
    spec = func.param_types[index] if index < len(func.param_types) else None
    if spec is None:
        return
    shape, dtype = spec
    if not isinstance(value, _NDArray):
        raise TVMError(f"@{func.name} argument {index} ({func.params[index]!r}) expects a "
                       f"tensor {spec_str(spec)}, got {type(value).__name__}")
    actual = value.shape
    if (value.dtype != dtype or len(actual) != len(shape)
            or any(d != e and e != -1 for d, e in zip(actual, shape))):
        raise TVMError(f"@{func.name} argument {index} ({func.params[index]!r}) expects "
                       f"{spec_str(spec)}, got {spec_str((actual, value.dtype))}")


def spec_str(spec: tuple[tuple[int, ...], str]) -> str:
    """A tensor type as ``Tensor[(8, ?), float32]`` (``?`` for a dynamic dimension)."""
    shape, dtype = spec
    dims = ", ".join("?" if d == -1 else str(d) for d in shape)
    return f"Tensor[({dims}{',' if len(shape) == 1 else ''}), {dtype}]"
