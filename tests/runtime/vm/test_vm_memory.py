"""Allocators: byte accounting, views keep storage alive, pooled reuse and release policy."""

from __future__ import annotations

import numpy as np
import pytest
from vm_programs import alloc_tensor

import kiln
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import InvokePacked, Ret
from kiln.runtime.vm.memory import PAGE_SIZE, NaiveAllocator, PooledAllocator, make_allocator


def test_naive_allocator_counts_live_bytes_exactly():
    alloc = NaiveAllocator(kiln.cpu(0))
    a, _b = alloc.alloc(1000), alloc.alloc(24)
    assert alloc.used_bytes == 1024
    del a
    assert alloc.used_bytes == 24 and alloc.cached_bytes == 0


def test_tensor_views_keep_their_storage_alive():
    alloc = NaiveAllocator(kiln.cpu(0))
    storage = alloc.alloc(64)
    first = storage.alloc_tensor(0, (4,), "float32")
    second = storage.alloc_tensor(16, (2, 2), "int32")
    first.copyfrom(np.arange(4, dtype="float32"))
    second.copyfrom(np.array([[7, 8], [9, 10]], dtype="int32"))
    del storage, first
    assert alloc.used_bytes == 64            # `second` still views the block
    np.testing.assert_array_equal(second.numpy(), [[7, 8], [9, 10]])
    del second
    assert alloc.used_bytes == 0


def test_storage_rejects_views_that_do_not_fit():
    storage = NaiveAllocator(kiln.cpu(0)).alloc(16)
    with pytest.raises(TVMError, match="does not fit"):
        storage.alloc_tensor(4, (4,), "float32")
    with pytest.raises(TVMError, match="negative dimension"):
        storage.alloc_tensor(0, (-1,), "float32")


def test_pooled_allocator_reuses_page_rounded_blocks():
    pool = PooledAllocator(kiln.cpu(0))
    block = pool.alloc(100)
    address = block._block.address
    assert pool.used_bytes == PAGE_SIZE
    del block
    assert (pool.used_bytes, pool.cached_bytes) == (0, PAGE_SIZE)
    again = pool.alloc(PAGE_SIZE)            # same size class: the freed block comes back
    assert again._block.address == address and pool.cached_bytes == 0


def test_pooled_allocator_releases_size_classes_no_longer_requested():
    pool = PooledAllocator(kiln.cpu(0), idle_release_after=8)
    old = [pool.alloc(10 * PAGE_SIZE) for _ in range(3)]     # "first input shape"
    del old
    assert pool.cached_bytes == 30 * PAGE_SIZE
    for _ in range(40):                                        # the shape changed
        pool.alloc(PAGE_SIZE)
    assert pool.cached_bytes == PAGE_SIZE                      # only the live size class stays
    assert pool.used_bytes == 0


def test_pooled_allocator_caps_its_cache():
    pool = PooledAllocator(kiln.cpu(0), max_cached_bytes=4 * PAGE_SIZE)
    blocks = [pool.alloc(PAGE_SIZE * (i + 1)) for i in range(4)]
    del blocks
    assert pool.cached_bytes <= 4 * PAGE_SIZE
    pool.release_all()
    assert pool.cached_bytes == 0


def test_bad_allocator_requests():
    with pytest.raises(TVMError, match="unknown VM memory allocator 'fancy'"):
        make_allocator("fancy", kiln.cpu(0))
    with pytest.raises(TVMError, match="power of two"):
        NaiveAllocator(kiln.cpu(0)).alloc(8, alignment=3)
    with pytest.raises(TVMError, match="no device API"):
        NaiveAllocator(kiln.Device(2, 0)).alloc(8)


def test_vm_pooled_memory_follows_changing_input_shapes(kernels):
    """Run a shape-specialised program at many sizes: the pool must not keep them all."""
    pool = PooledAllocator(kiln.cpu(0))
    sizes = range(1, 120)
    for n in sizes:
        shape = (n * PAGE_SIZE // 4,)                     # n pages: one size class per n
        main = VMFunction("main", ["x", "y"], [
            *alloc_tensor(shape, "float32", 2, 3, 4, 5), InvokePacked(0, 1, (0, 1, 5)), Ret(5),
        ], 6)
        exe = Executable([main], primitive_names=["add_f32"], lib=kernels)
        vm = VirtualMachine(exe, kiln.cpu(0), "pooled")
        vm.allocators[0] = pool                           # one pool across all the shapes
        x = np.ones(shape, "float32")
        np.testing.assert_array_equal(vm.run(x, x).numpy(), 2 * x)
        vm._last_result = None
    assert pool.used_bytes == 0
    # A never-releasing pool (TVM's) would now cache every size; this one released the sizes
    # not requested in the last 64 (+ one 16-request sweep interval) allocations.
    cached_sizes = [size for size, blocks in pool._free.items() if blocks]
    assert cached_sizes and min(cached_sizes) > (119 - 64 - 16) * PAGE_SIZE
    assert pool.cached_bytes <= sum(n * PAGE_SIZE for n in range(119 - 64 - 16, 120))
