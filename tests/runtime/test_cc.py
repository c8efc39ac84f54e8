"""The C toolchain driver: compile, link, archive, cache, and report compiler errors verbatim."""

from __future__ import annotations

import ctypes
import subprocess
import threading
from pathlib import Path

import pytest

from kiln.contrib import cc
from kiln.runtime.error import TVMError

SQUARE_C = "int square(int x) { return x * x; }\n"


def test_create_shared_builds_a_loadable_library(tmp_path: Path) -> None:
    src = tmp_path / "square.c"
    src.write_text(SQUARE_C)
    lib = ctypes.CDLL(cc.create_shared(tmp_path / "square.so", [src]))
    assert lib.square(12) == 144


def test_compile_object_then_link_objects(tmp_path: Path) -> None:
    (tmp_path / "a.c").write_text(SQUARE_C)
    (tmp_path / "b.c").write_text("int square(int); int quad(int x) { return square(square(x)); }")
    objects = [cc.compile_object(tmp_path / f"{n}.o", tmp_path / f"{n}.c") for n in "ab"]
    lib = ctypes.CDLL(cc.create_shared(tmp_path / "ab.so", objects))
    assert lib.quad(3) == 81


def test_create_staticlib_archives_objects_that_link_into_a_library(tmp_path: Path) -> None:
    (tmp_path / "square.c").write_text(SQUARE_C)
    archive = cc.create_staticlib(tmp_path / "libsq.a", [tmp_path / "square.c"])
    listing = subprocess.run(["ar", "t", archive], capture_output=True, text=True, check=True)
    assert listing.stdout.strip().endswith(".o")
    (tmp_path / "use.c").write_text("int square(int); int cube(int x) { return x * square(x); }")
    lib = ctypes.CDLL(cc.create_shared(tmp_path / "use.so", [tmp_path / "use.c", archive]))
    assert lib.cube(3) == 27


def test_compiler_errors_are_reported_verbatim(tmp_path: Path) -> None:
    (tmp_path / "bad.c").write_text("int broken(void) { return undeclared_thing_xyz; }\n")
    with pytest.raises(TVMError) as info:
        cc.create_shared(tmp_path / "bad.so", [tmp_path / "bad.c"])
    message = str(info.value)
    assert "undeclared_thing_xyz" in message and "error" in message
    assert "bad.c" in message  # the command line is included


def test_missing_compiler_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "a.c").write_text(SQUARE_C)
    monkeypatch.setenv("CC", "/nonexistent/kiln-cc")
    with pytest.raises(TVMError, match="kiln-cc"):
        cc.create_shared(tmp_path / "a.so", [tmp_path / "a.c"], options=["-O1"])


def test_find_compiler_honours_cc_environment(monkeypatch) -> None:
    monkeypatch.setenv("CC", "my-cross-gcc")
    assert cc.find_compiler() == "my-cross-gcc"


def test_default_options_are_the_host_kernel_flags() -> None:
    options = cc.default_options()
    assert options[:3] == ["-O3", "-march=native", "-fPIC"]
    assert ("-fopenmp" in options) == cc.openmp_available()


def test_cache_hit_returns_the_same_file_without_rebuilding() -> None:
    sources = {"k.c": "int kiln_cache_probe_1(void) { return 7; }\n"}
    first = cc.cached_shared_library(sources, ["-O1", "-fPIC"])
    inode = first.stat().st_ino  # a rebuild renames a new file into place (a hit touches it)
    second = cc.cached_shared_library(sources, ["-O1", "-fPIC"])
    assert second == first and second.stat().st_ino == inode
    assert ctypes.CDLL(str(first)).kiln_cache_probe_1() == 7


def test_cache_key_covers_flags_and_source_text() -> None:
    base = cc.cached_shared_library({"k.c": "int probe2(void) { return 1; }"}, ["-O1", "-fPIC"])
    other_flags = cc.cached_shared_library(
        {"k.c": "int probe2(void) { return 1; }"}, ["-O2", "-fPIC"]
    )
    other_text = cc.cached_shared_library({"k.c": "int probe2(void) { return 2; }"}, ["-O1"])
    assert len({base, other_flags, other_text}) == 3


def test_concurrent_builds_of_one_key_agree(tmp_path: Path) -> None:
    sources = {"race.c": f"int race_probe(void) {{ return {len(str(tmp_path))}; }}\n"}
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(cc.cached_shared_library(sources)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1
    assert ctypes.CDLL(str(results[0])).race_probe() == len(str(tmp_path))


def test_shipped_headers_compile_for_bare_metal(tmp_path: Path) -> None:
    src = tmp_path / "bare.c"
    src.write_text(
        "#include <tvm/runtime/c_backend_api.h>\n"
        "int kernel(TVMValue* a, int* t, int n, TVMValue* r, int* rt, void* h) {\n"
        "  DLTensor* x = (DLTensor*)a[0].v_handle; return x->ndim + t[0] + n;\n}\n"
    )
    cmd = [cc.find_compiler(), "-ffreestanding", "-nostdlib", "-std=c99", "-Wall", "-Werror"]
    cmd += [f"-I{d}" for d in cc.include_dirs()] + ["-c", str(src), "-o", str(tmp_path / "b.o")]
    subprocess.run(cmd, check=True)


def test_cross_compiler_wraps_a_compiler_with_extra_flags(tmp_path: Path) -> None:
    (tmp_path / "flag.c").write_text("int flag(void) { return KILN_FLAG; }\n")
    fcompile = cc.cross_compiler(cc.find_compiler(), ["-DKILN_FLAG=5"])
    assert fcompile.output_format == "so"
    lib = ctypes.CDLL(fcompile(str(tmp_path / "flag.so"), [tmp_path / "flag.c"], ["-O1"]))
    assert lib.flag() == 5


def test_compiler_probes_time_out_on_a_hanging_compiler(tmp_path, monkeypatch):
    # Every build probes the compiler first; a compiler that never answers must not hang it.
    hang = tmp_path / "hanging-cc"
    hang.write_text("#!/bin/sh\nsleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setenv("KILN_CC_TIMEOUT", "0.5")
    assert cc.openmp_available(str(hang)) is False
    with pytest.raises(TVMError, match="did not finish"):
        cc.compiler_version(str(hang))


def test_compile_in_background_gives_a_linkable_object_cached_by_content(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    wait = runtime_cc.compile_in_background(SQUARE_C, ["-O1", "-fPIC"])
    (tmp_path / "square.o").write_bytes(wait())
    lib = ctypes.CDLL(cc.create_shared(tmp_path / "sq.so", [tmp_path / "square.o"]))
    assert lib.square(7) == 49
    assert len(list((tmp_path / "cache" / "cc").glob("obj_*.o"))) == 1
    monkeypatch.setattr(runtime_cc, "compile_object", None)  # a hit compiles nothing
    assert runtime_cc.compile_in_background(SQUARE_C, ["-O1", "-fPIC"])() == \
        (tmp_path / "square.o").read_bytes()


def test_compile_in_background_reports_compiler_errors_when_waited_for(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    wait = runtime_cc.compile_in_background("int f(void) { return missing_xyz; }\n", ["-O1"])
    with pytest.raises(TVMError, match="missing_xyz"):
        wait()


def test_compile_in_background_works_in_a_forked_child(tmp_path: Path, monkeypatch) -> None:
    """The parent's waiting thread does not exist after fork: the child needs its own."""
    import multiprocessing

    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    runtime_cc.compile_in_background(SQUARE_C, ["-O1", "-fPIC"])()  # the parent's thread
    child = multiprocessing.get_context("fork").Process(
        target=_compile_cube_in_background, args=(str(tmp_path / "cube.o"),))
    child.start()
    child.join(timeout=120)
    if child.is_alive():
        child.kill()
        pytest.fail("compile_in_background hung in a forked child")
    assert child.exitcode == 0 and (tmp_path / "cube.o").stat().st_size > 0


def _compile_cube_in_background(path: str) -> None:
    from kiln.runtime import cc as runtime_cc

    source = "int cube(int x) { return x * x * x; }\n"
    Path(path).write_bytes(runtime_cc.compile_in_background(source, ["-O1", "-fPIC"])())


def test_cached_library_of_several_c_files_compiles_each_to_its_own_cached_object(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    quad = "int square(int); int quad(int x) { return square(square(x)); }\n"
    lib = ctypes.CDLL(str(runtime_cc.cached_shared_library(
        {"a.c": SQUARE_C, "b.c": quad}, ["-O1", "-fPIC"])))
    assert lib.quad(3) == 81
    assert len(list((tmp_path / "cache" / "cc").glob("obj_*.o"))) == 2
    # another library sharing a.c compiles only its new file
    compiled = []
    compile_object = runtime_cc.compile_object
    monkeypatch.setattr(runtime_cc, "compile_object",
                        lambda out, src, *a, **k: compiled.append(Path(src).read_text())
                        or compile_object(out, src, *a, **k))
    cube = "int square(int); int cube(int x) { return x * square(x); }\n"
    lib = ctypes.CDLL(str(runtime_cc.cached_shared_library(
        {"a.c": SQUARE_C, "c.c": cube}, ["-O1", "-fPIC"])))
    assert lib.cube(3) == 27 and compiled == [cube]


def test_a_request_for_an_object_in_flight_waits_for_that_compile(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    release, calls = threading.Event(), []
    compile_object = runtime_cc.compile_object

    def slow(*args, **kwargs):
        calls.append(args)
        release.wait(10)
        return compile_object(*args, **kwargs)

    monkeypatch.setattr(runtime_cc, "compile_object", slow)
    first = runtime_cc.compile_in_background(SQUARE_C, ["-O1", "-fPIC"])
    second = runtime_cc.compile_in_background(SQUARE_C, ["-O1", "-fPIC"])
    release.set()
    assert first() == second() and len(calls) == 1


def test_a_failing_file_of_a_several_file_library_is_reported(tmp_path: Path,
                                                              monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(TVMError, match="missing_xyz"):
        runtime_cc.cached_shared_library(
            {"a.c": SQUARE_C, "b.c": "int f(void) { return missing_xyz; }\n"}, ["-O1"])
    assert not list((tmp_path / "cache" / "cc").glob("lib_*.so"))


def test_create_shared_compiles_several_c_files_each_to_a_cached_object(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "a.c").write_text(SQUARE_C)
    (tmp_path / "b.c").write_text("int square(int); int quad(int x) { return square(square(x)); }")
    files = [tmp_path / "a.c", tmp_path / "b.c"]
    assert ctypes.CDLL(cc.create_shared(tmp_path / "ab.so", files)).quad(3) == 81
    assert len(list((tmp_path / "cache" / "cc").glob("obj_*.o"))) == 2
    monkeypatch.setattr(runtime_cc, "compile_object", None)  # exported again: only a link
    assert ctypes.CDLL(cc.create_shared(tmp_path / "ab2.so", files)).quad(2) == 16


def test_create_shared_names_the_failing_file_of_several(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "good.c").write_text(SQUARE_C)
    (tmp_path / "bad.c").write_text("int broken(void) { return undeclared_thing_xyz; }\n")
    with pytest.raises(TVMError, match="bad.c") as info:
        cc.create_shared(tmp_path / "x.so", [tmp_path / "good.c", tmp_path / "bad.c"])
    assert "undeclared_thing_xyz" in str(info.value)


def _value_after_editing(header: Path, build, monkeypatch) -> list[int]:
    """What ``build()`` (a loaded library's ``value()``) gives with ``VALUE`` 1 in ``header``,
    then 2, then 1 again; the number of compiles the last build ran is appended."""
    from kiln.runtime import cc as runtime_cc

    values = []
    for value in (1, 2):
        header.write_text(f"#define VALUE {value}\n")
        values.append(build().value())
    compiled = []
    compile_object = runtime_cc.compile_object
    monkeypatch.setattr(runtime_cc, "compile_object",
                        lambda *a, **k: compiled.append(a) or compile_object(*a, **k))
    header.write_text("#define VALUE 1\n")  # back to the first text: the first object again
    values.append(build().value())
    return values + [len(compiled)]


def test_editing_a_header_of_an_include_directory_rebuilds_what_includes_it(
        tmp_path: Path, monkeypatch) -> None:
    """The cache key held include directories by path only: a library whose source includes
    an edited header (a pragma_import_c source's own, or kiln's runtime headers) was reused
    stale."""
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    include = tmp_path / "include"
    include.mkdir()
    source = '#include "config.h"\nint value(void) { return VALUE; }\n'

    def build():
        return ctypes.CDLL(str(runtime_cc.cached_shared_library(
            {"k.c": source}, ["-O1", "-fPIC", f"-I{include}"])))

    assert _value_after_editing(include / "config.h", build, monkeypatch) == [1, 2, 1, 0]
    # kiln's own include directory (dlpack.h, c_runtime_api.h) the same way
    monkeypatch.setattr(runtime_cc, "include_dirs", lambda: [str(include)])
    source = "#include <runtime.h>\nint value(void) { return VALUE; }\n"
    objects = []

    def build_object():
        objects.append(tmp_path / f"o{len(objects)}.o")
        objects[-1].write_bytes(runtime_cc.compile_in_background(source, ["-O1", "-fPIC"])())
        return ctypes.CDLL(cc.create_shared(objects[-1].with_suffix(".so"), [objects[-1]]))

    assert _value_after_editing(include / "runtime.h", build_object, monkeypatch)[:3] == \
        [1, 2, 1]


def test_editing_a_header_beside_a_source_file_rebuilds_its_library(
        tmp_path: Path, monkeypatch) -> None:
    from kiln.runtime import cc as runtime_cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "k.c").write_text('#include "k.h"\nint value(void) { return VALUE; }\n')

    def build():
        return ctypes.CDLL(str(runtime_cc.cached_shared_library([tmp_path / "k.c"],
                                                               ["-O1", "-fPIC"])))

    assert _value_after_editing(tmp_path / "k.h", build, monkeypatch) == [1, 2, 1, 0]
