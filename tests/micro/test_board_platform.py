"""kiln's CRT platform hooks (platform.c) in C on the host board, with both allocators: the
stack allocator (AOT programs) and the page allocator (graph-executor programs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.micro import get_standalone_crt_dir
from kiln.micro.board import HostBoard, SourceGroup
from kiln.micro.board.base import source_dir

TEST_C = Path(__file__).with_name("platform_test.c")


@pytest.mark.parametrize("allocator", ["stack", "page"])
def test_platform_hooks(allocator, tmp_path):
    crt = Path(get_standalone_crt_dir())
    config = tmp_path / "config"
    config.mkdir()
    (config / "crt_config.h").write_text((crt / "template" / "crt_config-template.h")
                                         .read_text())
    crt_src = crt / "src" / "runtime" / "crt"
    defines = {"KILN_WORKSPACE_BYTES": str(64 * 1024)}
    if allocator == "stack":
        defines["KILN_ALLOCATOR_STACK"] = "1"
    sources = [TEST_C, source_dir() / "common" / "platform.c",
               *sorted((crt_src / "memory").glob("*.c")), *sorted((crt_src / "common").glob("*.c"))]
    group = SourceGroup.of(sources, [config, source_dir() / "common", crt / "include",
                                     crt_src / "include"], defines)
    board = HostBoard(extra_cflags=["-fsanitize=address,undefined", "-fno-sanitize-recover"])
    program = board.build([group], tmp_path / "build")
    code, console = board.execute(program, tmp_path, timeout=60)
    assert (code, console.strip()) == (0, "ok"), console
