"""A VM program exported as one shared library and run again, here and in a fresh process."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from vm_programs import alloc_tensor

import kiln
from kiln.runtime import load_module
from kiln.runtime import ndarray as nd
from kiln.runtime.error import TVMError
from kiln.runtime.registry import get_global_func
from kiln.runtime.vm import Executable, VirtualMachine, VMExecutableModule, VMFunction
from kiln.runtime.vm.bytecode import InvokePacked, LoadConst, Ret


def scale_and_shift(kernels):
    """main(x) = x * weight + bias with constant weight and bias."""
    weight = nd.array(np.linspace(-1, 1, 6, dtype="float32"))
    bias = nd.array(np.full(6, 0.25, dtype="float32"))
    main = VMFunction("main", ["x"], [
        LoadConst(0, 0, 1),
        *alloc_tensor((6,), "float32", 2, 3, 4, 5),
        InvokePacked(1, 1, (0, 1, 5)),
        LoadConst(1, 0, 6),
        *alloc_tensor((6,), "float32", 7, 8, 9, 10),
        InvokePacked(0, 1, (5, 6, 10)),
        Ret(10),
    ], 11)
    return Executable([main], constants=[weight, bias], primitive_names=["add_f32", "mul_f32"],
                      lib=kernels)


def expected(x):
    return x * np.linspace(-1, 1, 6, dtype="float32") + 0.25


@pytest.fixture(scope="module")
def exported(kernels, tmp_path_factory):
    path = tmp_path_factory.mktemp("vm_export") / "program.so"
    scale_and_shift(kernels).mod.export_library(str(path))
    return path


def test_executable_module_is_binary_serializable(kernels):
    mod = scale_and_shift(kernels).mod
    assert mod.type_key == "VMExecutable" and mod.is_binary_serializable
    assert mod.imports == [kernels]
    loader = get_global_func("runtime.module.loadbinary_VMExecutable")
    again = loader(mod.save_to_binary())
    assert isinstance(again, VMExecutableModule)
    assert again.executable.bytecode == mod.executable.bytecode
    assert mod["get_num_globals"]() == 1 and mod["get_global_fields"](0) == "main"
    with pytest.raises(TVMError, match="truncated"):
        loader(mod.save_to_binary()[:-3])


def test_exported_library_loads_and_runs(exported):
    mod = load_module(str(exported))
    assert mod.type_key == "VMExecutable" and len(mod.imports) == 1
    x = np.arange(6, dtype="float32")
    out = VirtualMachine(mod, kiln.cpu(0)).run(x)
    np.testing.assert_allclose(out.numpy(), expected(x), rtol=1e-6)


FRESH_PROCESS = """
import json, sys
import numpy as np
import kiln.runtime
import kiln.runtime.vm
mod = kiln.runtime.load_module(sys.argv[1])
vm = kiln.runtime.vm.VirtualMachine(mod, kiln.runtime.cpu(0))
out = vm.run(np.arange(6, dtype="float32"))
others = sorted(m for m in sys.modules if m.startswith("kiln.") and
                not m.startswith("kiln.runtime") and m != "kiln._lazy")
print(json.dumps({"out": out.numpy().tolist(), "other_kiln_modules": others}))
"""


def test_exported_library_runs_in_a_fresh_process_with_only_the_runtime(exported):
    proc = subprocess.run([sys.executable, "-c", FRESH_PROCESS, str(exported)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["other_kiln_modules"] == []
    np.testing.assert_allclose(result["out"], expected(np.arange(6, dtype="float32")),
                               rtol=1e-6)


def test_save_code_and_lib_then_load_exec(kernels):
    code, lib = scale_and_shift(kernels).save()
    exe = Executable.load_exec(code, lib)
    x = np.full(6, 2.0, dtype="float32")
    np.testing.assert_allclose(VirtualMachine(exe, kiln.cpu(0)).run(x).numpy(), expected(x),
                               rtol=1e-6)


def test_code_file_plus_exported_kernel_library(kernels, tmp_path):
    """TVM's two-artifact flow: ``code.ro`` bytes and ``lib.so``, loaded back separately."""
    code, lib = scale_and_shift(kernels).save()
    (tmp_path / "code.ro").write_bytes(code)
    lib.export_library(str(tmp_path / "lib.so"))
    loaded_lib = load_module(str(tmp_path / "lib.so"))
    loaded_code = bytearray((tmp_path / "code.ro").read_bytes())
    exe = Executable.load_exec(loaded_code, loaded_lib)
    x = np.linspace(0, 1, 6, dtype="float32")
    np.testing.assert_allclose(VirtualMachine(exe, kiln.cpu(0)).run(x).numpy(), expected(x),
                               rtol=1e-6)
