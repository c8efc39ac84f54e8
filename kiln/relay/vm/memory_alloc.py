"""ManifestAlloc: where the output tensors of each kernel call live.

Entry points: :class:`ManifestAlloc` (one per compiled VM function), :func:`storage_bytes`,
:data:`ALIGNMENT`.

TVM rewrites every primitive call into ``alloc_storage`` / ``alloc_tensor`` /
``invoke_tvm_op`` in Relay and then maps those to instructions. kiln makes the same decisions
while emitting bytecode, which lets it coalesce storage:

- **static tensors** live in one *arena* per function invocation: a single ``AllocStorage``
  at function entry, each tensor an ``AllocTensor`` at an offset. A tensor whose only uses are
  as inputs of other kernels is *reusable*: when ``memory.kill`` (from ManifestLifetimes) ends
  it, its slot is free for a later tensor of at most its size (best fit, like the graph
  executor's token allocator). Any other static tensor (returned, put in a tuple or ADT,
  captured, passed to a function) keeps its own slot for the whole invocation. The arena's
  size is patched into the prologue once the function is emitted; a function without static
  tensors has no prologue. (An escaping tensor keeps the whole arena alive while it lives —
  the price of one allocation per call instead of one per tensor.)
- **dynamic tensors** get their own ``AllocStorage`` sized from a register and an
  ``AllocTensorReg`` shaped by a shape register, both computed by the op's shape function
  (:mod:`kiln.relay.vm.shape_func`).
- **devices**: the arena lives on the function's default virtual device (``device_index``);
  a static tensor planned on another device (heterogeneous execution) gets its own
  ``AllocStorage`` with that device's index, as does every dynamic tensor's storage.

Example
-------
>>> storage_bytes((2, 3), "float32")
24
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.runtime.vm import bytecode as bc

__all__ = ["ManifestAlloc", "storage_bytes", "ALIGNMENT"]

ALIGNMENT = 64  # bytes: every tensor starts on a cache line (TVM's kAllocAlignment)


def storage_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of a dense tensor (TVM: prod(shape) * ceil(bits * lanes / 8))."""
    from kiln.runtime.ndarray import DataType

    dt = DataType(dtype)
    return int(np.prod(shape, dtype=np.int64)) * ((dt.bits * dt.lanes + 7) // 8)


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple


class ManifestAlloc:
    """Allocation decisions for one VM function; emits through ``emitter``.

    ``emitter`` provides ``emit(instr)``, ``new_register()`` and ``instructions`` (the list
    being built). Call :meth:`prologue` before the body and :meth:`finish` after it.
    """

    def __init__(self, emitter: Any, device_index: int = 0) -> None:
        self.emitter = emitter
        self.device_index = device_index
        self.arena_register = -1
        self._prologue_at = -1
        self._arena_size = 0
        self._free_slots: list[tuple[int, int]] = []  # (size, offset), freed by kills
        self._slot_of_register: dict[int, tuple[int, int]] = {}
        self.storage_allocations = 0

    def prologue(self) -> None:
        """Reserve the arena's ``LoadConsti size; AllocStorage`` at the function start."""
        em = self.emitter
        self._prologue_at = len(em.instructions)
        size_register = em.new_register()
        self.arena_register = em.new_register()
        em.emit(bc.LoadConsti(0, size_register))
        em.emit(bc.AllocStorage(size_register, ALIGNMENT, "float32", self.device_index,
                                self.arena_register))

    def finish(self) -> None:
        """Patch the arena size in, or drop the prologue when no tensor used the arena."""
        em = self.emitter
        at = self._prologue_at
        if at < 0:
            return
        if self._arena_size == 0:
            # jumps are relative and none crosses the prologue, so removing it is safe
            del em.instructions[at: at + 2]
            return
        load = em.instructions[at]
        em.instructions[at] = bc.LoadConsti(self._arena_size, load.dst)
        self.storage_allocations += 1

    def static_tensor(self, shape: tuple[int, ...], dtype: str, reusable: bool,
                      device_index: int | None = None) -> int:
        """Emit the allocation of a static tensor in the arena; returns its register.

        A ``reusable`` tensor's slot returns to the free list when a kill ends it; any other
        tensor keeps its slot for the whole invocation (it may outlive the kill of its name).
        A tensor on another virtual device than the arena's (``device_index``) gets its own
        storage there.
        """
        em = self.emitter
        nbytes = storage_bytes(shape, dtype)
        offset_register = em.new_register()
        dst = em.new_register()
        if device_index is None:
            device_index = self.device_index
        if self._prologue_at < 0 or device_index != self.device_index:
            size_register = em.new_register()
            storage = em.new_register()
            em.emit(bc.LoadConsti(nbytes, size_register))
            em.emit(bc.AllocStorage(size_register, ALIGNMENT, dtype, device_index, storage))
            em.emit(bc.LoadConsti(0, offset_register))
            em.emit(bc.AllocTensor(storage, offset_register, shape, dtype, dst))
            em.emit(bc.KillRegister(storage))
            self.storage_allocations += 1
            return dst
        offset, size = self._take_slot(_round_up(max(nbytes, 1), ALIGNMENT))
        em.emit(bc.LoadConsti(offset, offset_register))
        em.emit(bc.AllocTensor(self.arena_register, offset_register, shape, dtype, dst))
        if reusable:
            self._slot_of_register[dst] = (size, offset)
        return dst

    def dynamic_tensor(self, shape_register: int, size_register: int, dtype: str,
                       device_index: int | None = None) -> int:
        """Emit the allocation of a tensor whose shape and byte size are in registers."""
        em = self.emitter
        storage, offset_register, dst = (em.new_register() for _ in range(3))
        device_index = self.device_index if device_index is None else device_index
        em.emit(bc.AllocStorage(size_register, ALIGNMENT, dtype, device_index, storage))
        em.emit(bc.LoadConsti(0, offset_register))
        em.emit(bc.AllocTensorReg(storage, offset_register, shape_register, dtype, dst))
        em.emit(bc.KillRegister(storage))  # the tensor holds the storage; a kill then frees it
        self.storage_allocations += 1
        return dst

    def release(self, register: int) -> None:
        """A kill ended the tensor in ``register``: its arena slot may be reused."""
        slot = self._slot_of_register.pop(register, None)
        if slot is not None:
            self._free_slots.append(slot)

    def _take_slot(self, size: int) -> tuple[int, int]:
        """(offset, slot size): the smallest free slot that fits, else a new one at the end."""
        fitting = [s for s in self._free_slots if s[0] >= size]
        if fitting:
            best = min(fitting)
            self._free_slots.remove(best)
            return best[1], best[0]
        offset = self._arena_size
        self._arena_size += size
        return offset, size

    @property
    def arena_bytes(self) -> int:
        """Bytes of the function's arena (0 when it has none)."""
        return self._arena_size
