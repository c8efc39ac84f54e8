"""Standalone boards for microTVM: build a Model Library Format + the C runtime into a
program and run it on the host or on a Cortex-M emulated by QEMU.

Entry points: :func:`build_standalone` / :class:`StandaloneProject` (an MLF archive built for
a board, then ``run(inputs) -> RunResult``), :func:`get_board`, :data:`BOARD_NAMES`,
:class:`HostBoard`, :class:`CortexMBoard`, :class:`ModelLibrary`, :class:`MicroBoardError`.

Example
-------
>>> from kiln.micro.board import get_board
>>> get_board("qemu-cortex-m4").target
'c -keys=arm_cpu -mcpu=cortex-m4'
"""

from __future__ import annotations

from kiln.micro.board.base import Board, ExitCode, MicroBoardError, RunResult, SourceGroup
from kiln.micro.board.host import HostBoard
from kiln.micro.board.library import ModelLibrary, TensorInfo
from kiln.micro.board.project import StandaloneProject, build_standalone
from kiln.micro.board.qemu import QEMU_BOARDS, CortexMBoard

__all__ = ["Board", "ExitCode", "MicroBoardError", "RunResult", "SourceGroup", "HostBoard",
           "CortexMBoard",
           "BOARD_NAMES", "get_board", "ModelLibrary", "TensorInfo", "StandaloneProject",
           "build_standalone"]

BOARD_NAMES = ("host", *QEMU_BOARDS)


def get_board(name: str, **options) -> Board:
    """The board called ``name`` (one of :data:`BOARD_NAMES`), built with ``options``."""
    if name == "host":
        return HostBoard(**options)
    if name in QEMU_BOARDS:
        return CortexMBoard(name, **options)
    raise MicroBoardError(f"unknown board {name!r}; choose one of {list(BOARD_NAMES)}")
