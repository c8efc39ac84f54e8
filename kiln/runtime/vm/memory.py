"""VM memory: storage blocks, tensors viewing them, and the naive and pooled allocators.

Entry points: :class:`Storage`, :class:`NaiveAllocator`, :class:`PooledAllocator`,
:func:`make_allocator`, :data:`ALLOCATOR_KINDS`.

``AllocStorage`` asks the device's allocator for a :class:`Storage`: a block of host memory
on a CPU device, a buffer of the device's API (:mod:`kiln.runtime.device_api`, e.g. OpenCL)
on any other device. ``AllocTensor``/``AllocTensorReg`` create NDArrays that *view* the block
at a byte offset, with no copy (on a device: a ``DeviceNDArray`` at that byte offset). A block
goes back to its allocator when the last reference to it dies — the Storage register value and
every tensor viewing it (each view keeps its Storage alive) — so ``KillRegister`` of the last
holder is what frees memory.

Views are cheap on a reused block: each block caches, per ``(offset, shape, dtype)``, a
:class:`ViewSpec` (the ``DLTensor`` kernels read, built once), so ``alloc_tensor`` on a block
that came back from the pool only wraps a fresh NumPy view that holds the new Storage. Each
block also keeps ``plans``: whatever a caller built for its addresses (the VM's fused kernel
call lists), dropped with the block when the pool releases it.

Pooled policy (TVM's pool never returned memory; this one does):

- requests round up to whole 4096-byte pages; freed blocks wait in a free list per size;
  a request of a size with a free block reuses it (exact size, like TVM);
- **idle release**: the allocator counts requests; a size class that has not been requested
  for ``idle_release_after`` requests (default 64) has its free blocks released — so when
  input shapes change, the blocks sized for the old shapes go back to the system;
- **cap**: free blocks never total more than ``max_cached_bytes`` (default 256 MiB); past it
  the least recently freed blocks are released first.

Example
-------
>>> from kiln.runtime.device import cpu
>>> pool = PooledAllocator(cpu(0))
>>> block = pool.alloc(1000, 64)
>>> pool.used_bytes, block.nbytes
(4096, 1000)
>>> del block
>>> pool.used_bytes, pool.cached_bytes
(0, 4096)
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from typing import Any

import numpy as np

from kiln.runtime.device_api import DeviceBuffer, DeviceNDArray, get_device_api
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import NDArray
from kiln.runtime.object import Object, register_object

__all__ = [
    "Storage",
    "ViewSpec",
    "Allocator",
    "NaiveAllocator",
    "PooledAllocator",
    "ALLOCATOR_KINDS",
    "make_allocator",
    "make_allocators",
    "PAGE_SIZE",
]

PAGE_SIZE = 4096
_MIN_ALIGNMENT = 64
_CPU_DEVICE_TYPE = 1


class _Block:
    """A host memory block aligned to ``alignment``; ``address`` is its first byte.

    ``views`` caches a :class:`ViewSpec` per ``(offset, shape, dtype)``; ``plans`` holds
    address-dependent data of users of the block (keyed by the user), freed with the block.
    """

    __slots__ = ("owner", "address", "nbytes", "views", "plans")

    def __init__(self, nbytes: int, alignment: int) -> None:
        alignment = max(alignment, _MIN_ALIGNMENT)
        try:
            self.owner = np.empty(nbytes + alignment, dtype=np.uint8)
        except (MemoryError, ValueError) as err:
            raise TVMError(f"cannot allocate {nbytes} bytes of VM storage: {err}") from None
        start = self.owner.ctypes.data
        self.address = start + (-start % alignment)
        self.nbytes = nbytes
        self.views: dict[tuple, ViewSpec] = {}
        self.plans: dict[Any, Any] = {}

    def make_view(self, offset: int, nbytes: int, shape: tuple[int, ...], dtype: Any,
                  device: Any) -> ViewSpec:
        return ViewSpec(self.address + offset, nbytes, shape, dtype, device)


class _DeviceBlock:
    """A buffer of a device API (memory of a non-CPU device), freed with the block.

    It has no host address (``address`` is 0: every page-aligned request accepts it; device
    buffers are aligned by their driver). ``views`` and ``plans`` are as on :class:`_Block`.
    """

    __slots__ = ("owner", "address", "nbytes", "views", "plans")

    def __init__(self, device: Any, nbytes: int) -> None:
        api = get_device_api(device.device_type, device)
        try:
            self.owner = DeviceBuffer(api, device, nbytes)
        except TVMError:
            raise
        except Exception as err:  # the driver's own error (out of device memory, ...)
            raise TVMError(f"cannot allocate {nbytes} bytes of VM storage on {device}: "
                           f"{err}") from None
        self.address = 0
        self.nbytes = nbytes
        self.views: dict[tuple, _DeviceViewSpec] = {}
        self.plans: dict[Any, Any] = {}

    def make_view(self, offset: int, nbytes: int, shape: tuple[int, ...], dtype: Any,
                  device: Any) -> _DeviceViewSpec:
        return _DeviceViewSpec(self.owner, offset, shape, dtype)


class _StorageLease:
    """A device buffer as a ``DeviceNDArray`` sees it, holding the Storage it came from.

    Every view (and every ``_create_view`` of a view) shares the lease, so the block goes
    back to its allocator only when the last of them and the Storage are gone.
    """

    __slots__ = ("api", "device", "handle", "nbytes", "storage")

    def __init__(self, buffer: DeviceBuffer, storage: Storage) -> None:
        self.api, self.device, self.handle = buffer.api, storage.device, buffer.handle
        self.nbytes, self.storage = buffer.nbytes, storage


class _DeviceViewSpec:
    """One tensor view of a device block (the :class:`ViewSpec` of device memory)."""

    __slots__ = ("buffer", "offset", "shape", "dtype")

    def __init__(self, buffer: DeviceBuffer, offset: int, shape: tuple[int, ...],
                 dtype: Any) -> None:
        self.buffer, self.offset, self.shape, self.dtype = buffer, offset, shape, dtype

    def lease(self, storage: Storage) -> DeviceNDArray:
        """A DeviceNDArray over this view that keeps ``storage`` alive."""
        return DeviceNDArray.on(_StorageLease(self.buffer, storage), self.offset, self.shape,
                                 self.dtype)


_MAX_CACHED_VIEWS = 256  # per block; a program with ever-new dynamic shapes starts over


class ViewSpec:
    """One tensor view of a block: address, NumPy layout and the ``DLTensor`` kernels read.

    Built once per ``(block, offset, shape, dtype)``; :meth:`lease` makes an NDArray over it
    whose NumPy base holds the given Storage, so the block cannot return to its allocator
    while the NDArray (or any NumPy view derived from it) lives.
    """

    __slots__ = ("address", "raw_type", "np_shape", "np_dtype", "dtype", "dltensor",
                 "handle", "c_arrays")

    def __init__(self, address: int, nbytes: int, shape: tuple[int, ...], dtype: Any,
                 device: Any) -> None:
        self.address = address
        self.raw_type = ctypes.c_uint8 * max(nbytes, 1)
        self.np_shape = shape + ((dtype.lanes,) if dtype.lanes > 1 else ())
        self.np_dtype = dtype.numpy_dtype
        self.dtype = dtype
        raw = self.raw_type.from_address(address)
        proto = NDArray._wrap(np.ndarray(self.np_shape, self.np_dtype, raw), dtype, device)
        proto._build_dltensor()
        self.dltensor, self.handle, self.c_arrays = (
            proto._dltensor, proto._handle, proto._c_arrays)

    def lease(self, storage: Storage) -> Any:
        """An NDArray over this view that keeps ``storage`` alive."""
        raw = self.raw_type.from_address(self.address)
        raw.storage = storage
        # NDArray._wrap's slots, set directly with the cached DLTensor (the VM's hot path;
        # the slot descriptors' setters take half the time of object.__setattr__).
        array = _new_ndarray(NDArray)
        _set_np(array, np.ndarray(self.np_shape, self.np_dtype, raw))
        _set_dtype(array, self.dtype)
        _set_device(array, storage.device)
        _set_dltensor(array, self.dltensor)
        _set_handle(array, self.handle)
        _set_c_arrays(array, self.c_arrays)
        return array


_new_ndarray = NDArray.__new__
_set_np, _set_dtype, _set_device, _set_dltensor, _set_handle, _set_c_arrays = (
    NDArray.__dict__[name].__set__
    for name in ("_np", "_dtype", "_device", "_dltensor", "_handle", "_c_arrays"))


@register_object("vm.Storage")
class Storage(Object):
    """A block of device memory handed out by an allocator (a register value of AllocStorage).

    Parameters are set by the allocator; create tensors in it with :meth:`alloc_tensor`.
    """

    _fields = {"nbytes": int, "alignment": int, "device": "any"}
    _extra_slots = ("_block", "_allocator")

    @property
    def plans(self) -> dict[Any, Any]:
        """Data a user keeps per block (e.g. a fused segment's call list), freed with it."""
        return self._block.plans

    @property
    def address(self) -> int:
        """Address of the block's first byte (device memory: the buffer's handle)."""
        return self._block.address

    @property
    def fusable(self) -> bool:
        """Whether the VM's fused segments may run on it (pooled host memory)."""
        return self._allocator.fusable

    def alloc_tensor(self, offset: int, shape: tuple[int, ...], dtype: Any) -> Any:
        """An NDArray of ``shape``/``dtype`` viewing this storage at byte ``offset``."""
        key = (offset, shape, dtype)
        spec = self._block.views.get(key)
        if spec is None:
            spec = self.view_spec(offset, shape, dtype)
        return spec.lease(self)

    def view_spec(self, offset: int, shape: tuple[int, ...], dtype: Any) -> ViewSpec:
        """The block's cached :class:`ViewSpec` for a view at ``offset`` (checked to fit)."""
        from kiln.runtime.dtype import DataType

        shape = tuple(shape)
        key = (offset, shape, dtype)
        views = self._block.views
        spec = views.get(key)
        if spec is not None:
            return spec
        dtype = dtype if isinstance(dtype, DataType) else DataType(dtype)
        count = 1
        for dim in shape:
            if dim < 0:
                raise TVMError(f"cannot allocate a tensor with negative dimension in {shape}")
            count *= dim
        nbytes = count * dtype.itemsize
        if offset < 0 or offset + nbytes > self.nbytes:
            raise TVMError(
                f"tensor of shape {tuple(shape)} {dtype} ({nbytes} bytes) at offset {offset} "
                f"does not fit in a storage of {self.nbytes} bytes"
            )
        if len(views) >= _MAX_CACHED_VIEWS:
            views.clear()
        spec = views[key] = self._block.make_view(offset, nbytes, shape, dtype, self.device)
        return spec

    def __del__(self) -> None:
        allocator = getattr(self, "_allocator", None)
        if allocator is not None:
            try:
                allocator._release(self._block)
            except Exception:  # interpreter shutdown: nothing left to return memory to
                pass


def _new_block(device: Any, host: bool, nbytes: int, alignment: int) -> _Block | _DeviceBlock:
    """A host block for a CPU device, a device API buffer for any other."""
    return _Block(nbytes, alignment) if host else _DeviceBlock(device, nbytes)


def _new_storage() -> Storage:
    return Storage.__new__(Storage)  # every slot is set by Allocator._storage


(_set_storage_nbytes, _set_storage_alignment, _set_storage_device, _set_storage_block,
 _set_storage_allocator) = (Storage.__dict__[name].__set__ for name in (
     "nbytes", "alignment", "device", "_block", "_allocator"))


class Allocator:
    """Base of the VM allocators: hands out :class:`Storage` and tracks bytes in use.

    ``used_bytes`` counts blocks held by live Storage objects; ``cached_bytes`` counts free
    blocks an allocator keeps for reuse.
    """

    kind = "base"

    def __init__(self, device: Any) -> None:
        self.device = device
        self.used_bytes = 0
        self.num_allocations = 0
        # Host memory (a CPU device) or a device API's buffers; only pooled host blocks are
        # run by the VM's fused segments.
        self.host = device.device_type == _CPU_DEVICE_TYPE
        self.fusable = self.host and self.kind == "pooled"

    @property
    def cached_bytes(self) -> int:
        return 0

    def alloc(self, nbytes: int, alignment: int = _MIN_ALIGNMENT) -> Storage:
        """A Storage of at least ``nbytes`` bytes aligned to ``alignment``."""
        if nbytes < 0:
            raise TVMError(f"cannot allocate a negative size ({nbytes} bytes)")
        if alignment <= 0 or alignment & (alignment - 1):
            raise TVMError(f"alignment {alignment} is not a positive power of two")
        if not self.host:
            get_device_api(self.device.device_type, self.device)  # a clear error if none
        self.num_allocations += 1
        return self._storage(self._acquire(nbytes, alignment), nbytes, alignment)

    def _storage(self, block: _Block, nbytes: int, alignment: int) -> Storage:
        """A Storage handing out ``block`` (counted as used until the Storage dies)."""
        self.used_bytes += block.nbytes
        storage = _new_storage()
        _set_storage_nbytes(storage, nbytes)
        _set_storage_alignment(storage, alignment)
        _set_storage_device(storage, self.device)
        _set_storage_block(storage, block)
        _set_storage_allocator(storage, self)
        return storage

    def _acquire(self, nbytes: int, alignment: int) -> _Block:
        raise NotImplementedError

    def _release(self, block: _Block) -> None:
        self.used_bytes -= block.nbytes

    def release_all(self) -> None:
        """Return every cached free block to the system."""


class NaiveAllocator(Allocator):
    """Allocates a fresh block per request and frees it when its Storage dies."""

    kind = "naive"

    def _acquire(self, nbytes: int, alignment: int) -> _Block | _DeviceBlock:
        return _new_block(self.device, self.host, nbytes, alignment)


class PooledAllocator(Allocator):
    """Page-rounded exact-size free lists with idle release and a cache cap (module docs)."""

    kind = "pooled"

    def __init__(self, device: Any, idle_release_after: int = 64,
                 max_cached_bytes: int = 256 << 20) -> None:
        super().__init__(device)
        self.idle_release_after = idle_release_after
        self.max_cached_bytes = max_cached_bytes
        # size -> list of free blocks; OrderedDict order = least recently freed first.
        self._free: OrderedDict[int, list[_Block]] = OrderedDict()
        self._last_request: dict[int, int] = {}
        self._cached = 0

    @property
    def cached_bytes(self) -> int:
        return self._cached

    def alloc(self, nbytes: int, alignment: int = _MIN_ALIGNMENT) -> Storage:
        """A Storage of at least ``nbytes`` bytes, reusing a free block of its size class."""
        # The common case first: a free block of the size class is waiting. Pooled blocks are
        # page aligned and their device was checked when they were made.
        size = -(-nbytes // PAGE_SIZE) * PAGE_SIZE
        if (nbytes > 0 and size in self._free and 0 < alignment <= PAGE_SIZE
                and not alignment & (alignment - 1)):
            self.num_allocations += 1
            return self._storage(self._take(size), nbytes, alignment)
        return super().alloc(nbytes, alignment)

    def _acquire(self, nbytes: int, alignment: int) -> _Block:
        size = -(-max(nbytes, 1) // PAGE_SIZE) * PAGE_SIZE
        while size in self._free:
            block = self._take(size)
            if block.address % max(alignment, _MIN_ALIGNMENT) == 0:
                return block
        self._note_request(size)
        return _new_block(self.device, self.host, size, max(alignment, PAGE_SIZE))

    def _note_request(self, size: int) -> None:
        self._last_request[size] = self.num_allocations
        if self.num_allocations % 16 == 0:
            self._release_idle()

    def _take(self, size: int) -> _Block:
        """The most recently freed block of size class ``size`` (which has one)."""
        self._note_request(size)
        blocks = self._free[size]
        block = blocks.pop()
        self._cached -= block.nbytes
        if not blocks:
            del self._free[size]
        return block

    def _release(self, block: _Block) -> None:
        super()._release(block)
        self._free.setdefault(block.nbytes, []).append(block)
        self._free.move_to_end(block.nbytes)
        self._cached += block.nbytes
        while self._cached > self.max_cached_bytes and self._free:
            self._drop_class(next(iter(self._free)))

    def _drop_class(self, size: int) -> None:
        for block in self._free.pop(size, ()):
            self._cached -= block.nbytes

    def _release_idle(self) -> None:
        horizon = self.num_allocations - self.idle_release_after
        for size in [s for s in self._free if self._last_request.get(s, -1) < horizon]:
            self._drop_class(size)

    def release_all(self) -> None:
        for size in list(self._free):
            self._drop_class(size)


ALLOCATOR_KINDS: dict[str, type[Allocator]] = {
    "naive": NaiveAllocator,
    "pooled": PooledAllocator,
}


def make_allocator(kind: str, device: Any) -> Allocator:
    """The allocator called ``kind`` (``"naive"`` or ``"pooled"``) for ``device``."""
    cls = ALLOCATOR_KINDS.get(str(kind).lower())
    if cls is None:
        raise TVMError(
            f"unknown VM memory allocator {kind!r}; use one of {sorted(ALLOCATOR_KINDS)}"
        )
    return cls(device)


def make_allocators(devices: list[Any], memory_cfg: Any) -> list[Allocator]:
    """One allocator per distinct device of ``devices`` (a VM's), of the kind ``memory_cfg``
    names: ``None`` (pooled), a kind, or ``{device: kind}``; listed per entry of ``devices``."""
    per_device: dict[Any, Allocator] = {}
    for dev in devices:
        if dev in per_device:
            continue
        if memory_cfg is None:
            kind = "pooled"
        elif isinstance(memory_cfg, str):
            kind = memory_cfg
        elif isinstance(memory_cfg, dict):
            kind = memory_cfg.get(dev, "pooled")
        else:
            raise TVMError(f"memory_cfg must be a str or a dict, got {memory_cfg!r}")
        per_device[dev] = make_allocator(kind, dev)
    return [per_device[dev] for dev in devices]
