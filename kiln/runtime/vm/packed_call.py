"""InvokePacked call sites: a kernel resolved once, its argument arrays built once.

Entry point: :class:`PackedCallSite` (``call(regs)``), used by the VM's InvokePacked handler
(straight runs of kernel work are fused into one C call list instead: :mod:`.segment`).

Per call the site flattens ADT arguments into their tensor fields (TVM's rule: every field
must be a tensor), skips the call when the single output has a zero-sized dimension, writes
each tensor's ``DLTensor*`` into a ``TVMValue`` array it owns (type code
``kTVMDLTensorHandle``; a slot already holding that DLTensor is left alone) and calls the
native function directly through ctypes. A kernel
failure becomes a :class:`TVMError` with the kernel's own message and the primitive's name.
Python-backed PackedFuncs are called with the tensors as arguments.
"""

from __future__ import annotations

import ctypes
from typing import Any

from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray as _NDArray
from kiln.runtime.vm import bytecode as bc

__all__ = ["PackedCallSite"]

_DLTENSOR_HANDLE = 7  # kTVMDLTensorHandle
_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class PackedCallSite:
    """One InvokePacked call site: kernel resolved, argument arrays allocated once."""

    __slots__ = ("instr", "name", "func", "kernel", "resource", "arg_regs", "output_size",
                 "values", "codes", "num_values", "ret", "ret_code", "flat", "written")

    def __init__(self, instr: bc.InvokePacked, name: str, func: Any) -> None:
        self.instr = instr
        self.name = name
        self.func = func
        native = getattr(func, "is_native", False)
        self.kernel = _KERNEL(func.c_address) if native else None
        self.resource = getattr(func, "resource_handle", None) if native else None
        self.arg_regs = instr.args
        self.output_size = instr.output_size
        self.num_values = -1
        self.values = self.codes = None
        self.ret = ctypes.c_int64(0)
        self.ret_code = ctypes.c_int(0)
        self.flat: list = []
        self.written: list = []  # the DLTensor objects whose addresses ``values`` holds

    def call(self, regs: list) -> None:
        tensors = self.flat
        tensors.clear()
        for reg in self.arg_regs:
            value = regs[reg]
            if isinstance(value, ADT):
                for item in value.fields:
                    if not isinstance(item, _NDArray):
                        raise TVMError(f"kernel {self.name!r}: a tuple argument holds "
                                       f"{type(item).__name__}, not a tensor")
                    tensors.append(item)
            elif isinstance(value, _NDArray):
                tensors.append(value)
            else:
                raise TVMError(f"kernel {self.name!r}: register ${reg} holds "
                               f"{type(value).__name__}, not a tensor")
        if self.output_size == 1 and 0 in tensors[-1].shape:
            tensors.clear()
            return  # an empty output: nothing to compute (TVM skips the call too)
        if self.kernel is None:
            args = tuple(tensors)
            tensors.clear()
            try:
                self.func(*args)
            except TVMError as err:
                raise TVMError(f"kernel {self.name!r} failed: {err}") from err
            return
        n = len(tensors)
        if n != self.num_values:
            self.values = (ctypes.c_void_p * max(n, 1))()
            self.codes = (ctypes.c_int * max(n, 1))(*([_DLTENSOR_HANDLE] * n))
            self.num_values = n
            self.written = [None] * n
        values, written = self.values, self.written
        for i, tensor in enumerate(tensors):
            dltensor = tensor._dltensor
            if dltensor is None:
                tensor._build_dltensor()
                dltensor = tensor._dltensor
            if dltensor is not written[i]:  # views of a reused block share their DLTensor
                values[i] = ctypes.addressof(dltensor)
                written[i] = dltensor
        rc = self.kernel(values, self.codes, n, ctypes.byref(self.ret),
                         ctypes.byref(self.ret_code), self.resource)
        tensors.clear()  # hold no tensor past the call, so KillRegister can free it
        if rc != 0:
            from kiln.runtime.packed_func import get_last_error

            message = get_last_error() or f"returned {rc}"
            raise TVMError(f"kernel {self.name!r} failed: {message}")
