"""Archives are data: safe_extract refuses hostile members, module tars never inject options."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from kiln.runtime import module as module_lib
from kiln.runtime import shared_library
from kiln.runtime.archive import extracted, safe_extract
from kiln.runtime.error import TVMError
from kiln.runtime.module import check_archive_link_options, load_module

KERNEL_C = b"int kiln_archive_test_kernel(void) { return 7; }\n"


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, **fields) -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, (io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def _tar(path: Path, *members: tuple) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, data)
    return path


HOSTILE_MEMBERS = {
    "absolute path": (_member("/tmp/kiln_owned.c", KERNEL_C), "absolute path"),
    "dot-dot": (_member("../kiln_owned.c", KERNEL_C), "'..' component"),
    "dot-dot inside": (_member("a/../../kiln_owned.c", KERNEL_C), "'..' component"),
    "symlink": (_member("k.c", kind=tarfile.SYMTYPE, linkname="/etc/passwd"), "is a link"),
    "hard link": (_member("k.c", kind=tarfile.LNKTYPE, linkname="/etc/passwd"), "is a link"),
    "char device": (_member("zero", kind=tarfile.CHRTYPE, devmajor=1, devminor=5),
                    "not a regular file"),
    "block device": (_member("sda", kind=tarfile.BLKTYPE, devmajor=8, devminor=0),
                     "not a regular file"),
    "fifo": (_member("pipe", kind=tarfile.FIFOTYPE), "not a regular file"),
    "backslash": (_member("..\\kiln_owned.c", KERNEL_C), "backslash"),
    "only dots": (_member("./.", KERNEL_C), "names no file"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_MEMBERS))
def test_safe_extract_refuses_each_hostile_member_before_writing(tmp_path: Path, case) -> None:
    member, message = HOSTILE_MEMBERS[case]
    archive = _tar(tmp_path / "evil.tar", _member("first.c", KERNEL_C), member)
    destination = tmp_path / "out" / "deep"
    with pytest.raises(TVMError, match=message):
        safe_extract(archive, destination)
    # Refused as a whole: not even the harmless first member was written.
    assert not destination.exists()
    assert not (tmp_path / "kiln_owned.c").exists()
    with pytest.raises(TVMError, match=message):
        load_module(archive)


def test_safe_extract_writes_plain_files_into_a_private_directory(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar", _member(".", kind=tarfile.DIRTYPE),
                   _member("./src/a.c", KERNEL_C, mode=0o4777),
                   _member("src", kind=tarfile.DIRTYPE), _member("run.sh", b"#!/bin/sh\n"))
    root = safe_extract(archive)
    try:
        assert os.stat(root).st_mode & 0o777 == 0o700
        assert (root / "src" / "a.c").read_bytes() == KERNEL_C
        # setuid and world bits from the archive are dropped
        assert os.stat(root / "src" / "a.c").st_mode & 0o7777 == 0o700
        assert os.stat(root / "run.sh").st_mode & 0o7777 == 0o600
    finally:
        import shutil

        shutil.rmtree(root)


def test_safe_extract_refuses_duplicates_oversize_truncation_and_busy_destinations(
        tmp_path: Path) -> None:
    twice = _tar(tmp_path / "twice.tar", _member("a.c", KERNEL_C), _member("./a.c", b"x"))
    with pytest.raises(TVMError, match="appears twice"):
        safe_extract(twice, tmp_path / "d1")
    nested = _tar(tmp_path / "nested.tar", _member("a", b"x"), _member("a/b", b"y"))
    with pytest.raises(TVMError, match="lies under the file 'a'"):
        safe_extract(nested, tmp_path / "d2")
    big = _tar(tmp_path / "big.tar", _member("a.c", b"x" * 5000))
    with pytest.raises(TVMError, match="more than 4096 bytes"):
        safe_extract(big, tmp_path / "d3", max_bytes=4096)
    whole = big.read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[:512 + 1000])
    with pytest.raises(TVMError, match="cut.tar"):
        safe_extract(tmp_path / "cut.tar", tmp_path / "d4")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    with pytest.raises(TVMError, match="not an empty directory"):
        safe_extract(big, busy)
    assert (busy / "mine.txt").read_text() == "keep"
    with pytest.raises(TVMError, match="no such file"):
        safe_extract(tmp_path / "missing.tar")


def test_safe_extract_stops_reading_headers_at_the_member_cap(tmp_path: Path,
                                                             monkeypatch) -> None:
    from kiln.runtime import archive as archive_lib

    monkeypatch.setattr(archive_lib, "MAX_ARCHIVE_MEMBERS", 3)
    many = _tar(tmp_path / "many.tar", *(_member(f"f{i}.c", b"x") for i in range(5)))
    with pytest.raises(TVMError, match="more than 3 members"):
        safe_extract(many, tmp_path / "out")


def test_extracted_removes_its_directory(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar", _member("a.c", KERNEL_C))
    with extracted(archive) as root:
        assert (root / "a.c").exists()
    assert not root.exists()


# Each option made gcc write, read or run something outside the archive's directory.
HOSTILE_OPTIONS = [
    "-MD -MF {out}/dep.d", "-Wl,-Map={out}/map.txt", "-o {out}/lib.so", "-fplugin={out}/p.so",
    "--help", "-B{out}", "-specs={out}/specs", "@{out}/more_options", "-save-temps",
    "-Wl,--version-script={out}/v", "-I/", "-include /etc/passwd", "-march=native;touch",
    "-march=../../x", "-fdump-tree-all", "-D__attribute__=x", "-x c++",
]


@pytest.mark.parametrize("option", HOSTILE_OPTIONS)
def test_module_tar_refuses_each_hostile_link_option(tmp_path: Path, option: str) -> None:
    out = tmp_path / "victim"
    out.mkdir()
    text = option.format(out=out).encode()
    archive = _tar(tmp_path / "evil.tar", _member("k.c", KERNEL_C),
                   _member("kiln_link_options.txt", text))
    with pytest.raises(TVMError, match="is not allowed in a module archive"):
        load_module(archive)
    assert list(out.iterdir()) == []


def test_link_options_allow_list_accepts_what_export_library_writes() -> None:
    written = b"-O3 -march=znver3 -std=gnu11 -fno-math-errno -fno-trapping-math -fopenmp -lm"
    assert check_archive_link_options(written, "x.tar")[1] == "-march=znver3"
    with pytest.raises(TVMError, match="not ASCII"):
        check_archive_link_options("-march=\u00e9".encode(), "x.tar")
    with pytest.raises(TVMError, match="more than 4096"):
        check_archive_link_options(b"-O3 " * 2000, "x.tar")


def test_module_tar_with_allowed_options_links_and_runs(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "ok.tar", _member("k.c", KERNEL_C),
                   _member("kiln_link_options.txt", b"-O2 -march=native"))
    library = load_module(archive)
    assert library.lib.kiln_archive_test_kernel() == 7


def test_module_tar_refuses_subdirectories(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "sub.tar", _member("src/k.c", KERNEL_C))
    with pytest.raises(TVMError, match="only top-level files"):
        load_module(archive)


def test_load_module_checks_expected_sha256(tmp_path: Path) -> None:
    source = tmp_path / "k.c"
    source.write_bytes(KERNEL_C)
    digest = hashlib.sha256(KERNEL_C).hexdigest()
    library = load_module(source, expected_sha256=digest.upper())
    assert library.lib.kiln_archive_test_kernel() == 7
    with pytest.raises(TVMError, match=f"its SHA-256 is {digest}, expected 0000"):
        load_module(source, expected_sha256="0" * 64)
    with pytest.raises(TVMError, match="64 hex digits"):
        load_module(source, expected_sha256="abc")


def test_blob_symbol_outside_the_mapped_image_is_refused() -> None:
    # The address a tampered symbol table could name: nothing is mapped at page zero.
    with pytest.raises(TVMError, match="points outside the loaded library"):
        shared_library.read_blob_at(4096, None, "tampered.so")
    with pytest.raises(TVMError, match="points outside the loaded library"):
        shared_library.read_c_string(4096, "tampered.so")


# Each makes gcc (or the assembler) read a file outside the archive; /dev/zero never ends.
HOSTILE_SOURCES = {
    "absolute include": b'#include "/dev/zero"\n',
    "angle include": b"#include </dev/zero>\n",
    "dot-dot include": b'#include "../../../../dev/zero"\n',
    "computed include": b"#define Z </dev/zero>\n#include Z\n",
    "digraph": b'%:include "/dev/zero"\n',
    "comment before the hash": b'/* x */ #include "/dev/zero"\n',
    "comment inside": b'#/*\n*/include "/dev/zero"\n',
    "line splice": b'#\\\ninclude "/dev/zero"\n',
    "include_next": b"#include_next </dev/zero>\n",
    "embed": b'static const char z[] = {\n#embed "/dev/zero"\n};\n',
    "incbin": b'__asm__(".incbin \\"/dev/zero\\"");\n',
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SOURCES))
def test_module_tar_refuses_sources_that_read_outside_files(tmp_path: Path, case) -> None:
    archive = _tar(tmp_path / "evil.tar", _member("k.c", HOSTILE_SOURCES[case] + KERNEL_C))
    with pytest.raises(TVMError, match="k.c: .*(outside the include path|not allowed)"):
        load_module(archive)


def test_relative_includes_and_comments_mentioning_includes_are_fine() -> None:
    source = (b'#include <tvm/runtime/c_backend_api.h>\n#include "local.h" // "/dev/zero"\n'
              b'/* #include "/dev/zero" */\nconst char* s = "a /* b";\n')
    module_lib.check_archive_source(source, "ok.tar")


def test_a_compiler_that_never_finishes_is_an_error(tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc

    # A FIFO nobody writes blocks gcc forever, as /dev/zero would (without eating memory).
    os.mkfifo(tmp_path / "never.h")
    source = tmp_path / "waits.c"
    source.write_text('#include "never.h"\n')
    monkeypatch.setenv("KILN_CC_TIMEOUT", "1")
    with pytest.raises(TVMError, match=r"did not finish within 1 s \(KILN_CC_TIMEOUT\)"):
        cc.compile_object(tmp_path / "waits.o", source)


def test_model_library_format_reader_uses_the_same_checks(tmp_path: Path) -> None:
    from kiln.micro.board import MicroBoardError, ModelLibrary

    archive = _tar(tmp_path / "mlf.tar", _member(".", kind=tarfile.DIRTYPE),
                   _member("./metadata.json", b"{}"),
                   _member("./codegen", kind=tarfile.CHRTYPE, devmajor=1, devminor=5))
    with pytest.raises(MicroBoardError, match="'./codegen' is not a regular file"):
        ModelLibrary(archive)


@pytest.mark.parametrize("metadata, message", [
    (b"[" * 100_000, "too deeply"), (b"[1, 2]", "holds a list, not an object"),
    (b"\xff\xfe{}", "not UTF-8"), (b'{"version": "\\ud800"}', "not valid Unicode"),
])
def test_model_library_format_metadata_errors_are_tvm_errors(tmp_path: Path, metadata,
                                                             message) -> None:
    from kiln.micro.board import MicroBoardError, ModelLibrary
    from kiln.micro.model_library_format import read_metadata

    archive = _tar(tmp_path / "mlf.tar", _member("./metadata.json", metadata))
    with pytest.raises(TVMError, match=message):
        read_metadata(archive)
    if "not an object" not in message:
        with pytest.raises(MicroBoardError, match="metadata.json"):
            ModelLibrary(archive)


def test_model_library_with_a_tampered_interface_header_is_a_board_error(tmp_path: Path) -> None:
    from kiln.micro.board import MicroBoardError, ModelLibrary

    metadata = json.dumps({"modules": {"default": {"executors": ["aot"]}}}).encode()
    archive = _tar(tmp_path / "mlf.tar", _member("./metadata.json", metadata),
                   _member("./codegen/host/src/lib0.c", KERNEL_C),
                   _member("./codegen/host/include/tvmgen_default.h", b"\xff\xfe\x80 bytes"))
    with pytest.raises(MicroBoardError, match="cannot read the aot interface: UnicodeDecodeErr"):
        ModelLibrary(archive)
