"""cc.link_objects: LLVM's objects linked by the system linker itself, and the compiler
driver as the fallback; the library loads and calls libm either way."""

from __future__ import annotations

import ctypes
import math
import subprocess

import pytest

from kiln.runtime import cc

SOURCE = "#include <math.h>\ndouble kiln_probe_cbrt(double x) { return cbrt(x); }\n"


@pytest.fixture()
def probe_object(tmp_path):
    (tmp_path / "probe.c").write_text(SOURCE)
    return cc.compile_object(tmp_path / "probe.o", tmp_path / "probe.c", ["-O1", "-fPIC"])


def _cbrt(path):
    fn = ctypes.CDLL(str(path)).kiln_probe_cbrt
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return fn(27.0)


def test_ld_links_objects_with_libm_needed(probe_object, tmp_path):
    if cc._system_linker() is None:
        pytest.skip("no ld on PATH")
    out = cc.link_objects(tmp_path / "probe.so", [probe_object])
    assert _cbrt(out) == math.cbrt(27.0)  # libm's, as Python's
    needed = subprocess.run(["readelf", "-d", out], capture_output=True, text=True).stdout
    assert "libm.so" in needed


def test_a_failing_linker_falls_back_to_the_compiler_driver(probe_object, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr(cc, "_system_linker", lambda: "/bin/false")
    out = cc.link_objects(tmp_path / "probe.so", [probe_object], ["-O1"])
    assert _cbrt(out) == math.cbrt(27.0)  # libm's, as Python's
