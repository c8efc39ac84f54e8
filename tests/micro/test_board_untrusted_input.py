"""What a board takes from outside (its console, a Model Library Format archive, a compiler):
garbled or hostile input, or a compiler that hangs, raises MicroBoardError."""

from __future__ import annotations

import json

import pytest

from kiln.micro.board import ModelLibrary
from kiln.micro.board.base import (
    MicroBoardError,
    compile_command,
    parse_console_outputs,
    parse_result_line,
)


def test_console_outputs_reassemble_in_order():
    console = "boot\nkiln-output 0 0 0102\nkiln-output 1 0 ff\nkiln-output 0 2 03\n"
    assert parse_console_outputs(console, [3, 1]) == [b"\x01\x02\x03", b"\xff"]


@pytest.mark.parametrize("line, what", [
    ("kiln-output -1 0 00", "out of order"),  # a negative index must not wrap to the last output
    ("kiln-output 5 0 00", "out of order"),
    ("kiln-output 0 1 00", "out of order"),
    ("kiln-output x 0 00", "malformed"),
    ("kiln-output 0", "malformed"),
    ("kiln-output 0 0 zz", "malformed"),
])
def test_console_outputs_reject_bad_lines(line, what):
    with pytest.raises(MicroBoardError, match=what):
        parse_console_outputs(line + "\n", [1, 1])


def test_result_line_fields_and_garbage():
    assert parse_result_line("kiln-result a=1 b=-2\n") == {"a": 1, "b": -2}
    with pytest.raises(MicroBoardError, match="malformed 'kiln-result' field 'cycles=12x'"):
        parse_result_line("kiln-result cycles=12x\n")
    with pytest.raises(MicroBoardError, match="no 'kiln-result' line"):
        parse_result_line("hello\n")


@pytest.mark.parametrize("name", ["../../x", "a(b", "a b"])
def test_archive_module_name_must_be_an_identifier(tmp_path, name):
    # The name becomes a header path, part of regular expressions and C names.
    (tmp_path / "metadata.json").write_text(json.dumps({"modules": {name: {"executors": ["aot"]}}}))
    with pytest.raises(MicroBoardError, match="module name .* must be letters, digits and '_'"):
        ModelLibrary(tmp_path)


def test_board_compiles_honour_kiln_cc_timeout(tmp_path, monkeypatch):
    # The one compiler time limit (KILN_CC_TIMEOUT) also bounds board builds.
    monkeypatch.setenv("KILN_CC_TIMEOUT", "0.5")
    with pytest.raises(MicroBoardError, match="did not finish within 0.5 s"):
        compile_command(["sleep", "60"], tmp_path, "compiling")
