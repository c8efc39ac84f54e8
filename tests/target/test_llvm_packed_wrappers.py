"""The llvm target's packed wrappers (LLVM IR) against the c target's (C, the oracle): for
every argument check, the same return code and the same error message; good calls compute
what NumPy does. Also the glue a library carries: system-lib registration, the module
context, call_extern trampolines, export and reload in a fresh process, cross objects."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln as tvm
from kiln import te, tir
from kiln.runtime.dlpack import DLDataType, DLDevice, DLTensor
from kiln.runtime.packed_func import TVMValue, get_last_error
from kiln.target import Target
from kiln.target.build import build_module

TARGETS = ("c", "llvm")
INT, FLOAT, NULL, TENSOR = 0, 2, 4, 7


def _kernels(target: str, long_name: str):
    """One library per target: a kernel with a symbolic extent and scalars, one whose input
    has a symbolic elem_offset, one with symbolic strides, a 1-D one, a long-named one."""
    n = te.var("n")
    A = te.placeholder((n, 3), name="A")
    alpha = te.var("alpha", dtype="float32")
    k = te.var("k", dtype="int32")
    B = te.compute((n, 3), lambda i, j: A[i, j] * alpha + k.astype("float32"), name="B")
    scale = tvm.lower(te.create_schedule(B.op), [A, B, alpha, k], name="scale")

    V = te.placeholder((4,), name="V")
    W = te.compute((4,), lambda i: V[i] + 1.0, name="W")
    v_buf = tir.decl_buffer((4,), "float32", name="V_buf", offset_factor=1)
    offset = tvm.lower(te.create_schedule(W.op), [V, W], name="offset", binds={V: v_buf})
    vec = tvm.lower(te.create_schedule(W.op), [V, W], name="vec")
    named = tvm.lower(te.create_schedule(W.op), [V, W], name=long_name)

    S = te.placeholder((2, 3), name="S")
    T = te.compute((2, 3), lambda i, j: S[i, j] * 2.0, name="T")
    s0, s1 = te.var("s0"), te.var("s1")
    s_buf = tir.decl_buffer((2, 3), "float32", name="S_buf", strides=[s0, s1])
    strided = tvm.lower(te.create_schedule(T.op), [S, T], name="strided", binds={S: s_buf})
    funcs = {}
    for mod in (scale, offset, vec, named, strided):
        for gvar in mod.get_global_vars():
            funcs[gvar.name_hint] = mod[gvar]
    return build_module(funcs, Target(target))


LONG_NAME = "k" * 390  # the message is cut at 400 bytes before the values


@pytest.fixture(scope="module")
def libraries():
    return {target: _kernels(target, LONG_NAME) for target in TARGETS}


class _Tensor:
    """A DLTensor over a NumPy array with every field open to tampering."""

    def __init__(self, array, shape=None, strides=None, dtype=(2, 32, 1), device=1,
                 byte_offset=0):
        self.array = array
        shape = array.shape if shape is None else shape
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(strides))(*strides) if strides else None
        t = DLTensor()
        t.data = array.ctypes.data
        t.device = DLDevice(device, 0)
        t.ndim = len(shape)
        t.dtype = DLDataType(*dtype)
        t.shape = self.shape
        if self.strides is not None:
            t.strides = self.strides
        t.byte_offset = byte_offset
        self.struct = t


def _call(library, name, args):
    """Call ``name`` through its C address with (type code, value) arguments; return the
    return code and the last error message."""
    n = len(args)
    values = (TVMValue * max(n, 1))()
    codes = (ctypes.c_int * max(n, 1))()
    for index, (code, value) in enumerate(args):
        codes[index] = code
        if isinstance(value, _Tensor):
            values[index].v_handle = ctypes.cast(ctypes.pointer(value.struct), ctypes.c_void_p)
        elif code == FLOAT:
            values[index].v_float64 = value
        elif value is None:
            values[index].v_handle = value
        else:
            values[index].v_int64 = value
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    ret, ret_code = TVMValue(), ctypes.c_int(0)
    rc = proto(library[name].c_address)(ctypes.addressof(values), ctypes.addressof(codes), n,
                                        ctypes.addressof(ret), ctypes.addressof(ret_code), None)
    return rc, (get_last_error() if rc else "")


def _f32(*shape):
    return np.zeros(shape, "float32")


def _scale_args(a=None, b=None, alpha=(FLOAT, 2.0), k=(INT, 1)):
    a = a if a is not None else _Tensor(_f32(5, 3))
    b = b if b is not None else _Tensor(_f32(5, 3))
    return [(TENSOR, a), (TENSOR, b), alpha, k]


BAD_CALLS = {
    "argument count": ("scale", lambda: _scale_args()[:1]),
    "tensor type code": ("scale", lambda: [(INT, 3)] + _scale_args()[1:]),
    "NDArray type code accepted, NULL handle": ("scale", lambda: [(13, None)] + _scale_args()[1:]),
    "NULL tensor": ("scale", lambda: [(TENSOR, None)] + _scale_args()[1:]),
    "ndim": ("scale", lambda: _scale_args(a=_Tensor(_f32(15)))),
    "dtype code": ("scale", lambda: _scale_args(a=_Tensor(_f32(5, 3), dtype=(0, 32, 1)))),
    "dtype lanes": ("scale", lambda: _scale_args(b=_Tensor(_f32(5, 3), dtype=(2, 32, 4)))),
    "device": ("scale", lambda: _scale_args(a=_Tensor(_f32(5, 3), device=2))),
    "constant extent": ("scale", lambda: _scale_args(a=_Tensor(_f32(5, 4)))),
    "negative extent": ("scale", lambda: _scale_args(a=_Tensor(_f32(1, 3), shape=(-7, 3)))),
    "INT64_MIN extent": ("scale", lambda: _scale_args(a=_Tensor(_f32(1, 3),
                                                                shape=(-2**63, 3)))),
    "symbolic extent bound by another tensor": ("scale",
                                                lambda: _scale_args(b=_Tensor(_f32(6, 3)))),
    "strides not compact": ("scale", lambda: _scale_args(a=_Tensor(_f32(5, 6),
                                                                   shape=(5, 3),
                                                                   strides=(6, 1)))),
    "float scalar given a tensor": ("scale", lambda: _scale_args(alpha=(TENSOR, None))),
    "int scalar given a float": ("scale", lambda: _scale_args(k=(FLOAT, 1.5))),
    "1-D stride": ("vec", lambda: [(TENSOR, _Tensor(_f32(8), shape=(4,), strides=(2,))),
                                   (TENSOR, _Tensor(_f32(4)))]),
    "byte_offset not a multiple of the element size": (
        "offset", lambda: [(TENSOR, _Tensor(_f32(5), shape=(4,), byte_offset=2)),
                           (TENSOR, _Tensor(_f32(4)))]),
    "message cut at 400 bytes": (LONG_NAME, lambda: [(TENSOR, _Tensor(_f32(4),
                                                                      dtype=(1, 8, 1))),
                                                     (TENSOR, _Tensor(_f32(4)))]),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_argument_fails_as_the_c_wrapper_does(libraries, case):
    name, make_args = BAD_CALLS[case]
    c_rc, c_message = _call(libraries["c"], name, make_args())
    llvm_rc, llvm_message = _call(libraries["llvm"], name, make_args())
    assert c_rc == -1 and c_message.startswith(name[:100])
    assert (llvm_rc, llvm_message) == (c_rc, c_message)


def test_the_messages_name_what_is_wrong(libraries):
    llvm = libraries["llvm"]
    assert _call(llvm, "scale", _scale_args(a=_Tensor(_f32(1, 3), shape=(-2**63, 3))))[1] == (
        "scale: argument A (#0): negative shape[0] -9223372036854775808")
    assert _call(llvm, "scale", _scale_args(b=_Tensor(_f32(6, 3))))[1] == (
        "scale: argument B (#1): shape[0] must equal n; got, expected = 6, 5")
    message = _call(llvm, LONG_NAME, BAD_CALLS["message cut at 400 bytes"][1]())[1]
    assert len(message) == 400 + len("1, 8, 1")


def test_good_calls_compute_what_numpy_does(libraries):
    x = np.arange(15, dtype="float32").reshape(5, 3)
    base = np.arange(5, dtype="float32")
    wide = np.arange(12, dtype="float32").reshape(2, 6)
    for target, lib in libraries.items():
        out = _f32(5, 3)
        # an int given for the float scalar is converted, as C converts it
        assert _call(lib, "scale", _scale_args(_Tensor(x), _Tensor(out), (INT, 3), (INT, -2))
                     ) == (0, ""), target
        np.testing.assert_array_equal(out, x * 3 - 2)
        out = _f32(4)
        assert _call(lib, "offset", [(TENSOR, _Tensor(base, shape=(4,), byte_offset=4)),
                                     (TENSOR, _Tensor(out))]) == (0, "")
        np.testing.assert_array_equal(out, base[1:] + 1)
        out = _f32(2, 3)
        # symbolic strides: a column slice of a wider array, and NULL strides (compact)
        assert _call(lib, "strided", [(TENSOR, _Tensor(wide, shape=(2, 3), strides=(6, 1))),
                                      (TENSOR, _Tensor(out))]) == (0, "")
        np.testing.assert_array_equal(out, wide[:, :3] * 2)
        assert _call(lib, "strided", [(TENSOR, _Tensor(wide[:, :3].copy())),
                                      (TENSOR, _Tensor(out))]) == (0, "")
        np.testing.assert_array_equal(out, wide[:, :3] * 2)
        # an empty extent passes the checks; a compact 1-D stride too
        assert _call(lib, "scale", _scale_args(_Tensor(_f32(0, 3)), _Tensor(_f32(0, 3)))
                     ) == (0, "")
        assert _call(lib, "vec", [(TENSOR, _Tensor(base[:4].copy(), strides=(1,))),
                                  (TENSOR, _Tensor(out.reshape(-1)[:4]))])[0] == 0


def test_llvm_build_runs_no_c_compiler_before_the_link(monkeypatch, tmp_path):
    from kiln.runtime import cc

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))

    def refuse(*args, **kwargs):
        raise AssertionError("the llvm build compiled C")

    monkeypatch.setattr(cc, "compile_object", refuse)
    monkeypatch.setattr(cc, "compile_in_background", refuse)
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.exp(A[i]), name="B")
    lib = tvm.build(te.create_schedule(B.op), [A, B], target="llvm -system-lib",
                    name="no_cc_exp")
    assert not lib.sources and "glue.o" in lib.objects
    a = tvm.nd.array(np.linspace(0, 1, 8).astype("float32"))
    b = tvm.nd.empty((8,), "float32")
    tvm.runtime.system_lib()["no_cc_exp"](a, b)  # the LLVM constructor registered it
    np.testing.assert_allclose(b.numpy(), np.exp(a.numpy()), rtol=1e-6)
    lib["no_cc_exp"](a, b)
    np.testing.assert_allclose(b.numpy(), np.exp(a.numpy()), rtol=1e-6)
    assert lib.entry_func is not None  # __tvm_main__ names the entry


def test_call_extern_without_c_goes_through_an_llvm_trampoline(monkeypatch):
    from kiln.runtime import cc

    def refuse(*args, **kwargs):
        raise AssertionError("the llvm build compiled C")

    monkeypatch.setattr(cc, "compile_in_background", refuse)
    A = te.placeholder((6,), name="A", dtype="float64")
    B = te.compute((6,), lambda i: tir.call_extern("float64", "cbrt", A[i]), name="B")
    lib = tvm.build(te.create_schedule(B.op), [A, B], target="llvm", name="ext_cbrt")
    a = np.array([1, 8, 27, -64, 0.5, 2], "float64")
    b = tvm.nd.empty((6,), "float64")
    lib["ext_cbrt"](tvm.nd.array(a), b)
    np.testing.assert_allclose(b.numpy(), np.cbrt(a), rtol=1e-12)


def test_exported_library_reloads_in_a_fresh_process(libraries, tmp_path):
    path = tmp_path / "wrappers.so"
    libraries["llvm"].export_library(str(path))
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        lib = kiln.runtime.load_module({str(path)!r})
        x = np.arange(15, dtype="float32").reshape(5, 3)
        out = kiln.nd.empty((5, 3), "float32")
        lib["scale"](kiln.nd.array(x), out, 0.5, 4)
        assert np.array_equal(out.numpy(), x * 0.5 + 4), out.numpy()
        try:
            lib["scale"](kiln.nd.array(x[:, :2].copy()), out, 0.5, 4)
        except kiln.TVMError as err:
            assert "argument A (#0): expected shape[1] == 3, got 2" in str(err), err
        else:
            raise AssertionError("no error")
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=str(tmp_path.parent), env=_env())
    assert done.stdout.strip() == "ok", done.stderr


def _env():
    import os
    from pathlib import Path

    env = dict(os.environ)
    root = str(Path(tvm.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.mark.parametrize("triple, elf_class, machine", [
    ("aarch64-linux-gnu", 2, 183),
    ("i686-linux-gnu", 1, 3),  # 32-bit pointers: TVMValue slots stay 8 bytes apart
])
def test_cross_build_is_one_object_with_its_wrappers(tmp_path, triple, elf_class, machine):
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
    lib = tvm.build(te.create_schedule(B.op), [A, B],
                    target=f"llvm -mtriple={triple} -system-lib", name="cross_triple")
    path = tmp_path / "k.o"
    lib.save(str(path))
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == elf_class
    assert int.from_bytes(data[18:20], "little") == machine
    assert not lib.sources  # nothing left for a cross C compiler but the link
    for symbol in (b"cross_triple\0", b"cross_triple_unpacked", b"__tvm_main__",
                   b"kiln_register_system_lib", b"__kiln_arg_error"):
        assert symbol in data
    assert "expected 2 arguments (A, B)" in lib.get_source("ll")


@pytest.mark.parametrize("target", TARGETS)
def test_system_lib_with_module_context_calls_a_registered_function(target):
    # the constructor registers the kernel and __tvm_module_ctx; the kernel's call_packed
    # looks its callee up through that context
    calls = []

    @tvm.register_func("kiln_test.glue_add_one", override=True)
    def add_one(x, y):
        calls.append(1)
        y.copyfrom(x.numpy() + 1)

    A = te.placeholder((2, 3), name="A")
    B = te.extern((2, 3), [A], lambda ins, outs: tir.call_packed(
        "kiln_test.glue_add_one", ins[0], outs[0]), name="B")
    symbol = f"syslib_ctx_{target}"
    tvm.build(te.create_schedule(B.op), [A, B], target=f"{target} -system-lib", name=symbol)
    a = np.arange(6, dtype="float32").reshape(2, 3)
    b = tvm.nd.empty((2, 3), "float32")
    tvm.runtime.system_lib()[symbol](tvm.nd.array(a), b)
    np.testing.assert_array_equal(b.numpy(), a + 1)
    assert calls == [1]


def test_glue_at_opt_level_0_keeps_its_ir_text_without_printing(monkeypatch, tmp_path):
    # -O0 changes nothing: the glue's text is stored as its IR (no second print), and that
    # text is still what get_source("ll") links (valid IR holding the wrapper's checks)
    from kiln.target import llvm_toolchain

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    printed: list[str] = []
    real = llvm_toolchain._print_module
    monkeypatch.setattr(llvm_toolchain, "_print_module",
                        lambda ref: printed.append(real(ref)) or printed[-1])
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A[i] + 2.0, name="B")
    lib = tvm.build(te.create_schedule(B.op), [A, B], target="llvm", name="o0_glue_text")
    a = tvm.nd.array(np.arange(5, dtype="float32"))
    b = tvm.nd.empty((5,), "float32")
    lib["o0_glue_text"](a, b)
    np.testing.assert_allclose(b.numpy(), np.arange(5) + 2.0)
    # the kernel's O3 module was printed, the glue (the wrapper's checks) was not
    assert printed and not any("expected 2 arguments" in text for text in printed)
    ir_text = lib.get_source("ll")
    assert "expected 2 arguments (A, B)" in ir_text and "o0_glue_text_unpacked" in ir_text
