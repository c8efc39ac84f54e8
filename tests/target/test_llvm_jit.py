"""LLVM libraries linked in process (kiln.target.llvm_jit): same results as NumPy, a clear
error for a symbol found nowhere, export still a real .so, fork and two threads."""

from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import kiln
from kiln import te, tir
from kiln.runtime.error import TVMError
from kiln.runtime.module import DSOModule, InProcessLibrary
from kiln.target import Target
from kiln.target.build import build_module
from kiln.target.llvm_jit import in_process_available, link_in_process
from kiln.target.llvm_toolchain import (
    LinkedIR,
    host_target_machine,
    initialized_llvm,
    llvm_available,
)

pytestmark = pytest.mark.skipif(not llvm_available() or not in_process_available(),
                                reason="needs llvmlite with the ORC JIT")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _scale_add(n: int, scale: float, name: str):
    """``C = A * scale + B`` built for the host (a parallel loop: the runtime's thread pool)."""
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] * scale + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, _ = s[C].split(C.op.axis[0], factor=16)
    s[C].parallel(outer)
    return kiln.build(s, [A, B, C], target="llvm", name=name)


def _check_scale_add(lib, n: int, scale: float, name: str) -> None:
    draw = np.random.default_rng(n)  # one per call: threads call this at once
    a, b = (draw.standard_normal(n).astype("float32") for _ in range(2))
    c = kiln.nd.array(np.zeros(n, "float32"))
    lib[name](kiln.nd.array(a), kiln.nd.array(b), c)
    # the kernel may fuse the multiply and add (one rounding)
    np.testing.assert_allclose(c.numpy(), a * np.float32(scale) + b, rtol=1e-5, atol=1e-6)


def test_llvm_library_runs_in_process_and_exports_a_real_shared_library(tmp_path):
    lib = _scale_add(1000, 3.0, "scale_add")
    assert isinstance(lib.dso, InProcessLibrary) and lib.library_path is None
    _check_scale_add(lib, 1000, 3.0, "scale_add")
    lib.export_library(tmp_path / "scale_add.so")
    with open(tmp_path / "scale_add.so", "rb") as f:
        assert f.read(4) == b"\x7fELF"
    loaded = kiln.runtime.load_module(str(tmp_path / "scale_add.so"))
    assert isinstance(loaded, DSOModule) and not isinstance(loaded, InProcessLibrary)
    _check_scale_add(loaded, 1000, 3.0, "scale_add")


def test_a_function_outlives_its_module():
    f = _scale_add(64, 0.5, "outlived")["outlived"]
    gc.collect()  # the PackedFunc holds the library's code
    a, b = np.ones(64, "float32"), np.full(64, 2.0, "float32")
    c = kiln.nd.array(np.zeros(64, "float32"))
    f(kiln.nd.array(a), kiln.nd.array(b), c)
    np.testing.assert_array_equal(c.numpy(), np.full(64, 2.5, "float32"))


def test_switched_off_or_with_constructors_it_is_a_shared_library(monkeypatch):
    monkeypatch.setenv("KILN_LLVM_IN_PROCESS", "0")
    lib = _scale_add(32, 2.0, "as_so")
    assert lib.library_path is not None and not isinstance(lib.dso, InProcessLibrary)
    _check_scale_add(lib, 32, 2.0, "as_so")
    monkeypatch.delenv("KILN_LLVM_IN_PROCESS")
    A = tir.decl_buffer((4,), "float32", name="A")
    func = tir.PrimFunc([A], tir.BufferStore(A, tir.const(1.0, "float32"), [0]))
    system = build_module({"syslib_in_process": func}, Target("llvm -system-lib"))
    assert system.library_path is not None  # its registration runs as the library loads


def _object(ir_text: str) -> bytes:
    _, llvm = initialized_llvm()
    return host_target_machine(None).emit_object(llvm.parse_assembly(ir_text))


def test_a_symbol_found_nowhere_is_a_tvm_error_naming_it():
    calls = _object("declare float @kiln_test_no_such_symbol(float)\n"
                    "define float @calls_missing(float %x) {\n"
                    "  %r = call float @kiln_test_no_such_symbol(float %x)\n  ret float %r\n}\n")
    with pytest.raises(TVMError, match=r"symbol 'kiln_test_no_such_symbol' \(used by k\.o\)"):
        link_in_process({"k.o": calls}, "broken")
    # defined by another object of the library, or by the process (libm): found
    defines = _object("define float @kiln_test_no_such_symbol(float %x) {\n"
                      "  %r = call float @expf(float %x)\n  ret float %r\n}\n"
                      "declare float @expf(float)\n")
    lib = link_in_process({"k.o": calls, "d.o": defines}, "whole")
    assert set(lib.addresses) == {"calls_missing", "kiln_test_no_such_symbol"}
    # a library defining a function the process has and calling it (a kernel named "expf"
    # whose code calls libm's): only the dynamic loader binds the call to libm
    shadows = _object("define float @expf(float %x) {\n  ret float %x\n}\n")
    calls_expf = _object("declare float @expf(float)\ndefine float @g(float %x) {\n"
                         "  %r = call float @expf(float %x)\n  ret float %r\n}\n")
    assert link_in_process({"s.o": shadows, "c.o": calls_expf}, "shadowing") is None
    assert link_in_process({"k.o": b"\xcf\xfa\xed\xfe" + bytes(60)}, "mach-o") is None
    with pytest.raises(TVMError, match="garbage.o is not a readable ELF64 object"):
        link_in_process({"garbage.o": b"\x7fELF" + bytes(60)}, "garbage")


_FORK_CHILD = r"""
import gc, os, signal, sys, weakref
import numpy as np
sys.path.insert(0, {tests!r})
from test_llvm_jit import _check_scale_add, _scale_add
from kiln.target import llvm_jit

lib = _scale_add(500, 1.5, "before_fork")
_check_scale_add(lib, 500, 1.5, "before_fork")
parent_jit = weakref.ref(llvm_jit._JIT[0][1])
pid = os.fork()
if pid == 0:
    signal.alarm(60)  # a hung child dies of SIGALRM
    try:
        _check_scale_add(lib, 500, 1.5, "before_fork")  # the code it inherited
        _check_scale_add(_scale_add(300, -2.0, "in_child"), 300, -2.0, "in_child")
        gc.collect()
        # disposing the parent's JIT would free the code the child inherited
        assert parent_jit() is not None, "the child disposed its parent's JIT"
        _check_scale_add(lib, 500, 1.5, "before_fork")
        os._exit(0)
    except BaseException:
        import traceback; traceback.print_exc()
        os._exit(3)
_, status = os.waitpid(pid, 0)
_check_scale_add(_scale_add(200, 4.0, "after_fork"), 200, 4.0, "after_fork")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run_script(script: str, cache_dir, timeout: int) -> None:
    """Run ``script`` (formatted with this folder as ``tests``) in a fresh interpreter, which
    must exit 0."""
    env = {**os.environ, "KILN_CACHE_DIR": str(cache_dir), "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-c", script.format(
        tests=os.path.dirname(os.path.abspath(__file__)))], env=env, capture_output=True,
        text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]


def test_fork_after_an_in_process_load_child_runs_and_links(tmp_path):
    _run_script(_FORK_CHILD, tmp_path, 240)


def test_two_threads_link_and_run_libraries_at_once():
    errors, barrier = [], threading.Barrier(2)

    def work(index: int) -> None:
        try:
            barrier.wait(30)
            for step in range(3):
                name = f"thread{index}_{step}"
                lib = _scale_add(100 + 10 * step, index + step / 4, name)
                _check_scale_add(lib, 100 + 10 * step, index + step / 4, name)
        except BaseException as err:  # noqa: BLE001 (reported by the main thread)
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


def test_the_librarys_ir_is_linked_when_first_asked_for(monkeypatch):
    links = []
    original = LinkedIR._link
    monkeypatch.setattr(LinkedIR, "_link", lambda self: links.append(1) or original(self))
    A = tir.decl_buffer((4,), "float32", name="A")
    funcs = {name: tir.PrimFunc([A], tir.BufferStore(A, tir.const(value, "float32"), [0]))
             for name, value in (("ir_first", 1.0), ("ir_second", 2.0))}
    lib = build_module(funcs, Target("llvm"))
    assert links == []  # the build did not wait for it
    _, llvm = initialized_llvm()
    linked = llvm.parse_assembly(lib.get_source("ll"))  # one valid module with both
    assert {"ir_first", "ir_second"} <= {f.name for f in linked.functions}
    assert lib.get_source("ll") is lib.get_source("") and links == [1]


_DAMAGED_OBJECTS = r"""
import struct, sys
sys.path.insert(0, {tests!r})
from test_llvm_jit import _object
from kiln.runtime.error import TVMError
from kiln.target.llvm_jit import link_in_process

good = _object("declare float @expf(float)\ndefine float @f(float %x) {{\n"
               "  %r = call float @expf(float %x)\n  ret float %r\n}}\n")
shoff, = struct.unpack_from("<Q", good, 0x28)
headers = [shoff + 64 * i for i in range(struct.unpack_from("<H", good, 0x3C)[0])]
kinds = [struct.unpack_from("<I", good, h + 4)[0] for h in headers]


def damaged(field_at, fmt, value):
    data = bytearray(good)
    struct.pack_into(fmt, data, field_at, value)
    return bytes(data)


text = headers[kinds.index(1)]  # the first PROGBITS section (.text)
rela = headers[kinds.index(4)]  # the first RELA section
rela_at, = struct.unpack_from("<Q", good, rela + 24)
cases = {{
    "alignment 3 is not a power of two": damaged(text + 48, "<Q", 3),
    "past the end": damaged(text + 24, "<Q", len(good) - 4),
    "outside section": damaged(rela_at + 12, "<I", 0xFFFF),  # the symbol index
}}
for want, data in cases.items():
    try:
        link_in_process({{"k.o": data}}, "damaged")
    except TVMError as err:
        assert "k.o is not a readable ELF64 object" in str(err) and want in str(err), err
    else:
        raise AssertionError(f"linked an object whose {{want}}")
"""


def test_a_damaged_object_is_a_tvm_error_not_a_crash(tmp_path):
    # JITLink trusts the headers: an alignment of 3 failed an LLVM assertion (the process
    # aborted), a symbol index past the table read out of bounds; `ld` had reported them
    _run_script(_DAMAGED_OBJECTS, tmp_path, 120)



def _damage_section_zero(objects: list) -> None:
    """Make section 0 of each cached object PROGBITS (JITLink aborts on it)."""
    assert objects
    for path in objects:
        data = bytearray(path.read_bytes())
        shoff, = struct.unpack_from("<Q", data, 0x28)
        struct.pack_into("<I", data, shoff + 4, 1)
        path.write_bytes(bytes(data))


_BUILD_AND_RUN = r"""
import numpy as np
import kiln
from kiln import relay
from kiln.contrib import graph_executor

x = relay.var("x", shape=(4, 9))
with kiln.transform.PassContext(opt_level=3):
    lib = relay.build(kiln.IRModule.from_expr(relay.Function([x], relay.exp(x) * 2.0)), "llvm")
m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
a = np.linspace(-1, 1, 36, dtype="float32").reshape(4, 9)
m.run(x=a)
np.testing.assert_allclose(m.get_output(0).numpy(), np.exp(a) * 2, rtol=1e-5)
"""


def test_a_damaged_llvm_cache_entry_is_compiled_again_not_linked(tmp_path, monkeypatch):
    # a damaged KILN_CACHE_DIR/llvm/<key>.o was linked in process as read: JITLink's
    # assertions trust its headers (section 0 of type PROGBITS aborted the process), and
    # the header checks of ObjectSymbols catch only some damage
    monkeypatch.setenv("KILN_BUILD_CACHE", "0")  # whole builds would not read llvm/
    _run_script(_BUILD_AND_RUN, tmp_path, 240)
    _damage_section_zero(sorted((tmp_path / "llvm").glob("*.o")))
    _run_script(_BUILD_AND_RUN, tmp_path, 240)


_LINK_IMPORTED_C = r"""
import ctypes
from kiln.runtime import cc
from kiln.target import Target
from kiln.target.codegen_c import compile_options
from kiln.target.llvm_jit import link_in_process

# as an llvm library's import_c source: gcc's object (cached in cc/) linked in process
obj = cc.compile_in_background("float kiln_test_twice(float x) {{ return 2 * x; }}\n",
                               compile_options(Target("llvm")))()
lib = link_in_process({{"imported_c.o": obj}}, "imported C")
twice = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float)(lib.addresses["kiln_test_twice"])
assert twice(1.5) == 3.0
"""


def test_a_damaged_c_object_cache_entry_is_compiled_again_not_linked(tmp_path):
    # gcc's objects of an llvm library's import_c code are linked in process too: a damaged
    # KILN_CACHE_DIR/cc/obj_<key>.o aborted the process as a damaged llvm/ entry did
    _run_script(_LINK_IMPORTED_C, tmp_path, 120)
    _damage_section_zero(sorted((tmp_path / "cc").glob("obj_*.o")))
    _run_script(_LINK_IMPORTED_C, tmp_path, 120)
