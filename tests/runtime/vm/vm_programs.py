"""Small builders for hand-assembled VM programs used by several test files."""

from __future__ import annotations

import numpy as np

from kiln.runtime.vm.bytecode import AllocStorage, AllocTensor, LoadConsti


def alloc_tensor(shape, dtype, size_reg, storage_reg, offset_reg, dst, device_index=0):
    """The ManifestAlloc pattern: size const, AllocStorage, offset const, AllocTensor."""
    itemsize = 1 if dtype == "bool" else np.dtype(dtype).itemsize
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    return [
        LoadConsti(nbytes, size_reg),
        AllocStorage(size_reg, 64, dtype, device_index, storage_reg),
        LoadConsti(0, offset_reg),
        AllocTensor(storage_reg, offset_reg, shape, dtype, dst),
    ]
