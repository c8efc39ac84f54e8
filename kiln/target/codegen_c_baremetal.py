"""The bare-metal C dialect: what microTVM's firmware compiles (no OpenMP, no heap).

Entry points: :class:`CodeGenCBareMetal` (the dialect, chosen by
:func:`~kiln.target.codegen_c.emit_c` for ``-mcpu=cortex-m*`` targets or ``bare_metal=True``),
:func:`scratch_layout` (where each big allocation of a kernel lives in its scratch block; the
AOT executor plans the blocks into its pool).
"""

from __future__ import annotations

import math
from typing import Any

from kiln.runtime.dtype import DataType
from kiln.target.c_abi import c_string, c_type, is_const_int, node_name
from kiln.target.c_access import uniform_vector_lanes
from kiln.target.codegen_c import CodeGenC

__all__ = ["CodeGenCBareMetal", "scratch_layout", "STACK_LIMIT_BYTES", "SCRATCH_ALIGNMENT"]


# Constant allocations up to this many bytes stay on the stack in the bare-metal dialect.
STACK_LIMIT_BYTES = 256
SCRATCH_ALIGNMENT = 16


class CodeGenCBareMetal(CodeGenC):
    """The microcontroller dialect: no OpenMP, no heap, big scratch in the caller's pool.

    A constant-size allocation of at most :attr:`stack_limit` bytes (register tiles, small
    temporaries) lives on the stack. Bigger ones are carved from one scratch block at the
    offsets :func:`scratch_layout` gives: the kernel becomes ``<name>_unpacked_ws(buffers...,
    uint8_t* kiln_scratch)``, which the AOT executor calls with a slice of its planned pool,
    and ``<name>_unpacked`` (what the packed wrapper, and so the C graph executor, calls) takes
    the block from ``TVMBackendAllocWorkspace`` around the call.
    """

    use_thread_pool = False
    workspace_threshold = 1 << 62
    stack_limit = STACK_LIMIT_BYTES

    def _unpacked_definition(self, func: Any, name: str, symbol: str, params: list[str]) -> str:
        self._scratch, total = scratch_layout(func)
        if not total:
            return super()._unpacked_definition(func, name, symbol, params)
        body = super()._unpacked_definition(func, name, f"{symbol}_ws", params + [
            f"uint8_t* {self.restrict} kiln_scratch"])
        names = [p.rsplit(" ", 1)[1] for p in params]
        shim = "\n".join([
            f"int32_t {symbol}({', '.join(params) or 'void'}) {{",
            f"  uint8_t* kiln_scratch = (uint8_t*)TVMBackendAllocWorkspace(1, 0, "
            f"(uint64_t){total}, 0, 8);",
            "  if (kiln_scratch == NULL) {",
            f"    TVMAPISetLastError({c_string(f'{name}: no {total} bytes of workspace')});",
            "    return -1;", "  }",
            f"  int32_t rc = {symbol}_ws({', '.join(names + ['kiln_scratch'])});",
            "  if (TVMBackendFreeWorkspace(1, 0, kiln_scratch) != 0) return -1;",
            "  return rc;", "}"])
        return body + "\n" + shim

    def stmt_Allocate(self, node: Any) -> None:
        """An allocation planned into the scratch block is a pointer into it; others as in C."""
        offset = getattr(self, "_scratch", {}).get(id(node.buffer_var))
        if offset is None:
            super().stmt_Allocate(node)
            return
        elem = c_type(DataType(node.dtype).element_of)
        name = self._bind(node.buffer_var)
        self._pointer_types[id(node.buffer_var)] = f"{elem}*"
        self._line(f"{elem}* {self.restrict} {name} = ({elem}*)(kiln_scratch + {offset});")
        self.emit_stmt(node.body)

    def _emit_workspace(self, node: Any, elem: str, name: str, count: str,
                        t: DataType) -> None:
        self._line(f"{elem} {name}[{count}] __attribute__((aligned(16)));")
        self.emit_stmt(node.body)


def scratch_layout(func: Any) -> tuple[dict[int, int], int]:
    """``({id(buffer var): byte offset}, total bytes)`` of the allocations of ``func`` that the
    bare-metal dialect takes from the scratch block (constant size over
    :data:`STACK_LIMIT_BYTES`, not kept as a vector register tile), in the order they appear.
    """
    from kiln.tir.stmt_functor import pre_order_visit

    tiles = uniform_vector_lanes(func.body)
    offsets: dict[int, int] = {}
    total = [0]

    def visit(node: Any) -> None:
        if node_name(node) != "Allocate" or id(node.buffer_var) in tiles:
            return
        if not all(is_const_int(e) for e in node.extents):
            return
        t = DataType(node.dtype)
        nbytes = math.prod(int(e.value) for e in node.extents) * t.lanes * t.element_of.itemsize
        if nbytes > STACK_LIMIT_BYTES:
            offsets[id(node.buffer_var)] = total[0]
            total[0] += -(-nbytes // SCRATCH_ALIGNMENT) * SCRATCH_ALIGNMENT

    pre_order_visit(func.body, visit)
    return offsets, total[0]
