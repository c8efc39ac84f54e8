"""Cortex-M boards emulated by QEMU: ``qemu-cortex-m4`` (``mps2-an386``, M4F) and
``qemu-cortex-m7`` (``mps2-an500``, M7).

Entry points: :class:`CortexMBoard`, :data:`QEMU_BOARDS`, :func:`size_of`.

A program is built by ``arm-none-eabi-gcc`` with kiln's own startup code and linker script
(``src/cortex_m/``): vector table, reset handler, .data/.bss init, FPU enable. It runs under
``qemu-system-arm`` with semihosting (input/output files, exit status) and the UART on
stdin/stdout (console). With ``icount`` on (the default) QEMU runs ``-icount shift=0``: one
instruction per virtual nanosecond, so SysTick on the 25 MHz CPU clock times 40 is the exact,
repeatable instruction count of the run call. (QEMU's MPS2 SysTick reference clock,
CLKSOURCE=0, runs at 1 MHz; QEMU has no DWT cycle counter.)
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kiln.micro.board.base import (
    Board,
    MicroBoardError,
    SourceGroup,
    compile_command,
    compile_objects,
    run_process,
    source_dir,
)

__all__ = ["CortexMBoard", "QEMU_BOARDS", "size_of", "find_tool"]

# One instruction per virtual ns (1 GHz) over SysTick counting MPS2's 25 MHz CPU clock.
INSTRUCTIONS_PER_TICK = 40


def find_tool(name: str, package: str) -> str:
    """The path of toolchain program ``name``; a clear error naming the package if missing."""
    path = shutil.which(name)
    if path is None:
        raise MicroBoardError(f"{name} is not installed; the Cortex-M boards need it "
                              f"(Debian/Ubuntu: apt-get install {package})")
    return path


@dataclass(frozen=True)
class _Core:
    machine: str
    mcpu: str
    fpu: str
    extra_ram_origin: int


class CortexMBoard(Board):
    """A Cortex-M with FPU on QEMU's MPS2 board, built with arm-none-eabi-gcc.

    Parameters
    ----------
    name : str
        ``"qemu-cortex-m4"`` or ``"qemu-cortex-m7"``.
    icount : bool
        Run QEMU with ``-icount shift=0`` (exact instruction counts, repeatable timing).
    stack_size : int
        Bytes reserved for the stack at the top of the 4 MiB RAM.
    opt_level : str
        The C optimization flag for every source (``-O2``).
    systick_period : int
        Ticks between SysTick wraps (the 24-bit maximum by default; the wrap interrupt
        extends the count to 64 bits).
    """

    _CORES = {
        "qemu-cortex-m4": _Core("mps2-an386", "cortex-m4", "fpv4-sp-d16", 0x21000000),
        "qemu-cortex-m7": _Core("mps2-an500", "cortex-m7", "fpv5-d16", 0x60000000),
    }

    def __init__(self, name: str = "qemu-cortex-m4", icount: bool = True,
                 stack_size: int = 64 * 1024, opt_level: str = "-O2",
                 systick_period: int = 1 << 24) -> None:
        if not 1 < systick_period <= 1 << 24:
            raise MicroBoardError(f"systick_period must be in 2..2^24, got {systick_period}")
        if name not in self._CORES:
            raise MicroBoardError(f"unknown Cortex-M board {name!r}; choose one of "
                                  f"{sorted(self._CORES)}")
        self.name = name
        self.core = self._CORES[name]
        self.icount = icount
        self.stack_size = stack_size
        self.opt_level = opt_level
        self.systick_period = systick_period
        self.target = f"c -keys=arm_cpu -mcpu={self.core.mcpu}"

    @property
    def cflags(self) -> list[str]:
        """Code-generation flags: the core, Thumb, the hard-float ABI on the core's FPU."""
        return [f"-mcpu={self.core.mcpu}", "-mthumb", f"-mfpu={self.core.fpu}",
                "-mfloat-abi=hard"]

    def linker_script(self, build_dir: Path) -> Path:
        """Write the MPS2 linker script for this core into ``build_dir``."""
        text = (source_dir() / "cortex_m" / "mps2.ld.in").read_text()
        text = text.replace("@EXTRA_RAM_ORIGIN@", hex(self.core.extra_ram_origin))
        text = text.replace("@STACK_SIZE@", hex(self.stack_size))
        path = build_dir / "mps2.ld"
        path.write_text(text)
        return path

    def build(self, groups: Sequence[SourceGroup], build_dir: Path) -> Path:
        gcc = find_tool("arm-none-eabi-gcc", "gcc-arm-none-eabi libnewlib-arm-none-eabi")
        build_dir.mkdir(parents=True, exist_ok=True)
        board_src = source_dir()
        own = SourceGroup.of([board_src / "cortex_m" / f for f in
                              ("startup.c", "board_cortex_m.c", "syscalls.c")],
                             [board_src / "common"],
                             {"KILN_SYSTICK_PERIOD": f"{self.systick_period}u"})
        flags = [*self.cflags, self.opt_level, "-g", "-std=gnu11", "-ffunction-sections",
                 "-fdata-sections", "-fno-common", f"-I{board_src / 'common'}"]
        objects = compile_objects(gcc, flags, [own, *groups],
                                  f"arm-none-eabi-gcc for board {self.name}")
        elf = build_dir / "program.elf"
        cmd = [gcc, *self.cflags, *map(str, objects),
               "-T", str(self.linker_script(build_dir)), "--specs=nano.specs",
               "-nostartfiles", "-Wl,--gc-sections", f"-Wl,-Map={build_dir / 'program.map'}",
               "-o", str(elf), "-lm"]
        compile_command(cmd, build_dir, f"linking for board {self.name}")
        return elf

    def qemu_command(self, program: Path) -> list[str]:
        """The ``qemu-system-arm`` command line that runs ``program``."""
        qemu = find_tool("qemu-system-arm", "qemu-system-arm")
        cmd = [qemu, "-M", self.core.machine, "-display", "none", "-nodefaults",
               "-nic", "none", "-serial", "stdio",
               "-semihosting-config", "enable=on,target=native"]
        if self.icount:
            cmd += ["-icount", "shift=0"]
        return [*cmd, "-kernel", str(program)]

    def execute(self, program: Path, io_dir: Path, timeout: float,
                feed: bytes | None = None) -> tuple[int, str]:
        # -serial stdio: the UART is QEMU's stdin/stdout, so `feed` reaches the UART receiver
        code, out, err = run_process(self.qemu_command(program.resolve()), io_dir, timeout,
                                     f"QEMU ({self.core.machine})", feed)
        # QEMU's own warnings (e.g. about the absent NIC) go to stderr; keep them visible.
        return code, out + err

    def instructions(self, ticks: int) -> int | None:
        return ticks * INSTRUCTIONS_PER_TICK if self.icount else None


QEMU_BOARDS = tuple(CortexMBoard._CORES)


def size_of(elf: Path) -> dict[str, int]:
    """``arm-none-eabi-size -A`` of ``elf``: bytes per output section."""
    tool = find_tool("arm-none-eabi-size", "binutils-arm-none-eabi")
    code, out, err = run_process([tool, "-A", str(elf)], elf.parent, 60, "arm-none-eabi-size")
    if code != 0:
        raise MicroBoardError(f"arm-none-eabi-size failed on {elf}: {err}")
    sizes = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0].startswith(".") and parts[1].isdigit():
            sizes[parts[0]] = int(parts[1])
    return sizes
