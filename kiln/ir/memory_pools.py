"""Memory pools for the AOT executor's static memory planner (TVM's ``tvm.ir.memory_pools``).

Entry points: :class:`PoolInfoProperties`, :class:`WorkspacePoolInfo`,
:class:`ConstantPoolInfo`, :class:`WorkspaceMemoryPools`, :class:`ConstantMemoryPools`.

Passed to ``relay.build(..., workspace_memory_pools=, constant_memory_pools=)``: the planner
places intermediates in the workspace pools in order, each buffer in the first pool whose
``size_hint_bytes`` it still fits (no hint: unlimited); constants go to the constant pool.
Pools given this way are provided by the application (``struct tvmgen_<mod>_workspace_pools``
and the ``<POOL>_WORKSPACE_POOL_SIZE`` / ``_CONSTANT_POOL_SIZE`` / ``_CONSTANT_POOL_DATA``
macros of the C interface header).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["PoolInfoProperties", "WorkspacePoolInfo", "ConstantPoolInfo",
           "WorkspaceMemoryPools", "ConstantMemoryPools"]


class PoolInfoProperties:
    """Properties of a pool; the planner uses ``size_hint_bytes`` (-1: no limit)."""

    def __init__(self, size_hint_bytes: int = -1, clock_frequency_hz: int = -1,
                 read_bandwidth_bytes_per_cycle: int = -1,
                 write_bandwidth_bytes_per_cycle: int = -1, read_latency_cycles: int = 0,
                 write_latency_cycles: int = 0, target_burst_bytes: Any = None) -> None:
        if not isinstance(size_hint_bytes, int) or size_hint_bytes < -1:
            raise TVMError(f"size_hint_bytes must be -1 (no limit) or a byte count, got "
                           f"{size_hint_bytes!r}")
        self.size_hint_bytes = size_hint_bytes
        self.clock_frequency_hz = clock_frequency_hz
        self.read_bandwidth_bytes_per_cycle = read_bandwidth_bytes_per_cycle
        self.write_bandwidth_bytes_per_cycle = write_bandwidth_bytes_per_cycle
        self.read_latency_cycles = read_latency_cycles
        self.write_latency_cycles = write_latency_cycles
        self.target_burst_bytes = dict(target_burst_bytes or {})


class _PoolInfo:
    def __init__(self, pool_name: str, targets: Sequence[Any] | None,
                 pool_info_properties: PoolInfoProperties | None) -> None:
        if not isinstance(pool_name, str) or not re.fullmatch(r"[A-Za-z_]\w*", pool_name):
            raise TVMError(f"a pool name must be a C identifier, got {pool_name!r}")
        self.pool_name = pool_name
        self.targets = list(targets or [])
        props = pool_info_properties or PoolInfoProperties()
        self.size_hint_bytes = props.size_hint_bytes
        self.pool_info_properties = props

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.pool_name!r}, size_hint={self.size_hint_bytes})"


class WorkspacePoolInfo(_PoolInfo):
    """A pool for intermediates: ``WorkspacePoolInfo("sram", [target])``."""

    def __init__(self, pool_name: str, targets: Sequence[Any] | None = None,
                 pool_info_properties: PoolInfoProperties | None = None) -> None:
        super().__init__(pool_name, targets, pool_info_properties)


class ConstantPoolInfo(_PoolInfo):
    """A pool for constants: ``ConstantPoolInfo("flash", [target])``."""

    def __init__(self, pool_name: str, targets: Sequence[Any] | None = None,
                 constant_info_arr: Sequence[Any] | None = None,
                 pool_info_properties: PoolInfoProperties | None = None) -> None:
        super().__init__(pool_name, targets, pool_info_properties)
        if constant_info_arr:
            raise TVMError("ConstantPoolInfo: the planner places the model's constants "
                           "itself; pass no constant_info_arr")
        self.constant_info_arr: list[Any] = []


class WorkspaceMemoryPools:
    """The workspace pools of a build, in the order the planner fills them."""

    def __init__(self, pools: Sequence[WorkspacePoolInfo]) -> None:
        pools = list(pools)
        if not pools or not all(isinstance(p, WorkspacePoolInfo) for p in pools):
            raise TVMError("WorkspaceMemoryPools takes a non-empty list of WorkspacePoolInfo")
        names = [p.pool_name for p in pools]
        if len(set(names)) != len(names):
            raise TVMError(f"workspace pool names must be unique, got {names}")
        self.pools = pools


class ConstantMemoryPools:
    """The constant pool of a build (kiln places all constants in one pool)."""

    def __init__(self, pools: Sequence[ConstantPoolInfo]) -> None:
        pools = list(pools)
        if len(pools) != 1 or not isinstance(pools[0], ConstantPoolInfo):
            raise TVMError("ConstantMemoryPools takes one ConstantPoolInfo (kiln places all "
                           f"constants in one pool), got {pools!r}")
        self.pools = pools
