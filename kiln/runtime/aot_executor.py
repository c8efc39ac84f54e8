"""The host AOT executor: runs a model compiled by ``relay.build(..., Executor("aot"))``.

Entry point: :class:`AotExecutor` (TVM's C++ ``AotExecutor``, ``src/runtime/aot_executor``).

The generated library describes itself: its ``get_c_metadata`` packed function returns a
``struct TVMMetadata`` (``tvm/runtime/metadata_types.h``), read here through ctypes. The
executor allocates one NDArray per input, output and workspace pool the metadata lists, and
``run`` calls ``<mod_name>___tvm_main__`` with them: one C call over argument arrays built
once, so a run allocates nothing. As with the graph executor, outputs stay valid until the
next ``run``.
"""

from __future__ import annotations

import ctypes
import operator
from collections.abc import Sequence
from typing import Any

from kiln.runtime.device import Device, cpu
from kiln.runtime.dlpack import DLDataType
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.runtime.module import Module
from kiln.runtime.ndarray import NDArray, empty
from kiln.runtime.packed_func import KERNEL_PROTOTYPE, TVMValue, get_last_error

__all__ = ["AotExecutor", "read_metadata", "TensorInfo", "executor_creator"]

_METADATA_VERSION = 1
_DLTENSOR_HANDLE = 7


class _TVMTensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("num_shape", ctypes.c_int64), ("dtype", DLDataType)]


class _TVMMetadata(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int64),
                ("inputs", ctypes.POINTER(_TVMTensorInfo)), ("num_inputs", ctypes.c_int64),
                ("outputs", ctypes.POINTER(_TVMTensorInfo)), ("num_outputs", ctypes.c_int64),
                ("workspace_pools", ctypes.POINTER(_TVMTensorInfo)),
                ("num_workspace_pools", ctypes.c_int64),
                ("constant_pools", ctypes.c_void_p), ("num_constant_pools", ctypes.c_int64),
                ("mod_name", ctypes.c_char_p)]


class TensorInfo:
    """One tensor of the metadata: name, shape, dtype."""

    __slots__ = ("name", "shape", "dtype")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.shape}, {self.dtype!r})"


def _infos(array: Any, count: int) -> list[TensorInfo]:
    out = []
    for i in range(count):
        info = array[i]
        if info.num_shape < 0 or info.num_shape > 64:
            raise TVMError(f"AOT metadata: tensor {i} has rank {info.num_shape}")
        shape = tuple(int(info.shape[d]) for d in range(info.num_shape))
        dtype = DataType(f"{_DL_CODES.get(info.dtype.code, 'custom')}{info.dtype.bits}"
                         + (f"x{info.dtype.lanes}" if info.dtype.lanes > 1 else ""))
        out.append(TensorInfo(info.name.decode(), shape, str(dtype)))
    return out


_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat"}


def read_metadata(lib: Module, getter: str = "get_c_metadata") -> dict[str, Any]:
    """``{"mod_name", "inputs", "outputs", "workspace_pools"}`` of a built AOT library."""
    try:
        func = lib.get_function(getter, query_imports=True)
    except AttributeError:
        raise TVMError(f"the module has no {getter}: it was not built with Executor('aot') "
                       "and Runtime('cpp')") from None
    ret, code = TVMValue(), ctypes.c_int(0)
    rc = KERNEL_PROTOTYPE(func.c_address)(None, None, 0, ctypes.addressof(ret),
                                          ctypes.addressof(code), None)
    if rc != 0 or not ret.v_handle:
        raise TVMError(f"{getter} failed: {get_last_error()}")
    md = _TVMMetadata.from_address(ret.v_handle)
    if md.version != _METADATA_VERSION:
        raise TVMError(f"AOT metadata version {md.version}; this kiln reads version "
                       f"{_METADATA_VERSION}")
    return {
        "mod_name": md.mod_name.decode(),
        "inputs": _infos(md.inputs, md.num_inputs),
        "outputs": _infos(md.outputs, md.num_outputs),
        "workspace_pools": _infos(md.workspace_pools, md.num_workspace_pools),
    }


class AotExecutor(Module):
    """An AOT model instance on the host (what ``lib["default"](dev)`` returns).

    Example
    -------
    >>> from kiln.runtime.executor import AotModule                     # doctest: +SKIP
    >>> m = AotModule(lib["default"](kiln.cpu(0)))                      # doctest: +SKIP
    >>> m.set_input("a", a); m.run(); m.get_output(0).numpy()           # doctest: +SKIP
    """

    type_key = "AotExecutor"

    def __init__(self, lib: Module, devices: Device | Sequence[Device] | None = None,
                 params: dict[str, Any] | None = None) -> None:
        super().__init__()
        devices = [devices] if isinstance(devices, Device) else list(devices or [cpu(0)])
        if len(devices) != 1 or not devices[0].is_cpu:
            raise TVMError(f"the AOT executor runs on one CPU device, got {devices}")
        self.lib = lib
        self.device = devices[0]
        md = read_metadata(lib)
        self.mod_name = md["mod_name"]
        self.input_info: list[TensorInfo] = md["inputs"]
        self.output_info: list[TensorInfo] = md["outputs"]
        self._inputs = [empty(t.shape, t.dtype, self.device) for t in self.input_info]
        self._outputs = [empty(t.shape, t.dtype, self.device) for t in self.output_info]
        self._pools = [empty(t.shape, t.dtype, self.device) for t in md["workspace_pools"]]
        try:
            main = lib.get_function(f"{self.mod_name}___tvm_main__", query_imports=True)
        except AttributeError:
            raise TVMError(f"the module has no {self.mod_name}___tvm_main__") from None
        self._main = KERNEL_PROTOTYPE(main.c_address)
        self._keep = main
        arrays = self._inputs + self._outputs + self._pools
        self._args = (TVMValue * len(arrays))()
        for i, arr in enumerate(arrays):
            self._args[i].v_handle = ctypes.cast(arr.handle, ctypes.c_void_p).value
        self._codes = (ctypes.c_int * len(arrays))(*([_DLTENSOR_HANDLE] * len(arrays)))
        self._ret, self._ret_code = TVMValue(), ctypes.c_int(0)
        self._argv = (ctypes.addressof(self._args), ctypes.addressof(self._codes), len(arrays),
                      ctypes.addressof(self._ret), ctypes.addressof(self._ret_code), None)
        self._index = {t.name: i for i, t in enumerate(self.input_info)}
        for name, value in (params or {}).items():
            self.set_input(name, value)

    def _get_function(self, name: str) -> Any:
        """TVM's executor functions by name (``module["run"]``)."""
        if name in ("set_input", "get_input", "get_output", "run", "get_num_inputs",
                    "get_num_outputs", "get_input_index", "get_input_name"):
            return getattr(self, name)
        return None

    def get_num_inputs(self) -> int:
        return len(self.input_info)

    def get_num_outputs(self) -> int:
        return len(self.output_info)

    def get_input_index(self, name: str) -> int:
        """Position of input ``name``, or -1 (as TVM)."""
        return self._index.get(name, -1)

    def get_input_name(self, index: int) -> str:
        return self.input_info[self._checked_index(index, self.input_info, "input")].name

    @staticmethod
    def _checked_index(index: Any, infos: list, what: str) -> int:
        try:
            index = operator.index(index)
        except TypeError:
            raise TVMError(f"an {what} index must be an int, got {index!r}") from None
        if not 0 <= index < len(infos):
            raise TVMError(f"{what} index {index} is out of range: the model has "
                           f"{len(infos)} {what}s")
        return index

    def _input(self, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self._index:
                raise TVMError(f"cannot find '{key}' among input; the inputs are "
                               f"{[t.name for t in self.input_info]}")
            return self._index[key]
        return self._checked_index(key, self.input_info, "input")

    def set_input(self, key: int | str, value: Any) -> None:
        """Copy ``value`` into input ``key`` (a name or an index)."""
        index = self._input(key)
        info = self.input_info[index]
        try:
            self._inputs[index].copyfrom(value)
        except TVMError as err:
            raise TVMError(f"set_input({key!r}): expected shape {info.shape}, dtype "
                           f"{info.dtype}; {err}") from None

    def get_input(self, key: int | str, out: NDArray | None = None) -> NDArray:
        array = self._inputs[self._input(key)]
        return array if out is None else out.copyfrom(array)

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        """Output ``index`` (valid until the next run); copied into ``out`` when given."""
        array = self._outputs[self._checked_index(index, self.output_info, "output")]
        return array if out is None else out.copyfrom(array)

    def run(self) -> None:
        """Run the model once (one call of the generated main)."""
        rc = self._main(*self._argv)
        if rc != 0:
            raise TVMError(f"AOT executor: {self.mod_name}___tvm_main__ failed: "
                           f"{get_last_error() or f'returned {rc}'}")


def executor_creator(lib: Module, name: str) -> Any:
    """``lib[name]`` of a loaded AOT library: ``lib["default"](dev)`` makes an AotExecutor
    when the library's metadata names module ``tvmgen_<name>`` (else None)."""
    try:
        md = read_metadata(lib)
    except TVMError:
        return None
    if md["mod_name"] != f"tvmgen_{name}":
        return None

    def create(*devices: Any) -> AotExecutor:
        return AotExecutor(lib, list(devices))

    return create
