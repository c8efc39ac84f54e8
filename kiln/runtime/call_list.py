"""The kernel call-list loop shared by the executors: a prebuilt list of packed calls run in C.

Entry points: :class:`OpRecord` (one call: kernel pointer, ``TVMValue`` arguments, type codes),
:func:`c_loop` (the loop's entry points in ``src/graph_executor.c``) and :func:`record_address`.

The graph executor builds one record per operator when it is created; the VM builds one per
kernel of a fused segment (its super-instruction) per storage block. Either then runs a whole
list with one ctypes call, and a failing kernel stops the loop with its index stored, so the
caller names the operator or instruction at fault (ARCHITECTURE: "Executors share the kernel
loop").
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from kiln.runtime.native import load_runtime_lib

__all__ = ["OpRecord", "CallLoop", "c_loop", "record_address"]


class OpRecord(ctypes.Structure):
    """One kernel call of a call list (mirror of ``KilnGraphOp`` in src/graph_executor.c)."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("args", ctypes.c_void_p),
        ("type_codes", ctypes.c_void_p),
        ("num_args", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("resource_handle", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class CallLoop:
    """The entry points of the C call-list loop, with their ctypes signatures set.

    ``run(records, begin, end, failed*)`` runs records ``[begin, end)``;
    ``run_repeated(records, begin, end, number, failed*)`` runs them ``number`` times;
    ``run_timed(records, count, number, seconds*, failed*)`` stores each record's mean seconds.
    Each returns 0, or the failing kernel's code with its index in ``*failed``.
    """

    run: Any
    run_repeated: Any
    run_timed: Any
    copy_address: int  # the packed function that copies one DLTensor into another


_loop: list[CallLoop] = []


def c_loop() -> CallLoop:
    """The call-list loop of the runtime support library (loaded once)."""
    if not _loop:
        lib = load_runtime_lib()
        i64, i64p, records = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p
        signatures = {
            "kiln_graph_run": [records, i64, i64, i64p],
            "kiln_graph_run_repeated": [records, i64, i64, i64, i64p],
            "kiln_graph_run_timed": [records, i64, i64, ctypes.POINTER(ctypes.c_double), i64p],
        }
        for name, argtypes in signatures.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = ctypes.c_int32
        _loop.append(CallLoop(
            lib.kiln_graph_run, lib.kiln_graph_run_repeated, lib.kiln_graph_run_timed,
            ctypes.cast(lib.kiln_graph_copy, ctypes.c_void_p).value,
        ))
    return _loop[0]


def record_address(records: Any, index: int) -> int:
    """Address of record ``index`` of a ctypes ``OpRecord`` array (to run one call alone)."""
    return ctypes.addressof(records) + index * ctypes.sizeof(OpRecord)
