"""Reuse on pooled blocks: cached views (one DLTensor per offset/shape/dtype), leases that
keep storage alive, and the pooled allocator's fast path keeping its policy."""

from __future__ import annotations

import gc

import numpy as np

import kiln
from kiln.runtime.vm.memory import PAGE_SIZE, PooledAllocator


def test_views_of_a_reused_block_share_one_dltensor_and_see_new_data():
    pool = PooledAllocator(kiln.cpu(0))
    storage = pool.alloc(PAGE_SIZE)
    first = storage.alloc_tensor(64, (4, 4), "float32")
    first.copyfrom(np.full((4, 4), 3, "float32"))
    dltensor, address = first._dltensor, first.data_ptr
    del storage, first                                   # the block goes back to the pool
    assert pool.used_bytes == 0
    again = pool.alloc(PAGE_SIZE)
    second = again.alloc_tensor(64, (4, 4), "float32")
    assert second._dltensor is dltensor and second.data_ptr == address
    np.testing.assert_array_equal(second.numpy(), np.full((4, 4), 3, "float32"))
    other = again.alloc_tensor(64, (2, 8), "float32")    # another shape: its own DLTensor
    assert other._dltensor is not dltensor and other.shape == (2, 8)
    assert [other._dltensor.shape[i] for i in range(2)] == [2, 8]


def test_a_leased_view_keeps_its_block_out_of_the_pool():
    pool = PooledAllocator(kiln.cpu(0))
    storage = pool.alloc(PAGE_SIZE)
    view = storage.alloc_tensor(0, (8,), "int32")
    view.copyfrom(np.arange(8, dtype="int32"))
    zero_copy = view.__array__(copy=False)
    del storage, view
    gc.collect()
    assert pool.used_bytes == PAGE_SIZE and pool.cached_bytes == 0
    fresh = pool.alloc(PAGE_SIZE)                        # must not hand out the viewed block
    fresh.alloc_tensor(0, (8,), "int32").copyfrom(np.zeros(8, "int32"))
    np.testing.assert_array_equal(zero_copy, np.arange(8))
    del zero_copy
    assert pool.used_bytes == PAGE_SIZE and pool.cached_bytes == PAGE_SIZE


def test_pooled_reuse_honours_alignment_above_a_page():
    pool = PooledAllocator(kiln.cpu(0))
    held = [pool.alloc(2 * PAGE_SIZE) for _ in range(16)]
    misaligned = next(s for s in held if s._block.address % (4 * PAGE_SIZE))
    address = misaligned._block.address
    held.remove(misaligned)
    del held, misaligned                                 # the misaligned block is freed last
    aligned = pool.alloc(2 * PAGE_SIZE, alignment=4 * PAGE_SIZE)
    assert aligned._block.address % (4 * PAGE_SIZE) == 0
    assert aligned._block.address != address and aligned.nbytes == 2 * PAGE_SIZE


def test_many_shapes_on_one_block_stay_correct_past_the_view_cache_cap():
    pool = PooledAllocator(kiln.cpu(0))
    storage = pool.alloc(PAGE_SIZE)
    for n in range(1, 300):                              # more distinct views than cached
        view = storage.alloc_tensor(0, (n,), "float32" if n * 4 <= PAGE_SIZE else "int8")
        assert view.shape == (n,) and view._dltensor.shape[0] == n
    assert len(storage._block.views) <= 256
