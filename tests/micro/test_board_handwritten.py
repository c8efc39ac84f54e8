"""The boards' own code (startup, linker script, semihosting, UART, SysTick) with a
hand-written C program, no kiln model and no CRT: outputs against NumPy, exact instruction
counts under -icount, exit codes, timeouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kiln.micro.board import CortexMBoard, HostBoard, MicroBoardError, get_board
from kiln.micro.board.base import SourceGroup

PROGRAM = Path(__file__).with_name("handwritten_program.c")
N, LOOPS = 64, 1_000_000


def _build(board, tmp_path_factory, **defines):
    values = {"KILN_N": str(N), "KILN_LOOPS": str(LOOPS), "KILN_ABORT": "0", **defines}
    tag = "-".join(f"{k}{v}" for k, v in defines.items()) or "plain"
    return board.build([SourceGroup.of([PROGRAM], [], values)],
                       tmp_path_factory.mktemp(f"{board.name}-{tag}"))


@pytest.fixture(scope="module", params=["host", "qemu-cortex-m4", "qemu-cortex-m7"])
def built(request, tmp_path_factory):
    board = get_board(request.param)
    return board, _build(board, tmp_path_factory)


def test_output_matches_numpy(built):
    board, program = built
    x = np.random.default_rng(0).standard_normal(N).astype("float32")
    result = board.run(program, [x], [((N,), "float32")])
    np.testing.assert_array_equal(result.outputs[0], 2 * x + 1)
    assert result.ticks > 0 and result.ticks_per_second > 0


def test_wrong_input_size_is_an_io_error(built):
    board, program = built
    with pytest.raises(MicroBoardError, match="input file is missing or has the wrong size"):
        board.run(program, [np.zeros(N + 1, "float32")], [((N,), "float32")])


@pytest.mark.parametrize("name", ["qemu-cortex-m4", "qemu-cortex-m7"])
def test_systick_counts_instructions_exactly_under_icount(name, tmp_path_factory):
    # subs + bne per iteration: 2 * LOOPS instructions between the two tick reads, plus the
    # handful around them; SysTick's resolution is 40 instructions.
    board = CortexMBoard(name)
    program = _build(board, tmp_path_factory)
    x = np.zeros(N, "float32")
    first = board.run(program, [x], [((N,), "float32")])
    second = board.run(program, [x], [((N,), "float32")])
    assert abs(first.instructions - 2 * LOOPS) <= 200
    assert abs(first.ticks - second.ticks) <= 1  # repeatable
    assert 0 < first.stack_bytes < 4096


def test_systick_wraps_extend_the_count(tmp_path_factory):
    # A wrap every 1000 ticks (40000 instructions): the 2M-instruction loop crosses 50 wraps
    # and the 64-bit count still holds, give or take the wrap interrupts' own instructions.
    board = CortexMBoard("qemu-cortex-m4", systick_period=1000)
    program = _build(board, tmp_path_factory)
    result = board.run(program, [np.zeros(N, "float32")], [((N,), "float32")])
    assert abs(result.instructions - 2 * LOOPS) <= 50 * 40 + 200


def test_abort_exits_through_semihosting_with_its_code(tmp_path_factory):
    board = CortexMBoard("qemu-cortex-m4")
    program = _build(board, tmp_path_factory, KILN_ABORT="1")
    with pytest.raises(MicroBoardError, match="(?s)TVMPlatformAbort.*kiln-abort: requested"):
        board.run(program, [np.zeros(N, "float32")], [((N,), "float32")])


def test_a_hung_program_is_killed_at_the_timeout(tmp_path_factory):
    board = CortexMBoard("qemu-cortex-m4", icount=False)
    program = _build(board, tmp_path_factory, KILN_LOOPS="0")  # 0 - 1 wraps: 2^32 iterations
    with pytest.raises(MicroBoardError, match="did not finish within 0.5 s"):
        board.run(program, [np.zeros(N, "float32")], [((N,), "float32")], timeout=0.5)


def test_unknown_board_names_the_valid_ones():
    with pytest.raises(MicroBoardError, match="qemu-cortex-m4"):
        get_board("qemu-cortex-m0")


def test_host_build_error_carries_the_compiler_output(tmp_path):
    bad = tmp_path / "bad.c"
    bad.write_text("int main(void) { return undefined_name; }\n")
    with pytest.raises(MicroBoardError, match="undefined_name"):
        HostBoard().build([SourceGroup.of([bad])], tmp_path / "build")


def test_a_missing_toolchain_names_the_package(monkeypatch, tmp_path):
    import kiln.micro.board.qemu as qemu

    monkeypatch.setattr(qemu.shutil, "which", lambda name: None)
    with pytest.raises(MicroBoardError, match="apt-get install gcc-arm-none-eabi"):
        CortexMBoard("qemu-cortex-m4").build([SourceGroup.of([PROGRAM])], tmp_path)
    with pytest.raises(MicroBoardError, match="qemu-system-arm is not installed"):
        CortexMBoard("qemu-cortex-m7").execute(tmp_path / "x.elf", tmp_path, 1)


@pytest.mark.parametrize("name", ["host", "qemu-cortex-m4"])
def test_a_crash_is_reported_not_hidden(name, tmp_path_factory):
    # An undefined instruction: SIGILL on the host; on the Cortex-M the fault handler prints
    # and exits QEMU with KILN_EXIT_FAULT through semihosting.
    board = get_board(name)
    program = _build(board, tmp_path_factory, KILN_CRASH="1")
    want = "killed by SIGILL" if name == "host" else \
        r"(?s)status 5 \(the CPU took a fault exception\).*kiln-fault"
    with pytest.raises(MicroBoardError, match=want):
        board.run(program, [np.zeros(N, "float32")], [((N,), "float32")])
