"""AutoTVM on microcontrollers (TVM's ``tvm.micro.autotvm_build_func`` and
``AutoTvmModuleLoader``): candidates cross-compiled into Cortex-M programs, timed under QEMU.

Entry points: :func:`autotvm_build_func` (``LocalBuilder(build_func=...)``) and
:class:`AutoTvmModuleLoader` (``LocalRunner(module_loader=...)``).

Example
-------
>>> import kiln as tvm                                                      # doctest: +SKIP
>>> option = tvm.autotvm.measure_option(
...     builder=tvm.autotvm.LocalBuilder(build_func=tvm.micro.autotvm_build_func),
...     runner=tvm.autotvm.LocalRunner(module_loader=tvm.micro.AutoTvmModuleLoader(
...         tvm.micro.get_microtvm_template_projects("qemu-cortex-m"),
...         {"board": "qemu-cortex-m4"})))                                  # doctest: +SKIP

The builder turns each candidate's C (target ``c -keys=arm_cpu -mcpu=cortex-m4``) into a
whole program for the QEMU board of its ``-mcpu`` with ``arm-none-eabi-gcc`` (for the host
C target, ``tvm.micro.testing.get_target("crt")``, a host program: the ``crt`` template,
timed by the host's clock): the board's
startup code, the CRT (``common``, ``memory``: the kernel's workspace and error calls), kiln's
standalone ``main.c`` and a generated glue whose run function calls the kernel's unpacked
entry on static buffers. The runner runs the program once under ``qemu-system-arm -icount
shift=0`` and reports the kernel's second call (``KILN_REPEAT=2``; the first may pay for
lazy initialization) in the board's virtual time: one nanosecond per instruction, so every
cost is the exact instruction count and repeats are identical (one measurement per
candidate, whatever ``number``/``repeat`` say). A program that faults, aborts or outlives
the runner's timeout is a failed measurement (``RUNTIME_DEVICE``, ``RUN_TIMEOUT``).

kiln differs from TVM in where the device program is built: in the builder's parallel
workers rather than by the module loader (which in TVM also flashes and opens an RPC
session); the loader here names the board and runs the program.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import numpy as np

from kiln.micro.board import get_board
from kiln.micro.board.base import MicroBoardError, MicroTimeoutError, SourceGroup, source_dir
from kiln.micro.board.qemu import QEMU_BOARDS
from kiln.micro.crt_build import get_standalone_crt_dir
from kiln.runtime.error import TVMError

__all__ = ["autotvm_build_func", "AutoTvmModuleLoader", "board_for_target", "kernel_glue"]

# runs of the kernel per program start; the last one is timed
_REPEAT = 2
# the CRT's platform pool: the kernels' workspaces (a padded input, say)
_WORKSPACE_BYTES = 1 << 20


def board_for_target(target: Any) -> str:
    """The board a candidate for ``target`` runs on: the QEMU board whose core is the
    ``-mcpu`` (``cortex-m4`` -> ``qemu-cortex-m4``), or ``host`` for the host C target
    (``tvm.micro.testing.get_target("crt")``)."""
    from kiln.target import Target

    target = Target(target) if isinstance(target, str) else target
    mcpu = str(getattr(target, "mcpu", "") or "")
    if target.kind.name == "c" and not mcpu and "arm_cpu" not in target.keys:
        return "host"
    board = f"qemu-{mcpu}"
    if board not in QEMU_BOARDS:
        raise TVMError(f"autotvm_build_func: target {target} has no QEMU board (-mcpu "
                       f"{mcpu or 'unset'}; boards: {list(QEMU_BOARDS)})")
    return board


# template project -> the boards its programs run on
_TEMPLATE_BOARDS = {"qemu-cortex-m": QEMU_BOARDS, "crt": ("host",)}


def _buffer(kind: str, index: int, nbytes: int, note: str) -> str:
    return (f"static uint8_t kiln_{kind}_{index}[{max(nbytes, 1)}] __attribute__((aligned(16), "
            f"section(\".bss.noinit.kiln_io\")));  /* {note} */")


def kernel_glue(entry: str, tensors: list[tuple[tuple[int, ...], str, bool]]) -> str:
    """C that connects ``main.c`` (``kiln_model.h``) to kernel ``<entry>_unpacked``:
    ``tensors`` are its arguments in order as ``(shape, dtype, is_output)``."""
    lines = ["", f"/* kiln.micro.autotvm: main.c's model is one call of {entry}. */",
             '#include "kiln_model.h"']
    args = []
    for kind, want in (("input", False), ("output", True)):
        chosen = [(shape, dtype) for shape, dtype, out in tensors if out == want]
        for i, (shape, dtype) in enumerate(chosen):
            lines.append(_buffer(kind, i, _nbytes(shape, dtype), f"{dtype}{list(shape)}"))
        names = ", ".join(f"kiln_{kind}_{i}" for i in range(len(chosen))) or "0"
        sizes = ", ".join(str(_nbytes(s, d)) for s, d in chosen) or "0"
        lines += [f"const int kiln_num_{kind}s = {len(chosen)};",
                  f"void* kiln_{kind}_data[] = {{{names}}};",
                  f"const size_t kiln_{kind}_bytes[] = {{{sizes}}};"]
    counts = {False: 0, True: 0}
    for *_, out in tensors:
        kind = "output" if out else "input"
        args.append(f"(void*)kiln_{kind}_{counts[out]}")
        counts[out] += 1
    lines += ["int kiln_model_prepare(void) { return 0; }",
              "int kiln_model_init(void) { return 0; }",
              f"int kiln_model_run(void) {{ return {entry}_unpacked({', '.join(args)}); }}",
              "int kiln_model_finish(void) { return 0; }", ""]
    return "\n".join(lines)


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _runtime_group(build_dir: Path) -> tuple[SourceGroup, list[Path]]:
    """The program's runtime (main.c, platform.c, the CRT's common and memory parts) and
    the include directories a kernel needs; shared by every candidate (cached objects)."""
    crt = Path(get_standalone_crt_dir())
    crt_src = crt / "src" / "runtime" / "crt"
    config_dir = build_dir / "crt_config"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "crt_config.h").write_bytes(
        (crt / "template" / "crt_config-template.h").read_bytes())
    common = source_dir() / "common"
    includes = [config_dir, common, crt / "include", crt_src / "include"]
    crt_files = [f for part in ("common", "memory") for f in sorted((crt_src / part).glob("*.c"))]
    defines = {"KILN_WORKSPACE_BYTES": str(_WORKSPACE_BYTES), "KILN_REPEAT": str(_REPEAT)}
    runtime = SourceGroup.of([common / "main.c", common / "platform.c", *crt_files], includes,
                             defines)
    return runtime, includes


def autotvm_build_func(module: Any, tensors: list, output_dir: str, target: Any) -> str:
    """Cross-compile a candidate (``module`` built from ``tensors``, inputs then outputs) into
    a program for ``target``'s board (:func:`board_for_target`) in ``output_dir``; return
    the program's path.

    ``LocalBuilder(build_func=autotvm_build_func)`` calls it in its workers; a compiler or
    linker error is the candidate's (recorded as ``COMPILE_DEVICE``)."""
    from kiln.autotvm.measure.measure_methods import ENTRY_NAME

    board = get_board(board_for_target(target))
    build_dir = Path(output_dir) / f"micro_{secrets.token_hex(8)}"
    build_dir.mkdir(parents=True)
    described = [(tuple(int(d) for d in t.shape), str(t.dtype), not _is_input(t))
                 for t in tensors]
    kernel = build_dir / "kernel.c"
    kernel.write_text(module.get_source() + kernel_glue(ENTRY_NAME, described))
    runtime, includes = _runtime_group(build_dir)
    program = board.build([runtime, SourceGroup.of([kernel], includes)], build_dir)
    (build_dir / "candidate.json").write_text(json.dumps(
        {"board": board.name, "tensors": [[list(s), d, o] for s, d, o in described]}))
    return str(program)


def _is_input(t: Any) -> bool:
    from kiln import te

    return isinstance(t.op, te.PlaceholderOp)


class AutoTvmModuleLoader:
    """Runs candidates built by :func:`autotvm_build_func` on a QEMU Cortex-M board (or, with
    the ``crt`` template, on this machine: timed by its clock, not exactly).

    Parameters
    ----------
    template_project_dir : str or Path
        kiln's ``qemu-cortex-m`` or ``crt`` template project
        (``tvm.micro.get_microtvm_template_projects("qemu-cortex-m")``); another template
        is refused.
    project_options : dict, optional
        ``board`` (default: the board the candidate was built for; it must be the same)
        and ``verbose`` (ignored).
    """

    def __init__(self, template_project_dir: str | Path, project_options: dict | None = None,
                 project_dir: str | None = None, use_existing: bool = False) -> None:
        path = Path(template_project_dir)
        if path.name not in _TEMPLATE_BOARDS:
            raise TVMError(f"AutoTvmModuleLoader: kiln measures candidates on its "
                           f"{sorted(_TEMPLATE_BOARDS)} template projects, got {str(path)!r}")
        self.template_project_dir = str(path)
        self.project_options = dict(project_options or {})
        self._boards = _TEMPLATE_BOARDS[path.name]
        board = self.project_options.get("board")
        if board is not None and board not in self._boards:
            raise TVMError(f"AutoTvmModuleLoader: unknown board {board!r} for the "
                           f"{path.name!r} template; choose one of {list(self._boards)}")

    def measure(self, program: str, timeout: float) -> tuple[str, Any]:
        """Run one candidate: ``("ok", (seconds,))``, ``("timeout", seconds)`` or
        ``("error", message)`` (a fault, an abort, a wrong board)."""
        path = Path(program)
        try:
            described = json.loads((path.parent / "candidate.json").read_text())
        except (OSError, ValueError) as err:
            return "error", f"{program}: not a candidate built by autotvm_build_func ({err})"
        board_name = self.project_options.get("board", described["board"])
        if board_name != described["board"] or board_name not in self._boards:
            return "error", (f"the candidate was built for {described['board']}, the loader "
                             f"runs {board_name} ({Path(self.template_project_dir).name})")
        board = get_board(board_name)
        rng = np.random.default_rng(0)
        inputs, outputs = [], []
        for shape, dtype, is_output in described["tensors"]:
            if is_output:
                outputs.append((tuple(shape), dtype))
            elif np.dtype(dtype).kind == "f":
                inputs.append(rng.random(shape).astype(dtype))
            else:
                inputs.append(rng.integers(-8, 8, size=shape).astype(dtype))
        try:
            result = board.run(path, inputs, outputs, timeout=timeout)
        except MicroTimeoutError:
            return "timeout", timeout
        except MicroBoardError as err:
            return "error", str(err)[:1024]
        return "ok", (result.seconds,)
