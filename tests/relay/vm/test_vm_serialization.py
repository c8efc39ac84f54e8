"""Compiled executables survive save → load and export_library → load_module (in a fresh
process) and compute the same results (oracle: the in-process run and NumPy)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.runtime.vm import Executable, VirtualMachine


@pytest.fixture(scope="module")
def program():
    """A dynamic-batch dense + a data-dependent branch + a constant, compiled once."""
    x = relay.var("x", shape=(relay.Any(), 4))
    w = relay.var("w", shape=(3, 4))
    y = relay.nn.relu(relay.nn.dense(x, w))
    positive = relay.greater(relay.sum(y), relay.const(10.0))
    body = relay.If(positive, relay.multiply(y, relay.const(np.float32(0.5))),
                    relay.add(y, relay.const(np.arange(3, dtype="float32"))))
    mod = kiln.IRModule.from_expr(relay.Function([x, w], relay.Tuple([body, x])))
    return relay.vm.compile(mod, "c")


def _inputs(rows):
    rng = np.random.default_rng(rows)
    return (rng.standard_normal((rows, 4), dtype="float32"),
            rng.standard_normal((3, 4), dtype="float32"))


def _expected(x, w):
    y = np.maximum(x @ w.T, 0)
    return y * 0.5 if y.sum() > 10.0 else y + np.arange(3, dtype="float32")


@pytest.mark.parametrize("rows", [1, 40])
def test_save_load_runs_identically(program, rows):
    x, w = _inputs(rows)
    before = VirtualMachine(program, kiln.cpu(0)).run(x, w)[0].numpy()
    code, lib = program.save()
    loaded = Executable.load_exec(code, lib)
    after = VirtualMachine(loaded, kiln.cpu(0)).run(x, w)[0].numpy()
    np.testing.assert_array_equal(after, before)
    np.testing.assert_allclose(before, _expected(x, w), rtol=1e-5, atol=1e-6)
    assert loaded.bytecode == program.bytecode


def test_loading_tampered_bytecode_is_a_clear_error(program):
    code, lib = program.save()
    with pytest.raises(kiln.TVMError):
        Executable.load_exec(bytes(code[: len(code) // 2]), lib)


def test_export_library_then_load_module_in_a_fresh_process(program, tmp_path):
    x, w = _inputs(5)
    path = str(tmp_path / "model.so")
    program.mod.export_library(path)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.runtime.vm import VirtualMachine
        mod = kiln.runtime.load_module({path!r})
        vm = VirtualMachine(mod, kiln.cpu(0))
        x, w = np.load({str(tmp_path / "x.npy")!r}), np.load({str(tmp_path / "w.npy")!r})
        np.save({str(tmp_path / "out.npy")!r}, vm.run(x, w)[0].numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, env=dict(os.environ),
                   timeout=120)
    here = VirtualMachine(program, kiln.cpu(0)).run(x, w)[0].numpy()
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), here)


def test_compiling_twice_gives_identical_bytecode():
    def build():
        x = relay.var("x", shape=(relay.Any(), 4))
        w = relay.var("w", shape=(3, 4))
        y = relay.nn.relu(relay.nn.dense(x, w))
        mod = kiln.IRModule.from_expr(relay.Function([x, w], relay.Tuple([y, relay.exp(y)])))
        return relay.vm.compile(mod, "c").save()[0]

    assert build() == build()
