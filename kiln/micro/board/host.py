"""The ``host`` board: a standalone program built by the system C compiler and run as a
process. Entry point: :class:`HostBoard`.

The program takes its input/output directory as ``argv[1]`` (or, built for console I/O, reads
its inputs from stdin); its ticks are ``CLOCK_MONOTONIC`` nanoseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kiln.micro.board.base import (
    Board,
    SourceGroup,
    compile_command,
    compile_objects,
    run_process,
    source_dir,
)
from kiln.runtime.cc import find_compiler

__all__ = ["HostBoard"]


class HostBoard(Board):
    """This machine, through ``cc`` (``$CC`` if set).

    Parameters
    ----------
    opt_level : str
        The C optimization flag (``-O2``).
    extra_cflags : sequence of str
        More compiler flags, e.g. ``["-fsanitize=address,undefined"]``.
    """

    name = "host"
    target = "c"

    def __init__(self, opt_level: str = "-O2", extra_cflags: Sequence[str] = ()) -> None:
        self.opt_level = opt_level
        self.extra_cflags = list(extra_cflags)

    def build(self, groups: Sequence[SourceGroup], build_dir: Path) -> Path:
        build_dir.mkdir(parents=True, exist_ok=True)
        common = source_dir() / "common"
        own = SourceGroup.of([source_dir() / "host" / "board_host.c"], [common])
        cc = find_compiler()
        flags = [self.opt_level, "-g", "-std=gnu11", *self.extra_cflags, f"-I{common}"]
        objects = compile_objects(cc, flags, [own, *groups], "cc for board host")
        program = build_dir / "program"
        compile_command([cc, *self.extra_cflags, *map(str, objects), "-o", str(program),
                         "-lm"], build_dir, "linking for board host")
        return program

    def execute(self, program: Path, io_dir: Path, timeout: float,
                feed: bytes | None = None) -> tuple[int, str]:
        code, out, err = run_process([str(program.resolve()), str(io_dir)], io_dir, timeout,
                                     "the host program", feed)
        return code, out + err
