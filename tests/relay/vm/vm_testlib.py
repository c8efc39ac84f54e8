"""Helpers for the VM compiler tests: run a module on the VM and on the reference interpreter."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import relay
from kiln.relay.backend.interpreter import ConstructorValue, Interpreter
from kiln.runtime.container import ADT
from kiln.runtime.ndarray import NDArray
from kiln.runtime.vm import VirtualMachine

TARGET = "c"


def plain(value):
    """VM and interpreter results as comparable Python values (arrays, tag/field tuples)."""
    if isinstance(value, NDArray):
        return value.numpy()
    if isinstance(value, ConstructorValue):
        return ("adt", value.tag, [plain(f) for f in value.fields])
    if isinstance(value, ADT):
        return ("adt", value.tag, [plain(f) for f in value.fields])
    if isinstance(value, tuple | list):
        return ("adt", 0, [plain(f) for f in value])
    return value


def assert_same(actual, expected, rtol=1e-5, atol=1e-5):
    _compare(plain(actual), plain(expected), rtol, atol)


def _compare(actual, expected, rtol, atol):
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple), f"expected an ADT, got {actual!r}"
        # tuples are tag 0 in the VM; constructors compare by tag
        assert actual[1] == expected[1] and len(actual[2]) == len(expected[2])
        for a, e in zip(actual[2], expected[2]):
            _compare(a, e, rtol, atol)
        return
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    assert np.asarray(actual).dtype == np.asarray(expected).dtype


def compile_vm(mod):
    exe = relay.vm.compile(mod, TARGET)
    return exe, VirtualMachine(exe, kiln.cpu(0))


def check_against_interpreter(mod, *args):
    """Compile ``mod`` for the VM, run it on ``args`` and compare with the interpreter."""
    exe, vm = compile_vm(mod)
    expected = Interpreter(mod).evaluate()(*args)
    assert_same(vm.run(*args), expected)
    return exe, vm
