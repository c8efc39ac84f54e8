"""VM values: closures, and Python arguments converted and checked for a VM function.

Entry points: :class:`VMClosure`, :func:`convert_argument`, :func:`check_argument`,
:func:`spec_str` and :class:`ConvertedInputs` (NumPy arguments refilled in place).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.runtime import ndarray as _nd
from kiln.runtime.container import ADT, Closure
from kiln.runtime.device import Device
from kiln.runtime.device_api import DeviceNDArray
from kiln.runtime.error import TVMError
from kiln.runtime.object import register_object
from kiln.runtime.vm.executable import VMFunction
from kiln.runtime.vm.memory import Storage

__all__ = ["VMClosure", "convert_argument", "check_argument", "spec_str", "ConvertedInputs",
           "load_shape", "as_tensor", "as_storage"]

_NDArray = _nd.NDArray


@register_object("vm.Closure")
class VMClosure(Closure):
    """A VM function value: ``func_index`` plus the captured ``free_vars`` (passed first)."""

    _fields = {"func_index": int, "free_vars": "any"}

    def __init__(self, func_index: int, free_vars: Sequence[Any] = ()) -> None:
        self._set("func_index", func_index)
        self._set("free_vars", tuple(free_vars))


def convert_argument(value: Any, device: Device) -> Any:
    """A Python argument as a VM value (TVM's conversion rules): NumPy arrays and Python
    scalars become NDArrays, tuples and lists tuples (ADTs of tag 0), at any depth."""
    if isinstance(value, tuple | list) and not any(isinstance(v, _CONTAINERS) for v in value):
        return ADT(0, [_convert_leaf(v, device) for v in value])  # flat: the common case
    if isinstance(value, _CONTAINERS):
        return _convert_nested(value, device)
    return _convert_leaf(value, device)


_CONTAINERS = (ADT, tuple, list)


def _convert_leaf(value: Any, device: Device) -> Any:
    """A value that is not a tuple, list or ADT as a VM value."""
    if isinstance(value, _NDArray | VMClosure):
        return value
    if isinstance(value, np.ndarray | np.generic):
        return _nd.array(value, device)
    if isinstance(value, bool):
        return _nd.array(np.array(value, dtype="bool"), device)
    if isinstance(value, int):
        return _nd.array(np.array(value, dtype="int32"), device)
    if isinstance(value, float):
        return _nd.array(np.array(value, dtype="float32"), device)
    raise TVMError(f"cannot pass a {type(value).__name__} to the VM; use an NDArray, a "
                   "NumPy array, a tuple/list of them, or a Python scalar")


def _convert_nested(root: Any, device: Device) -> ADT:
    """``root`` (an ADT, tuple or list) with every field converted, at any depth: tuples and
    lists become tuples, ADTs whose fields need no conversion are kept as they are, a
    container met twice (shared) is converted once. Post-order with an explicit stack, so a
    long cons list converts without Python recursion; a list containing itself is refused."""
    converted: dict[int, ADT] = {}  # id of a container of ``root`` (all alive) -> conversion
    open_ids: set[int] = set()  # containers whose fields are being converted
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, fields_done = stack.pop()
        key = id(node)
        if key in converted:
            continue
        old = node.fields if isinstance(node, ADT) else node
        if not fields_done:
            if key in open_ids:  # only an ancestor of itself can be met while open
                raise TVMError("cannot pass a tuple/list that contains itself to the VM")
            open_ids.add(key)
            stack.append((node, True))
            stack.extend((f, False) for f in old if isinstance(f, _CONTAINERS))
            continue
        open_ids.discard(key)
        fields = [converted[id(f)] if isinstance(f, _CONTAINERS) else _convert_leaf(f, device)
                  for f in old]
        if isinstance(node, ADT):
            same = all(new is was for new, was in zip(fields, old))
            converted[key] = node if same else ADT(node.tag, fields)
        else:
            converted[key] = ADT(0, fields)
    return converted[id(root)]


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


class ConvertedInputs:
    """The NDArrays the VM made from NumPy arguments, per (function, parameter index).

    They belong to the VM (the ownership contract in :mod:`kiln.runtime.vm.vm`): ``set_input``
    with a NumPy array of the same shape and dtype as the one before copies it into the
    NDArray made last time instead of allocating a new one, as the graph executor's
    ``set_input`` copies into its input buffer. A result that is (a view of) such an input is
    valid until the next ``set_input`` or invoke of its function. In two steps, so a
    ``set_input`` that fails on a later argument changes nothing: :meth:`reusable` picks the
    NDArrays while arguments are converted, :meth:`note` copies into them once all were.
    """

    def __init__(self) -> None:
        self._made: dict[tuple[str, int], Any] = {}

    def reusable(self, func_name: str, stored: list[Any] | None, index: int,
                 value: Any) -> Any:
        """The NDArray made from the last NumPy argument ``index`` if ``value`` may be copied
        into it (same shape and dtype, still the stored argument), else None. Nothing is
        copied yet: :meth:`note` does, after every argument converted."""
        tensor = self._made.get((func_name, index))
        if (tensor is None or stored is None or type(value) is not np.ndarray
                or stored[index] is not tensor):
            return None
        array = tensor._np
        if value.shape != array.shape or value.dtype != array.dtype:
            return None
        return tensor

    def note(self, func_name: str, stored: list[Any], index: int, value: Any) -> None:
        """``stored`` holds every argument now: copy the NumPy ``value`` into
        ``stored[index]`` if that is the :meth:`reusable` NDArray, else record it if the VM
        made it from ``value``."""
        key = (func_name, index)
        tensor = stored[index]
        is_numpy = type(value) is np.ndarray
        if is_numpy and self._made.get(key) is tensor:
            np.copyto(tensor._np, value)
        elif is_numpy and type(tensor) is _NDArray:
            self._made[key] = tensor
        else:
            self._made.pop(key, None)


def load_shape(value: Any) -> tuple[int, ...]:
    """A shape operand (a 1-D integer tensor, e.g. a shape function's output) as a tuple."""
    tensor = as_tensor(value, "shape operand")
    data = tensor.numpy() if isinstance(tensor, DeviceNDArray) else tensor._np
    if data.ndim != 1 or data.dtype.kind not in "iu":
        raise TVMError(f"a shape must be a 1-D integer tensor, got {tensor.shape} "
                       f"{tensor.dtype}")
    shape = tuple(data.tolist())
    if shape and min(shape) < 0:
        raise TVMError(f"shape {shape} has a negative dimension")
    return shape


def as_tensor(value: Any, what: str) -> Any:
    """``value`` if it is a tensor, else a TVMError naming ``what`` expected one."""
    if not isinstance(value, _NDArray):
        raise TVMError(f"{what}: expected a tensor, got {type(value).__name__}")
    return value


def as_storage(value: Any) -> Storage:
    """``value`` if it is a Storage (an AllocStorage result), else a TVMError."""
    if not isinstance(value, Storage):
        raise TVMError(f"expected a storage (AllocStorage result), got {type(value).__name__}")
    return value
