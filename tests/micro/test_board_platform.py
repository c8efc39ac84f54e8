"""kiln's CRT platform hooks (platform.c) in C, with both allocators: the stack allocator (AOT
programs) and the page allocator (graph-executor programs); on the host under ASan+UBSan and
on the emulated Cortex-M4, where TVMPlatformAbort must exit QEMU through semihosting."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.micro import get_standalone_crt_dir
from kiln.micro.board import CortexMBoard, HostBoard, SourceGroup
from kiln.micro.board.base import source_dir

TEST_C = Path(__file__).with_name("platform_test.c")


def _build(board, allocator: str, tmp_path: Path, **defines) -> Path:
    crt = Path(get_standalone_crt_dir())
    config = tmp_path / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "crt_config.h").write_text((crt / "template" / "crt_config-template.h")
                                         .read_text())
    crt_src = crt / "src" / "runtime" / "crt"
    defines = {"KILN_WORKSPACE_BYTES": str(64 * 1024), **defines}
    if allocator == "stack":
        defines["KILN_ALLOCATOR_STACK"] = "1"
    sources = [TEST_C, source_dir() / "common" / "platform.c",
               *sorted((crt_src / "memory").glob("*.c")),
               *sorted((crt_src / "common").glob("*.c"))]
    group = SourceGroup.of(sources, [config, source_dir() / "common", crt / "include",
                                     crt_src / "include"], defines)
    return board.build([group], tmp_path / "build")


@pytest.mark.parametrize("allocator", ["stack", "page"])
def test_platform_hooks_on_the_host(allocator, tmp_path):
    board = HostBoard(extra_cflags=["-fsanitize=address,undefined", "-fno-sanitize-recover"])
    program = _build(board, allocator, tmp_path)
    code, console = board.execute(program, tmp_path, timeout=60)
    assert (code, console.strip()) == (0, "ok"), console


def test_platform_hooks_and_abort_on_the_cortex_m4(tmp_path):
    board = CortexMBoard("qemu-cortex-m4")
    program = _build(board, "page", tmp_path)
    code, console = board.execute(program, tmp_path, timeout=60)
    assert code == 0 and console.startswith("ok"), console
    program = _build(board, "stack", tmp_path / "abort", KILN_TEST_ABORT="1")
    code, console = board.execute(program, tmp_path, timeout=60)
    assert code == 4 and "kiln-abort: TVMPlatformAbort(0x503)" in console, console


@pytest.mark.parametrize("compiler", ["cc", "arm-none-eabi-gcc"])
def test_board_sources_compile_warning_free(compiler, tmp_path):
    from kiln.micro.board.base import compile_command

    crt = Path(get_standalone_crt_dir())
    config = tmp_path / "config"
    config.mkdir()
    (config / "crt_config.h").write_text((crt / "template" / "crt_config-template.h")
                                         .read_text())
    src = source_dir()
    files = [src / "common" / "main.c", src / "common" / "platform.c"]
    if compiler == "cc":
        files.append(src / "host" / "board_host.c")
        flags = []
    else:
        files += sorted((src / "cortex_m").glob("*.c"))
        flags = CortexMBoard("qemu-cortex-m4").cflags
    for variant in ([], ["-DKILN_ALLOCATOR_STACK=1"], ["-DKILN_LINKED_IO=1"],
                    ["-DKILN_CONSOLE_IO=1"]):
        cmd = [compiler, *flags, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", *variant,
               f"-I{config}", f"-I{src / 'common'}", f"-I{crt / 'include'}", "-c",
               *map(str, files)]
        compile_command(cmd, tmp_path, f"{compiler} -Werror {' '.join(variant)}")
